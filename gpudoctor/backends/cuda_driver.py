"""Whether the CUDA driver itself starts: ``cuInit`` and ``cuDeviceGetCount`` from libcuda, asked in a
child process, with no torch and no CUDA context.

NVML (libnvidia-ml) can answer while CUDA (libcuda) cannot start: a container given the driver's
``utility`` capability but not ``compute``, the fabric manager not running on an NVSwitch board
(CUDA_ERROR_SYSTEM_NOT_READY), a kernel module and user-space driver of different versions after
an upgrade without a reboot, the toolkit's stub libcuda on LD_LIBRARY_PATH, a driver fault that
leaves cuInit answering CUDA_ERROR_UNKNOWN. Then nvidia-smi looks healthy and every CUDA program
fails. The quick report (which never imports torch), the full report, the exporter and the TUI all
judge this one fact with :func:`gpudoctor.backends.cuda_compat.cuda_start_findings`, so they agree.

The call runs in a child process with a time limit: cuInit loads the driver into the calling
process and can take seconds on a node without persistence mode, or hang on a faulty GPU; the
monitor's own process stays free of it. Linux only (libcuda.so.1).

Two ways to ask: :func:`cuda_start` waits for the answer; :func:`begin_cuda_start` starts the child
and returns at once, so the caller (the quick report) runs its NVML probes while the driver starts
and pays the longer of the two, not their sum. A process with one thread forks the child (no new
interpreter: about a millisecond, where starting Python costs tens); one with other threads starts
``sys.executable`` instead, as forking a threaded process can deadlock in the child. Either child
answers within :data:`TIMEOUT_S` or is killed, and the report says "not answered in N s".
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import TYPE_CHECKING

from gpudoctor.system import _cpuwait
from gpudoctor.core import findings
from gpudoctor.core._num import is_number
from gpudoctor.core._record import record
from gpudoctor.backends.na import NA, is_na
from gpudoctor.core.model import Finding

if TYPE_CHECKING:
    from .stack import Container

#: Seconds the child gets before the report goes on without it ("not answered in 5 s", a warning):
#: a healthy driver answers in well under a second with persistence mode on; a report that waits
#: longer only holds a provisioning script on a node that has a problem worth the warning.
TIMEOUT_S = 5.0
#: The child prints one short JSON line; anything longer is not its answer.
MAX_OUTPUT_BYTES = 4096
LIBRARY = "libcuda.so.1"

# The child's work, as source: the forked child runs it in the process it copied; a started
# interpreter gets it with -c. Nothing but ctypes (and time, json): no torch, no gpudoctor.
_ASK = r"""
import ctypes, json, time
def ask():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return {"loaded": False, "error": str(exc)[:300]}
    def name_of(code):
        text = ctypes.c_char_p()
        try:
            if lib.cuGetErrorName(code, ctypes.byref(text)) == 0 and text.value:
                return text.value.decode("ascii", "replace")[:80]
        except AttributeError:
            pass
        return ""
    out = {"loaded": True}
    began = time.perf_counter()
    code = lib.cuInit(0)
    out["init_s"] = round(time.perf_counter() - began, 6)
    out["init_code"], out["init_name"] = code, name_of(code) if code else ""
    version = ctypes.c_int(0)
    if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
        out["driver_cuda"] = version.value
    if code == 0:
        count = ctypes.c_int(-1)
        got = lib.cuDeviceGetCount(ctypes.byref(count))
        out["count_code"], out["device_count"] = got, count.value if got == 0 else None
    out["done_at"] = time.monotonic()  # the system's one monotonic clock: the parent times the check by it
    return out
