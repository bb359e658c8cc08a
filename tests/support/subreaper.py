"""A subreaper for the process-tree tests: it runs a scenario in a child, then reaps and counts
what is left below itself (what a stop left behind)."""

# Subreaper: runs the scenario, then reaps and counts what is left below itself.
REAPER = r"""
import ctypes, json, os, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
sys.path.insert(0, {root!r})
from gpudoctor.system import _proc
run = subprocess.run([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], capture_output=True, text=True, timeout=280)
def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
left = []
deadline = time.monotonic() + 10  # a generous bound for a SIGTERM already sent to land
while time.monotonic() < deadline:
    reap()
    left = [p for p in _proc.descendants(os.getpid()) if _proc._alive(p)]
    if not left:
        break
    time.sleep(0.1)
commands = []
for p in left:
    try:
        commands.append(open(f"/proc/{{p}}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:200])
    except OSError:
        pass
    try:
        os.kill(p, 9)
    except OSError:
        pass
reap()
print(json.dumps({{"code": run.returncode, "stderr": run.stderr[-3000:], "left": commands}}))
"""
