"""torch helpers for the training-loop hooks: CUDA-event step timers, host-sync counting,
allocator statistics and torch.distributed facts.

Nothing here imports torch at module import time; the rest of :mod:`gpudoctor.hooks`
reaches torch only through these functions, so ``import gpudoctor`` stays free of torch
(tests/project/test_contracts.py checks it). None of the helpers that run once per step
synchronises the device: events are recorded, and later *queried*, never waited on.
"""

from __future__ import annotations

import linecache
import logging
import os
import sys
import sysconfig
import threading
import warnings
from collections import deque
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, Callable, TextIO

from gpudoctor.backends.na import NA
from gpudoctor.backends.torch_build import TORCH_EXTRA_HINT

if TYPE_CHECKING:
    import torch as _torch

log = logging.getLogger("gpudoctor.hooks")


def loaded_torch() -> Any:
    """torch if the user's program has already imported it, else None (never imports it)."""
    return sys.modules.get("torch")


def require_torch() -> Any:
    try:
        import torch
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ModuleNotFoundError(f"gpudoctor's training hooks need torch: {TORCH_EXTRA_HINT}",
                                  name="torch") from None
    return torch


# -- which device a monitor watches -------------------------------------------------------

def resolve_device(device: _torch.device | str | int | None = None) -> tuple[str, int | None]:
    """``(type, index)`` for ``device`` (None, "cuda", "cuda:1", 1, torch.device).

    None means "what this process trains on": the current CUDA device when torch is
    loaded and CUDA is usable, else the CPU. Under an initialised ``torch.distributed``
    job whose ``LOCAL_RANK`` names another GPU than the current device (a launcher that
    did not call ``torch.cuda.set_device``), it is ``cuda:LOCAL_RANK``: watching the
    current device (GPU 0) would measure another rank's GPU and open an extra CUDA
    context there from every rank. Only inspects; starts CUDA only when it is already
    available and asked about.
    """
    if device is None:
        torch = loaded_torch()
        if torch is not None and _cuda_usable(torch):
            current = int(torch.cuda.current_device())
            local = _distributed_local_rank(torch)
            if local is not None and local != current:
                log.info("gpudoctor: torch.distributed is initialised with LOCAL_RANK=%d but the current "
                         "CUDA device is %d; watching cuda:%d (pass device= to choose)", local, current, local)
                return "cuda", local
            return "cuda", current
        return "cpu", None
    if isinstance(device, int):
        return "cuda", device
    text = str(device)
    kind, _, index = text.partition(":")
    if kind == "cuda":
        torch = require_torch()
        if not _cuda_usable(torch):
            return "cuda-unavailable", int(index) if index.isdigit() else None
        return "cuda", int(index) if index.isdigit() else int(torch.cuda.current_device())
    return kind, int(index) if index.isdigit() else None


def _distributed_local_rank(torch: ModuleType) -> int | None:
    """``LOCAL_RANK`` as a CUDA index, when torch.distributed is initialised and it names a GPU."""
    text = os.environ.get("LOCAL_RANK", "")
    if not text.strip().isdigit():
        return None
    try:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return None
        local = int(text)
        return local if local < int(torch.cuda.device_count()) else None
    except Exception:
        return None


def _cuda_usable(torch: ModuleType) -> bool:
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def cuda_pci_bus_id(index: int) -> str | None:
    """PCI bus id of torch's CUDA device ``index`` ('0000:65:00.0'), to find it in NVML."""
    from gpudoctor.backends.torch_cuda import device_properties

    try:
        return device_properties(require_torch(), index).get("pci_bus_id")
    except Exception:
        return None


# -- step times from CUDA events ----------------------------------------------------------