"""
_CHILD = _ASK + "print(json.dumps(ask()))\n"


@record(frozen=True)
class CudaStart:
    """The CUDA driver's answer. ``loaded``: libcuda could be loaded; ``code``/``name``: cuInit's
    CUresult (0: started); ``device_count``: what cuDeviceGetCount saw (after CUDA_VISIBLE_DEVICES);
    ``driver_cuda``: cuDriverGetVersion (e.g. 13000); ``error``: the loader's message.
    ``init_s``: seconds cuInit took in the child; ``elapsed_s``: seconds from starting the child to
    its answer (what the check cost; the quick report runs its NVML probes meanwhile)."""

    loaded: bool
    code: int | None = None
    name: str = ""
    device_count: int | None = None
    driver_cuda: int | None = None
    error: str = ""
    init_s: float | None = None
    elapsed_s: float | None = None

    @property
    def started(self) -> bool:
        return self.loaded and self.code == 0 and (self.device_count or 0) > 0

    def to_dict(self) -> dict[str, object]:
        return {"loaded": self.loaded, "code": self.code, "name": self.name, "device_count": self.device_count,
                "driver_cuda": self.driver_cuda, "error": self.error, "init_s": self.init_s,
                "elapsed_s": self.elapsed_s}


class CudaTimeout(NA):
    """No answer within ``limit_s`` seconds: NA("Timeout"), which says how long it was given."""

    __slots__ = ("limit_s",)

    def __init__(self, limit_s: float) -> None:
        super().__init__("Timeout")
        self.limit_s = limit_s


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and -2**31 <= value < 2**31 else None


def _text(value: object, limit: int) -> str:
    text = value if isinstance(value, str) else ""
    return "".join(ch for ch in text if ch.isprintable())[:limit]


def _seconds(value: object) -> float | None:
    return float(value) if is_number(value) and 0 <= value < 1e6 else None


def parse_answer(raw: str, began: float | None = None) -> CudaStart | NA:
    """The child's JSON line, checked field by field (it is data from another process). ``began``:
    when the child was started (time.monotonic), to time the check by its answer's ``done_at``."""
    try:
        data = json.loads(raw.strip().splitlines()[-1]) if raw.strip() else None
    except (ValueError, IndexError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("loaded"), bool):
        return NA("BadAnswer")
    if not data["loaded"]:
        return CudaStart(loaded=False, error=_text(data.get("error"), 300))
    code = _int_or_none(data.get("init_code"))
    if code is None:
        return NA("BadAnswer")
    count = _int_or_none(data.get("device_count"))
    done_at = _seconds(data.get("done_at"))
    return CudaStart(loaded=True, code=code, name=_text(data.get("init_name"), 80),
                     device_count=count if count is None or count >= 0 else None,
                     driver_cuda=_int_or_none(data.get("driver_cuda")), init_s=_seconds(data.get("init_s")),
                     elapsed_s=_seconds(round(done_at - began, 6)) if done_at is not None and began is not None
                     else None)


def cuda_start(timeout_s: float = TIMEOUT_S) -> CudaStart | NA:
    """Ask the CUDA driver to start, in a child interpreter, and wait for the answer. NA: not Linux,
    the child did not answer in time (a :class:`CudaTimeout`, itself a finding), or its answer was
    unreadable."""
    if not sys.platform.startswith("linux"):
        return NA("NotLinux")
    return _Spawned(timeout_s).answer()


def begin_cuda_start(timeout_s: float = TIMEOUT_S) -> PendingCudaStart:
    """Start asking the CUDA driver and return at once; ``.answer()`` waits (at most until
    ``timeout_s`` after this call) and gives what :func:`cuda_start` gives. Forks when this process
    has one thread (no interpreter to start), else starts ``sys.executable``."""
    if not sys.platform.startswith("linux"):
        return Answered(NA("NotLinux"))
    from gpudoctor.system._fork import one_thread

    return _Forked(timeout_s) if one_thread() else _Spawned(timeout_s)


class PendingCudaStart:
    """A CUDA start asked and not yet read: :meth:`answer` waits for it (once; then cached)."""

    def answer(self) -> CudaStart | NA:
        raise NotImplementedError

    def cancel(self) -> None:
        """Stop the child if it still runs (the report was interrupted)."""


class Answered(PendingCudaStart):
    """An answer known already (not Linux, a test's preset)."""

    def __init__(self, value: CudaStart | NA) -> None:
        self.value = value

    def answer(self) -> CudaStart | NA:
        return self.value


