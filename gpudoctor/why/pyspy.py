"""Running py-spy against a process, and what its failures mean (one line and an exit code).

py-spy (a dependency) reads another process's Python stacks from its memory without stopping
it (``--nonblocking``). It needs permission to read that memory (ptrace): the same user, or
root, and in a container the ``SYS_PTRACE`` capability.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from typing import Sequence

from gpudoctor.core import exitcodes
from gpudoctor.core.errors import GpudoctorError

DEFAULT_RATE_HZ = 100
MAX_STDERR_CHARS = 20_000
MAX_OUTPUT_BYTES = 64 << 20  # a raw recording larger than this is cut (it is counts, so never near)

NO_SUCH_PROCESS = "no_such_process"
NOT_PYTHON = "not_python"
UNSUPPORTED_PYTHON = "unsupported_python"
NO_PERMISSION = "no_permission"
ENDED = "ended"
NO_PY_SPY = "no_py_spy"
FAILED = "failed"

_EXIT = {NO_SUCH_PROCESS: exitcodes.USAGE, NOT_PYTHON: exitcodes.USAGE,
         UNSUPPORTED_PYTHON: exitcodes.CANNOT_ATTACH, NO_PERMISSION: exitcodes.CANNOT_ATTACH,
         NO_PY_SPY: exitcodes.CANNOT_ATTACH, FAILED: exitcodes.CANNOT_ATTACH, ENDED: exitcodes.PROCESS_ENDED}

PERMISSION_FIX = ("run gpudoctor why as the process's user or as root; in a container add the capability "
                  "(docker run --cap-add SYS_PTRACE, Kubernetes securityContext.capabilities.add: [SYS_PTRACE]); "
                  "on the host, kernel.yama.ptrace_scope=1 lets only a parent attach: "
                  "sudo sysctl kernel.yama.ptrace_scope=0, or run as root")


class WhyError(GpudoctorError):
    """Sampling could not start or finish; ``kind`` names why, ``exit_code`` is documented."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.exit_code = _EXIT.get(kind, exitcodes.CANNOT_ATTACH)


def find_py_spy() -> str:
    """The py-spy executable: next to this Python (a virtual environment's bin), the install's
    scripts directory, or on PATH."""
    names = ("py-spy.exe", "py-spy") if os.name == "nt" else ("py-spy",)
    folders = [os.path.join(sys.prefix, "bin"), os.path.dirname(sys.executable),
               sysconfig.get_path("scripts") or "", os.path.join(sys.base_prefix, "bin")]
    for folder in folders:
        for name in names:
            path = os.path.join(folder, name)
            if folder and os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    found = shutil.which("py-spy")
    if found:
        return found
    raise WhyError(NO_PY_SPY, "py-spy not found next to this Python or on PATH: pip install py-spy")


def record_command(py_spy: str, pid: int, seconds: float, rate: int, output: str) -> list[str]:
    """``py-spy record`` writing raw collapsed stacks of every thread (idle ones too) of ``pid``
    and its subprocesses (DataLoader workers, torchrun's ranks) to ``output``."""
    return [py_spy, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
            "--rate", str(rate), "--format", "raw", "--threads", "--idle", "--subprocesses",
            "--full-filenames", "--nonblocking", "--output", output]


def dump_command(py_spy: str, pid: int) -> list[str]:
    """``py-spy dump`` of the one process: its error says why a recording found no Python."""
    return [py_spy, "dump", "--pid", str(pid), "--nonblocking"]


def _error_lines(stderr: str) -> list[str]:
    lines = [line.strip() for line in stderr[:MAX_STDERR_CHARS].splitlines()]
    return [line for line in lines if line and not line.startswith("py-spy>")
            and not re.match(r"^\d+: ", line) and line not in ("Stack backtrace:", "Caused by:")]


def stopped_because_exited(stderr: str) -> bool:
    return "process exited" in stderr[:MAX_STDERR_CHARS]


def error_from_stderr(stderr: str, pid: int, *, alive: bool = True) -> WhyError:
    """What a failed py-spy run means, from its stderr (tested on py-spy 0.3-0.4's messages)."""
    text = stderr[:MAX_STDERR_CHARS]
    low = text.lower()
    if "permission denied" in low or "operation not permitted" in low or "eperm" in low:
        return WhyError(NO_PERMISSION, f"no permission to read process {pid}'s memory: {PERMISSION_FIX}")
    if "unsupported version of python" in low or "for py_debugoffsets" in low:
        version = re.search(r"python[: ]+v?(\d+\.\d+(?:\.\d+)?)", text, re.IGNORECASE)
        seen = f" ({version.group(1)})" if version else ""
        return WhyError(UNSUPPORTED_PYTHON, f"process {pid} runs a Python version{seen} this py-spy cannot read: "
                                            "pip install -U py-spy")
    if not alive or ("no such file or directory" in low and "executable" in low) or "no such process" in low:
        return WhyError(NO_SUCH_PROCESS if not alive else ENDED, f"process {pid} ended before it could be sampled")
    if "failed to find python version" in low or "failed to find a python interpreter" in low \
            or "doesn't look like a python" in low or "no python processes found" in low or "failed to get python version" in low:
        return WhyError(NOT_PYTHON, f"process {pid} is not a Python process (py-spy found no Python interpreter in it)")
    lines = _error_lines(text)
    first = lines[0] if lines else "no message"
    return WhyError(FAILED, f"py-spy could not sample process {pid}: {first[:300]}")


def start_record(command: Sequence[str]) -> subprocess.Popen:
    env = dict(os.environ, RUST_BACKTRACE="0")
    return subprocess.Popen(list(command), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            text=True, errors="replace")


__all__ = ["WhyError", "find_py_spy", "record_command", "dump_command", "error_from_stderr", "stopped_because_exited",
           "start_record", "DEFAULT_RATE_HZ", "PERMISSION_FIX", "NO_SUCH_PROCESS", "NOT_PYTHON",
           "UNSUPPORTED_PYTHON", "NO_PERMISSION", "ENDED", "NO_PY_SPY", "FAILED"]
