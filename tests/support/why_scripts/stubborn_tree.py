"""A training loop that leaves behind the processes that are hardest to stop, as real jobs do: a
helper that starts a grandchild which ignores SIGINT and SIGTERM (which itself starts one more), a
child that left the job's session with ``os.setsid()``, and a daemon made by a double fork (its
parent gone, it belongs to no one the job still knows of). Neither of the last two takes SIGINT.

    python stubborn_tree.py [--seconds 0] [--steps 0] --marks FOLDER

Each of those processes writes ``ROLE.pid`` into FOLDER once it runs; the loop starts (and prints
``ready``) once all of them are there. ``gpudoctor why --then stop`` must end every one of them.
"""

import os
import signal
import subprocess
import sys
import time

ROLES = ("relay", "stubborn", "deepest", "session", "daemon")


def _mark(folder, role):
    path = os.path.join(folder, f"{role}.pid")
    with open(path + ".tmp", "w", encoding="ascii") as handle:
        handle.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def _again(role, folder):
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", role, "--marks", folder])


def _forever():
    while True:
        time.sleep(0.05)


def _role(role, folder):
    if role == "relay":  # waits for the grandchild it started, as a launcher does
        child = _again("stubborn", folder)
        _mark(folder, role)
        child.wait()
    elif role == "stubborn":  # only SIGKILL ends it; it starts one more process below itself
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _again("deepest", folder)
        _mark(folder, role)
        _forever()
    elif role == "session":  # a session and a process group of its own: no group signal reaches it
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _mark(folder, role)
        _forever()
    elif role == "forker":  # the classic double fork: the daemon's parents are gone at once
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _mark(folder, "daemon")
                _forever()
            os._exit(0)
        os.wait()
    else:  # deepest
        _mark(folder, role)
        _forever()


def _train(args):
    import torch
    from torch import nn

    from _harness import StepClock

    processes = [_again(role, args.marks) for role in ("relay", "session", "forker")]
    deadline = time.monotonic() + 240  # a bound for start-up on a loaded machine; the wait ends on the marks
    while not all(os.path.exists(os.path.join(args.marks, f"{role}.pid")) for role in ROLES):
        if time.monotonic() > deadline:
            sys.exit("the helpers did not start")
        time.sleep(0.05)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data, target = torch.randn(32, 128), torch.randint(0, 10, (32,))
    clock = StepClock(args)
    while True:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(data), target).backward()
        optimizer.step()
        if clock.tick():
            break
    for process in processes:
        process.wait()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _harness import parser as harness_parser

    options = harness_parser(__doc__, 32)
    options.add_argument("--marks", required=True)
    options.add_argument("--role", default=None)
    arguments = options.parse_args()
    if arguments.role:
        _role(arguments.role, arguments.marks)
    else:
        _train(arguments)