class CudaEventTimer:
    """Times steps on the device with pairs of CUDA events, resolved lazily.

    ``begin()``/``end()`` record an event on the current stream (no wait). Finished
    pairs are read with ``cudaEventQuery``, which never blocks, a few at a time in
    ``poll()``; event objects are reused. ``drain()`` waits for what is still queued
    and is meant for the end of training (``summary()``), not for the loop.
    """

    def __init__(self, index: int, max_pending: int = 1024, torch: ModuleType | None = None) -> None:
        torch = torch if torch is not None else require_torch()
        self._torch = torch
        self._index = index
        self._event_cls = torch.cuda.Event
        self._current_stream = torch.cuda.current_stream
        self._pending: deque[tuple[Any, Any]] = deque()
        self._free: list[Any] = []
        self._start: Any = None
        self._max_pending = max_pending
        self.times_s: list[float] = []
        self.dropped = 0

    def _event(self) -> Any:
        if self._free:
            return self._free.pop()
        return self._event_cls(enable_timing=True)

    def begin(self) -> None:
        event = self._event()
        event.record(self._current_stream(self._index))
        self._start = event

    def end(self) -> None:
        start = self._start
        if start is None:
            return
        self._start = None
        event = self._event()
        event.record(self._current_stream(self._index))
        if len(self._pending) >= self._max_pending:
            # The device is far behind the host; forget the oldest pair rather than wait.
            old_start, old_end = self._pending.popleft()
            self._free.extend((old_start, old_end))
            self.dropped += 1
        self._pending.append((start, event))
        self.poll(2)

    def cancel(self) -> None:
        if self._start is not None:
            self._free.append(self._start)
            self._start = None

    def poll(self, limit: int | None = None) -> int:
        """Read up to ``limit`` finished pairs without blocking; returns how many were read."""
        pending = self._pending
        done = 0
        while pending and (limit is None or done < limit):
            start, end = pending[0]
            if not end.query():
                break
            pending.popleft()
            self.times_s.append(start.elapsed_time(end) / 1000.0)
            self._free.extend((start, end))
            done += 1
        return done

    def drain(self) -> None:
        """Wait for the queued pairs (one device wait, with sync debug mode held off)."""
        if not self._pending:
            return
        with sync_debug_mode_off(self._torch):
            self._pending[-1][1].synchronize()
        self.poll()


class sync_debug_mode_off:
    """Turn ``torch.cuda`` sync debug mode off for a block (gpudoctor's own waits at the end)."""

    def __init__(self, torch: ModuleType) -> None:
        self._torch = torch
        self._saved = 0

    def __enter__(self) -> None:
        try:
            self._saved = self._torch.cuda.get_sync_debug_mode()
            if self._saved:
                self._torch.cuda.set_sync_debug_mode(0)
        except Exception:
            self._saved = 0

    def __exit__(self, *exc: object) -> None:
        if self._saved:
            self._torch.cuda.set_sync_debug_mode(self._saved)


# -- host syncs, counted with torch.cuda sync debug mode ----------------------------------

SYNC_WARNING_TEXT = "called a synchronizing CUDA operation"

# Frameworks whose own code (not the user's) may make a sync; the site is then theirs.
FRAMEWORK_PACKAGES = ("lightning", "pytorch_lightning")
# Parts of torch that run as a framework around the user's model (DDP's bookkeeping).
TORCH_FRAMEWORK_PARTS = ("nn/parallel", "distributed")


def _package_dir(name: str) -> str | None:
    module = sys.modules.get(name)
    location = getattr(module, "__file__", None)
    return os.path.dirname(os.path.abspath(location)) + os.sep if location else None


def _stdlib_prefixes() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the standard library's directories, the site-packages directories inside them)."""
    paths = sysconfig.get_paths()
    stdlib = tuple(os.path.abspath(paths[k]) + os.sep for k in ("stdlib",) if paths.get(k))
    site = tuple(os.path.abspath(paths[k]) + os.sep for k in ("purelib", "platlib") if paths.get(k))
    return stdlib, site


def _library_prefixes() -> tuple[str, ...]:
    """Directories whose frames are not "the user's line": torch, Lightning, gpudoctor itself.

    Taken from the loaded packages' own locations, so a user's project that merely lives in
    a folder called ``gpudoctor`` or ``torch`` is not mistaken for the library. (The standard
    library is a library too: :func:`_is_library_frame` checks it separately.)
    """
    prefixes = [os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep]
    for name in ("torch",) + FRAMEWORK_PACKAGES:
        found = _package_dir(name)
        if found:
            prefixes.append(found)
    return tuple(prefixes)