class _Forked(PendingCudaStart):
    """The child is a fork of this (one-thread) process (gpudoctor.system._fork): it asks libcuda and
    writes one JSON line."""

    def __init__(self, timeout_s: float) -> None:
        from gpudoctor.system._fork import ForkedCall

        self.limit_s = timeout_s
        self.value: CudaStart | NA | None = None
        self.call = ForkedCall(_ask_in_this_process, limit_s=timeout_s, max_bytes=MAX_OUTPUT_BYTES)

    def answer(self) -> CudaStart | NA:
        if self.value is None:
            text, why = self.call.answer()
            self.value = (CudaTimeout(self.limit_s) if why == "Timeout" else NA(why) if why
                          else parse_answer(text, self.call.began))
        return self.value

    def cancel(self) -> None:
        self.call.cancel()


def _ask_in_this_process() -> str:
    """The child's work, in the forked child."""
    namespace: dict[str, object] = {}
    exec(_ASK, namespace)  # noqa: S102 (our own constant source)
    return json.dumps(namespace["ask"]()) + "\n"  # type: ignore[operator]


class _Spawned(PendingCudaStart):
    """The child is a new ``sys.executable`` (this process has other threads, or a caller waits)."""

    def __init__(self, timeout_s: float) -> None:
        import subprocess

        from gpudoctor.system import _proc

        self.began = time.monotonic()
        self.limit_s = timeout_s
        self.value: CudaStart | NA | None = None
        try:  # its own process group, registered so an exit ends it with its tree (gpudoctor.system._proc)
            with _proc.starting():
                self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                    [sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL, env=dict(os.environ),
                    start_new_session=_proc.NEW_GROUP["start_new_session"])
                _proc.track(self.proc.pid)
        except OSError:
            self.proc, self.value = None, NA("ChildFailed")
        # the limit leaves out the time the child waited for a CPU (starting Python on a busy node)
        self.limit = _cpuwait.of_process(timeout_s, self.proc.pid if self.proc is not None else None)

    def _communicate(self) -> bytes | None:
        """The child's output, or None when it ran past its limit."""
        import subprocess

        assert self.proc is not None
        while (left := self.limit.left()) > 0:
            try:
                return self.proc.communicate(timeout=min(left, 0.5))[0]
            except subprocess.TimeoutExpired:
                continue
        return None

    def answer(self) -> CudaStart | NA:
        if self.value is None and self.proc is not None:
            out = self._communicate()
            if out is None:
                self.cancel()
                self.value = CudaTimeout(self.limit_s)
            else:
                self.value = (parse_answer(out[:MAX_OUTPUT_BYTES].decode("utf-8", "replace"), self.began)
                              if self.proc.returncode == 0 else NA("ChildFailed"))
                from gpudoctor.system import _proc

                _proc.untrack(self.proc.pid)
            self.proc = None
        assert self.value is not None
        return self.value

    def cancel(self) -> None:
        if self.proc is not None:
            from gpudoctor.system import _proc

            _proc.stop_popen(self.proc, grace_s=0.5)  # its group and tree; reaped, untracked
            self.proc = None


#: CUDA_ERROR_SYSTEM_NOT_READY: on an NVSwitch board, the fabric manager has not registered the GPUs.
SYSTEM_NOT_READY = 802

# CUresult codes cuInit answers with on real machines, each with its usual cause and fix: worded in
# gpudoctor.core.findings.CUDA_START_CAUSES. Any other code gets the generic fix below.
_CAUSES = findings.CUDA_START_CAUSES
_GENERIC_FIX = findings.CUDA_START_GENERIC_FIX


# The same errors as the CUDA runtime and torch print them (the runtime's cudaError codes for these
# equal the driver's CUresult codes): phrases first, then a number after "error" or "code".
_PHRASES = (("system not yet initialized", 802), ("systemnotready", 802), ("system_not_ready", 802),
            ("unsupported display driver / cuda driver combination", 803), ("drivermismatch", 803),
            ("stub library", 34), ("busy or unavailable", 46), ("no cuda-capable device", 100),
            ("cuda unknown error", 999))
_CODE_RE = re.compile(r"(?:error|code)\D{0,4}(\d{2,3})\b", re.IGNORECASE)


