"""Train one model from several processes at once, as pytorch/examples' mnist_hogwild does: the
model's parameters in shared memory (``model.share_memory()``), ``multiprocessing.Process``
trainers that each run their own loop on it, and the parent waiting in ``p.join()``.

    python hogwild.py [--processes 2] [--start-method fork|spawn] [--seconds 0] [--steps 0]

Each trainer prints ``ready`` once its loop runs. ``gpudoctor why`` on the parent must judge the
trainers (not the waiting parent), and use no rank or collective words: there are no ranks.
"""

import sys

import torch
import torch.multiprocessing as mp
from torch import nn

from _harness import StepClock, parser as harness_parser


def train(rank, args, model):
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    data, target = torch.randn(64, 256), torch.randint(0, 10, (64,))
    clock = StepClock(args)
    while True:
        optimizer.zero_grad()
        output = model(data)  # HOGWILD FORWARD
        loss = nn.functional.cross_entropy(output, target)
        loss.backward()
        optimizer.step()
        if clock.tick():
            return


if __name__ == "__main__":
    options = harness_parser(__doc__, 64)
    options.add_argument("--processes", type=int, default=2)
    options.add_argument("--start-method", choices=("fork", "spawn"), default="fork")
    args = options.parse_args()
    mp.set_start_method(args.start_method)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    model.share_memory()
    processes = []
    for rank in range(args.processes):
        p = mp.Process(target=train, args=(rank, args, model))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()  # PARENT JOIN
    failed = [(p.pid, p.exitcode) for p in processes if p.exitcode != 0]
    if failed:
        sys.exit(f"trainers ended with a failure (pid, exit code): {failed}")