def _framework_prefixes() -> tuple[str, ...]:
    """Directories of framework code whose syncs are the framework's, not the user's line's."""
    prefixes = [d for d in (_package_dir(name) for name in FRAMEWORK_PACKAGES) if d]
    torch_dir = _package_dir("torch")
    if torch_dir:
        prefixes += [os.path.join(torch_dir, *part.split("/")) + os.sep for part in TORCH_FRAMEWORK_PARTS]
    return tuple(prefixes)


_WARNINGS_FILES = {os.path.abspath(warnings.__file__), warnings.__file__}
_STDLIB, _SITE_PACKAGES = _stdlib_prefixes()


def _is_library_frame(filename: str, prefixes: tuple[str, ...]) -> bool:
    if filename in _WARNINGS_FILES or filename.startswith("<frozen "):
        return True
    path = os.path.abspath(filename)
    if path.startswith(prefixes):
        return True
    # the standard library (threading, contextlib, functools...), but not a site-packages
    # folder that lives inside it (a Python installed without a virtual environment)
    return path.startswith(_STDLIB) and not path.startswith(_SITE_PACKAGES) \
        and os.sep + "site-packages" + os.sep not in path and os.sep + "dist-packages" + os.sep not in path


def _started_by_python() -> bool:
    """Whether the calling thread was started by ``threading``/``_thread`` code we can see as a
    real Thread (a data prefetcher, a logger), rather than by C++ (autograd's device threads),
    which Python knows only as a dummy thread."""
    dummy = getattr(threading, "_DummyThread", None)
    current = threading.current_thread()
    return not (dummy is not None and isinstance(current, dummy))