def cause_of_error_text(text: object, fabric: str = "") -> tuple[str, str] | None:
    """(cause, fix) for a CUDA start-up error as torch or the runtime printed it, when it is one of
    the known causes; None otherwise. ``fabric`` as for :func:`cuda_start_findings`."""
    code = code_of_error_text(text)
    if code is None:
        return None
    cause, fix = _CAUSES[code]
    if code == SYSTEM_NOT_READY and fabric:
        cause = f"the fabric manager has not set the GPUs up: {fabric}"
    return cause, fix


def code_of_error_text(text: object) -> int | None:
    """The CUresult of a known cause that a CUDA start-up error's text names, or None."""
    if not isinstance(text, str) or not text:
        return None
    lowered = text[:2000].lower()
    for phrase, code in _PHRASES:
        if phrase in lowered:
            return code
    for found in _CODE_RE.finditer(lowered):
        if int(found.group(1)) in _CAUSES:
            return int(found.group(1))
    return None


def cuda_start_findings(start: CudaStart | NA | None, visible: int, fabric: str = "",
                        box: Container | None = None) -> list[Finding]:
    """The verdict on the CUDA driver's start where NVML shows ``visible`` GPUs (after
    CUDA_VISIBLE_DEVICES). Shared by the quick and the full report; nothing when there is no
    GPU to start or the fact is unknown (not Linux, a recording without it). ``fabric``: what NVML
    says of the GPUs' NVLink fabric registration when it is unfinished
    (gpudoctor.core.findings.fabric_not_completed): for error 802 that is the cause, named as such. ``box``:
    the container this runs in (gpudoctor.backends.stack), whose driver capabilities explain a missing
    libcuda."""
    if start is None or visible <= 0:
        return []
    why = findings.CUDA_NOT_STARTING
    if is_na(start):
        if start.reason == "Timeout":
            limit = start.limit_s if isinstance(start, CudaTimeout) else TIMEOUT_S
            return [findings.finding("cuda_start_hung", limit=limit)]
        if start.reason == "ChildFailed":
            return [findings.finding("cuda_start_crashed", fix=_GENERIC_FIX)]
        return []
    if not start.loaded:
        return [_no_libcuda(start, visible, why, box)]
    if start.code != 0:
        cause, fix = _CAUSES.get(start.code or 0, ("", _GENERIC_FIX))
        if start.code == SYSTEM_NOT_READY and fabric:
            cause = findings.FABRIC_CAUSE.format(fabric=fabric)
        return [findings.finding("cuda_cannot_start:error_cause" if cause else "cuda_cannot_start:error",
                                 visible=visible, name=start.name or "CUDA error", number=start.code, cause=cause,
                                 fix=fix)]
    if start.device_count == 0:
        cause, fix = _CAUSES[100]
        return [findings.finding("cuda_cannot_start:none_counted", visible=visible, cause=cause, fix=fix)]
    return []


def _no_libcuda(start: CudaStart, visible: int, why: str, box: Container | None) -> Finding:
    """libcuda cannot be loaded where NVML answers. In a container: its driver capabilities lacked
    `compute` (the runtime mounted no libcuda); were left to the runtime's default (documented as
    utility,compute, `utility` alone in older toolkits and enroot); or asked for compute and libcuda
    was still not mounted (a CDI spec without it, a failed hook or mount)."""
    def cannot_start(way: str, engine: str = "", capabilities: str = "") -> Finding:
        return findings.finding(f"cuda_cannot_start:{way}", label="", visible=visible, library=LIBRARY,
                                error=start.error or "not found", why=why, engine=engine, capabilities=capabilities)

    if box is None or not box.inside:
        return cannot_start("no_libcuda")
    caps = box.capability_list()
    if caps is None:  # unset or empty: the runtime's default, `utility` alone in older toolkits and enroot
        return cannot_start("container_default_capabilities", engine=box.kind or "")
    return cannot_start("libcuda_not_mounted" if caps & {"compute", "all"} else "container_without_compute",
                engine=box.kind or "", capabilities=(box.capabilities or "").strip()[:60])


__all__ = ["Answered", "CudaStart", "CudaTimeout", "LIBRARY", "PendingCudaStart", "begin_cuda_start",
           "SYSTEM_NOT_READY", "TIMEOUT_S", "cause_of_error_text", "code_of_error_text",
           "cuda_start", "cuda_start_findings", "parse_answer"]