class SyncCounter:
    """Counts host<->device synchronisations and where in the user's code they happen.

    With ``torch.cuda.set_sync_debug_mode("warn")`` torch warns (``UserWarning: called a
    synchronizing CUDA operation``) from the Python line that made the sync: ``.item()``,
    ``.cpu()``, ``.tolist()``, a blocking ``.to(device)``... Device-wide and event waits
    (``torch.cuda.synchronize()``, ``torch.accelerator.synchronize()``, ``Event.synchronize()``)
    raise no such warning, so while the counter is active their entry points are wrapped to
    count themselves (see :class:`_SyncEntryPoints`), and restored after. The counter catches
    the warnings (they are not shown), groups them by the first frame outside torch, Lightning, gpudoctor and the standard library, and keeps the
    line's text to name the pattern. A sync made by framework code (Lightning, DDP) is
    charged to the innermost framework line instead, with ``origin`` "framework": the
    user's ``trainer.fit(...)`` line is not where it can be fixed.
    ``counting`` limits the count to part of the program (the monitor passes "inside a
    pass over the wrapped loader or a step"); other syncs only add to ``outside``. Only
    syncs on the thread that installed the counter (the training loop's) are counted, and
    on threads that Python did not start (autograd's device threads run Python backward
    hooks during ``loss.backward()``, which the training thread waits for); those of the
    program's other Python threads add to ``other_threads``.

    If the user already chose a sync debug mode ("warn" or "error") it is left alone:
    "error" turns every sync into an exception, so nothing is counted; "warn" is counted
    and the warnings are still shown.
    """

    def __init__(self, torch: Any | None = None, counting: Callable[[], bool] | None = None) -> None:
        self._torch = torch
        self._counting = counting  # e.g. "inside the training loop"; None: always
        self._lock = threading.Lock()
        self.total = 0
        self.outside = 0
        self.other_threads = 0
        self._thread_id: int | None = None
        self.sites: dict[tuple[str, int], dict[str, Any]] = {}
        self.active = False
        self.status: str = "not started"
        self._saved_mode = 0
        self._saved_showwarning: Callable[..., Any] | None = None
        self._filter: tuple[Any, ...] | None = None
        self._show_warnings = False
        self._prefixes: tuple[str, ...] = ()
        self._framework: tuple[str, ...] = ()

    def install(self) -> bool:
        if self.active:  # already counting: never install twice
            return True
        self._prefixes = _library_prefixes()
        self._framework = _framework_prefixes()
        self._thread_id = threading.get_ident()
        torch = self._torch
        if torch is not None:
            try:
                self._saved_mode = int(torch.cuda.get_sync_debug_mode())
            except Exception as exc:
                self.status = f"sync debug mode unavailable ({type(exc).__name__})"
                return False
            if self._saved_mode == 2:
                self.status = "not counted: sync debug mode is 'error' (set by the program)"
                return False
            self._show_warnings = self._saved_mode == 1
        self._install_warning_hook()
        if torch is not None and self._saved_mode == 0:
            try:
                torch.cuda.set_sync_debug_mode(1)
            except Exception as exc:
                self._remove_warning_hook()
                self.status = f"sync debug mode unavailable ({type(exc).__name__})"
                return False
        self.status = "counted with torch.cuda sync debug mode"
        if torch is not None:
            try:
                _entry_points(torch).attach(self)
            except Exception as exc:  # every patched attribute is already restored
                log.warning("gpudoctor: explicit waits (synchronize()) will not be counted: %s: %s",
                            type(exc).__name__, exc)
                self.status += f" (explicit synchronize() calls not counted: {type(exc).__name__})"
        self.active = True
        return True

    def _count(self, filename: str, lineno: int) -> None:
        """One sync made at ``filename:lineno``: counted, or set aside (other thread, outside the loop)."""
        if self._thread_id is not None and threading.get_ident() != self._thread_id and _started_by_python():
            with self._lock:
                self.other_threads += 1
        elif self._counting is None or self._counting():
            self.record(filename, lineno)
        else:
            with self._lock:
                self.outside += 1

    def _install_warning_hook(self) -> None:
        # "always" so that every sync reaches showwarning, not only the first per line.
        warnings.filterwarnings("always", message=SYNC_WARNING_TEXT)
        self._filter = warnings.filters[0]
        self._saved_showwarning = warnings.showwarning
        warnings.showwarning = self._showwarning

    def _remove_warning_hook(self) -> None:
        if warnings.showwarning == self._showwarning and self._saved_showwarning is not None:
            warnings.showwarning = self._saved_showwarning
        if self._filter is not None:
            try:
                # a list at run time (the module's own functions edit it), typed Sequence by typeshed
                warnings.filters.remove(self._filter)  # type: ignore[attr-defined]
                warnings._filters_mutated()  # type: ignore[attr-defined]
            except (ValueError, AttributeError):
                pass
            self._filter = None

    def uninstall(self) -> None:
        if not self.active:
            return
        self.active = False
        torch = self._torch
        try:
            if torch is not None:
                _entry_points(torch).detach(self)
        finally:
            try:
                if torch is not None and self._saved_mode == 0:
                    torch.cuda.set_sync_debug_mode(0)
            except Exception:
                pass
            finally:
                self._remove_warning_hook()

    def _showwarning(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
                     file: TextIO | None = None, line: str | None = None) -> None:
        if str(message).startswith(SYNC_WARNING_TEXT):
            if not _in_explicit_wait():  # an explicit wait counts once
                self._count(filename, lineno)
            if not self._show_warnings:
                return
        original = self._saved_showwarning or warnings._showwarning_orig  # type: ignore[attr-defined]
        original(message, category, filename, lineno, file, line)

    def record(self, filename: str, lineno: int) -> None:
        user_file, user_line = filename, lineno
        origin = "user"
        prefixes = self._prefixes or _library_prefixes()
        framework = self._framework if self._prefixes else _framework_prefixes()
        if _is_library_frame(filename, prefixes):
            # Walk out from the line that raised the warning to the first line of the user's;
            # on the way, the innermost framework line (Lightning's loop, DDP) is noted: a sync
            # made there is the framework's, not the user's ``trainer.fit(...)`` line's.
            inner_framework: tuple[str, int] | None = None
            if os.path.abspath(filename).startswith(framework) and filename not in _WARNINGS_FILES:
                inner_framework = (filename, lineno)
            frame: FrameType | None = sys._getframe(1)
            while frame is not None and _is_library_frame(frame.f_code.co_filename, prefixes):
                if inner_framework is None and os.path.abspath(frame.f_code.co_filename).startswith(framework):
                    inner_framework = (frame.f_code.co_filename, frame.f_lineno)
                frame = frame.f_back
            if inner_framework is not None:
                (user_file, user_line), origin = inner_framework, "framework"
            elif frame is not None:
                user_file, user_line = frame.f_code.co_filename, frame.f_lineno
        key = (user_file, user_line)
        with self._lock:
            self.total += 1
            site = self.sites.get(key)
            if site is None:
                text = linecache.getline(user_file, user_line).strip()
                site = {"file": user_file, "line": user_line, "code": text,
                        "pattern": classify_sync_line(text), "origin": origin, "count": 0,
                        "raised_in": f"{filename}:{lineno}" if (filename, lineno) != key else None}
                self.sites[key] = site
            site["count"] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            sites = sorted((dict(s) for s in self.sites.values()), key=lambda s: -s["count"])
            return {"total": self.total, "sites": sites, "status": self.status, "outside_loop": self.outside,
                    "other_threads": self.other_threads}


# -- explicit waits: the entry points that sync debug mode does not report ----------------------
#
# Sync debug mode warns from the C++ paths that copy to the host or synchronise a stream, but not
# from device-wide waits (torch.cuda.synchronize(), torch.accelerator.synchronize()) nor from event
# waits, so these are wrapped while a counter is active. Only what blocks the calling host thread
# is counted: ``Event.wait()`` / ``Stream.wait_event()`` / ``wait_stream()`` only order work on the
# device (the host goes on), and ``query()`` never waits, so neither is a host sync.
#
# Where the wrapping happens:
# - the device-wide waits are wrapped at torch's C entry points (``torch._C._cuda_synchronize``,
#   ``torch._C._accelerator_synchronizeDevice``), which torch's Python functions look up at each
#   call: so ``from torch.cuda import synchronize`` done before the counter started is counted too.
# - ``torch.cuda.Event``/``torch.cuda.Stream`` are Python classes: their ``synchronize`` is wrapped.
# - the device-generic ``torch.Event``/``torch.Stream`` are immutable C types (their methods cannot
#   be replaced), so ``torch.Event``/``torch.Stream`` are swapped for counting subclasses whose
#   metaclass answers ``isinstance``/``issubclass`` for the original type. Only objects made through
#   those names while (or since) a counter was active count; one made earlier, or handed out by
#   torch itself (``torch.accelerator.current_stream()``, ``Stream.record_event()``), is of the C type.
# Rejected: torch's gpu-trace callbacks (``torch._C._activate_gpu_trace``) would see every wait, but
# once switched on they cannot be switched off for the rest of the process, and they call into
# Python (taking the GIL) on every allocation, free, event record and stream creation: a per-step
# cost proportional to the number of tensors, which this design avoids.

# torch._C names of the device-wide waits, as of torch 2.6+ (the accelerator one is new in 2.6)
DEVICE_WAIT_ENTRY_POINTS = ("_cuda_synchronize", "_accelerator_synchronizeDevice")

_explicit = threading.local()  # .depth > 0 while this thread is inside a wrapped wait
_ENTRY_LOCK = threading.Lock()
_ENTRY_POINTS: dict[int, "_SyncEntryPoints"] = {}


def _in_explicit_wait() -> bool:
    return bool(getattr(_explicit, "depth", 0))


class _CountedType(type):
    """Metaclass of the counting stand-ins for ``torch.Event``/``torch.Stream``: ``isinstance`` and
    ``issubclass`` answer for the original C type, so objects made before the swap (and
    ``torch.cuda.Event``, a subclass of the original) still pass torch's and the user's checks."""

    _original: type

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls._original)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls._original)


class _SyncEntryPoints:
    """The wrapped wait entry points of one torch module, shared by every counter active on it.

    Patched when the first counter attaches and restored when the last one detaches, so two
    monitors (or a counter installed twice) never wrap a wrapper. Kept for the life of the process
    (one per torch module): the counting ``torch.Event``/``torch.Stream`` subclasses are made once,
    so an event made during one counting period counts again in the next one.
    """

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.counters: tuple[SyncCounter, ...] = ()  # replaced whole: the wrappers read it without a lock
        self.patched: list[tuple[Any, str, Any, Any, bool]] = []  # owner, name, original, ours, owned
        self.standins: dict[str, type] = {}

    # the wrappers ------------------------------------------------------------------------------
    def _counted_call(self, frame: FrameType, original: Callable[..., object], args: tuple[object, ...],
                      kwargs: dict[str, object]) -> Any:
        depth = getattr(_explicit, "depth", 0)
        if not depth:  # a wait inside a wait (cuda.Event.synchronize -> C base) counts once
            for counter in self.counters:
                counter._count(frame.f_code.co_filename, frame.f_lineno)
        _explicit.depth = depth + 1
        try:
            return original(*args, **kwargs)
        finally:
            _explicit.depth = depth

    def wrapper(self, original: Callable[..., object]) -> Callable[..., Any]:
        entry = self

        def synchronize(*args: object, **kwargs: object) -> Any:
            return entry._counted_call(sys._getframe(1), original, args, kwargs)

        synchronize.__wrapped__ = original  # type: ignore[attr-defined]
        synchronize.__name__ = getattr(original, "__name__", "synchronize")
        synchronize.__doc__ = getattr(original, "__doc__", None)
        return synchronize

    def standin(self, original: type) -> type:
        name = original.__qualname__
        made = self.standins.get(name)
        if made is None:
            entry = self
            base_wait = original.synchronize  # type: ignore[attr-defined]

            def synchronize(obj: object) -> Any:
                return entry._counted_call(sys._getframe(1), base_wait, (obj,), {})

            made = _CountedType(original.__name__, (original,), {
                "__module__": original.__module__, "__qualname__": name, "__doc__": original.__doc__,
                "__slots__": (), "_original": original, "synchronize": synchronize})
            self.standins[name] = made
        return made

    # patching ----------------------------------------------------------------------------------
    def _targets(self) -> list[tuple[Any, str, Any]]:
        """(owner, name, replacement) for every wait entry point this torch has."""
        torch = self.torch
        found: list[tuple[Any, str, Any]] = []
        c_module = getattr(torch, "_C", None)
        for name in DEVICE_WAIT_ENTRY_POINTS:
            original = getattr(c_module, name, None) if c_module is not None else None
            if callable(original):
                found.append((c_module, name, self.wrapper(original)))
        cuda = torch.cuda
        if not any(name == "_cuda_synchronize" for _, name, _ in found):
            # no C entry point to wrap (a stand-in torch): wrap the Python function itself
            original = getattr(cuda, "synchronize", None)
            if callable(original):
                found.append((cuda, "synchronize", self.wrapper(original)))
        for cls in (getattr(cuda, "Stream", None), getattr(cuda, "Event", None)):
            wait = getattr(cls, "synchronize", None) if isinstance(cls, type) else None
            if callable(wait):
                found.append((cls, "synchronize", self.wrapper(wait)))
        for name in ("Event", "Stream"):
            cls = getattr(torch, name, None)
            if isinstance(cls, type) and not isinstance(cls, _CountedType) \
                    and callable(getattr(cls, "synchronize", None)):
                found.append((torch, name, self.standin(cls)))
        return found

    def patch(self) -> None:
        try:
            for owner, name, replacement in self._targets():
                original = getattr(owner, name)
                owned = not isinstance(owner, type) or name in vars(owner)
                setattr(owner, name, replacement)
                self.patched.append((owner, name, original, replacement, owned))
        except BaseException:
            self.restore()
            raise

    def restore(self) -> None:
        """Put every patched attribute back; one that fails does not stop the others."""
        failed: list[str] = []
        for owner, name, original, ours, owned in reversed(self.patched):
            try:
                if getattr(owner, name, None) is not ours:
                    continue  # replaced again by someone else after us: leave theirs in place
                if owned:
                    setattr(owner, name, original)
                else:
                    delattr(owner, name)  # it was inherited: uncover the base class's method
            except Exception as exc:
                failed.append(f"{getattr(owner, '__name__', owner)}.{name} ({type(exc).__name__})")
        self.patched = []
        if failed:
            log.warning("gpudoctor: could not restore %s after counting host syncs", ", ".join(failed))

    def attach(self, counter: "SyncCounter") -> None:
        with _ENTRY_LOCK:
            if counter in self.counters:
                return
            if not self.counters:
                self.patch()
            self.counters = self.counters + (counter,)

    def detach(self, counter: "SyncCounter") -> None:
        with _ENTRY_LOCK:
            if counter not in self.counters:
                return
            self.counters = tuple(c for c in self.counters if c is not counter)
            if not self.counters:
                self.restore()


def _entry_points(torch: ModuleType) -> _SyncEntryPoints:
    with _ENTRY_LOCK:
        entry = _ENTRY_POINTS.get(id(torch))
        if entry is None or entry.torch is not torch:
            entry = _ENTRY_POINTS[id(torch)] = _SyncEntryPoints(torch)
        return entry


# Patterns, from the line's text. Order matters: the first match names the line.
_SYNC_PATTERNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("item", (".item()",)),
    ("tolist", (".tolist()",)),
    ("cpu", (".cpu()", ".numpy()")),
    ("synchronize", ("synchronize(",)),
    ("print", ("print(", "format(", "f\"", "f'")),
    ("nonzero", ("nonzero(", "masked_select(", "unique(", ".any()", ".all()")),
)


def classify_sync_line(text: str) -> str:
    """A short name for what made the sync on this source line."""
    compact = text.replace(" ", "")
    for name, needles in _SYNC_PATTERNS:
        if any(n.replace(" ", "") in compact for n in needles):
            return name
    if (".to(" in compact or ".cuda(" in compact) and "non_blocking=True" not in compact:
        return "blocking_copy"
    if compact.startswith(("if", "while", "assert")) or " if " in text:
        return "python_condition"
    return "other"


# -- allocator statistics -------------------------------------------------------------------

def cuda_memory_facts(index: int) -> dict[str, Any]:
    """Peak allocator figures for device ``index`` since the process (or last reset) began.

    ``torch.cuda.memory_stats`` reads the caching allocator's counters; it does not
    synchronise. ``num_alloc_retries`` counts cudaMalloc failures that forced the cache to
    be flushed and retried, the allocator's own sign of fragmentation.
    """
    torch = require_torch()
    try:
        stats = torch.cuda.memory_stats(index)
        total = int(torch.cuda.get_device_properties(index).total_memory)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "total_bytes": total,
        "peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
        "peak_reserved_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
        "allocated_bytes": int(stats.get("allocated_bytes.all.current", 0)),
        "reserved_bytes": int(stats.get("reserved_bytes.all.current", 0)),
        "inactive_split_bytes": int(stats.get("inactive_split_bytes.all.current", 0)),
        "alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "ooms": int(stats.get("num_ooms", 0)),
    }


# -- torch.distributed --------------------------------------------------------------------------

def distributed_rank() -> tuple[int, int]:
    """(rank, world size); (0, 1) when torch.distributed is not initialised."""
    torch = loaded_torch()
    if torch is None:
        return 0, 1
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:
        pass
    return 0, 1


def all_gather_objects(obj: object) -> list[Any] | NA:
    """Every rank's ``obj`` (a collective: every rank must call it), or NA when not distributed."""
    torch = loaded_torch()
    if torch is None:
        return NA("torch not loaded")
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return NA("torch.distributed is not initialised")
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
