"""Probes: one module per check (installed as ``gpudoctor.probes``).

Each probe module defines ``PROBE = Probe.define(__name__, run, "title", ...)`` (named after
the module, described by its docstring's first line), whose ``run(ctx)`` takes a
:class:`ProbeContext` and returns a :class:`~gpudoctor.core.model.ProbeResult`. A probe never
prints and never imports torch at module level (``report --quick`` must not load torch);
it asks its backends for readings. The runner discovers every module in this package,
so adding a probe is adding a file (and a line in ``CATALOGUE``, which a test checks).
Probe modules import this package relatively (``from . import Probe, ProbeContext``): it is
``gpudoctor.probes`` when installed, and mypy checks it under that name too (on the installed
tree, ``python -m gpudoctor.tools.typecheck``); torch's types are imported under
``TYPE_CHECKING`` only.

``CATALOGUE`` names each probe's module and level so that choosing probes imports only
the modules that will run: ``report --quick`` never imports the measuring probes (and
what they import). A module missing from it is still found, by importing it.

Levels: a probe runs at its ``level`` and above (``quick`` < ``standard`` < ``full``).
``uses_torch`` probes run in the runner's child process with a time limit; at the
``quick`` level they still run, in-process, but ``ctx.torch_facts()`` is unavailable
and they must answer from NVML and host facts alone; ``ctx.torch_build()`` tells them
torch's version and CUDA build read from ``torch/version.py`` as text (no import).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, TypedDict, cast

from gpudoctor.core._record import record
from gpudoctor.core.model import ProbeResult

if TYPE_CHECKING:  # typing.Unpack is 3.11; these annotations are never evaluated at run time
    from typing_extensions import Unpack

    from gpudoctor.backends.base import GpuBackend
    from gpudoctor.backends.cuda_driver import CudaStart, PendingCudaStart
    from gpudoctor.backends.events import EventSource
    from gpudoctor.backends.fatbin import ExtensionScan
    from gpudoctor.backends.na import NA
    from gpudoctor.backends.replay import ReplayBackend
    from gpudoctor.backends.stack import Stack
    from gpudoctor.backends.torch_build import TorchBuild

LEVELS = ("quick", "standard", "full")

# probe name -> (module in this package, level). Must agree with each module's PROBE
# (tests/project/test_install_split.py checks it); lets registry(level=...) import only what runs.
CATALOGUE: dict[str, tuple[str, str]] = {
    "environment": ("environment", "quick"),
    "devices": ("devices", "quick"),
    "health": ("health", "quick"),
    "events": ("events", "quick"),
    "p2p": ("p2p", "quick"),
    "memory": ("memory", "full"),
    "correctness": ("correctness", "full"),
    "transfer": ("transfer", "full"),
    "compute": ("compute", "full"),
    "workload": ("workload", "full"),
    "distributed": ("distributed", "full"),
}


def _runs_at(probe_level: str, level: str) -> bool:
    return LEVELS.index(level) >= LEVELS.index(probe_level)


class ProbeOptions(TypedDict, total=False):
    """What :meth:`Probe.define` takes beside the module, ``run`` and the title: the fields of
    :class:`Probe` below, each optional."""

    level: str
    uses_torch: bool
    timeout_s: float
    order: int
    description: str
    asks_cuda_start: bool


@record(frozen=True)
class Probe:
    name: str
    title: str
    run: Callable[["ProbeContext"], ProbeResult]
    level: str = "standard"
    uses_torch: bool = False
    timeout_s: float = 60.0
    order: int = 100
    description: str = ""
    #: it reads ProbeContext.cuda_start(): a runner that runs it in-process starts the check first
    asks_cuda_start: bool = False

    @classmethod
    def define(cls, module: str, run: Callable[["ProbeContext"], ProbeResult], title: str,
               **options: Unpack[ProbeOptions]) -> "Probe":
        """The probe of module ``module`` (pass ``__name__``): its name is the module's, its
        description the first line of the module's docstring unless ``description`` is given."""
        if "description" not in options:
            doc = (sys.modules[module].__doc__ or "").strip()
            options["description"] = doc.splitlines()[0] if doc else ""
        return cls(name=module.rpartition(".")[2], title=title, run=run, **options)

    def runs_at(self, level: str) -> bool:
        return _runs_at(self.level, level)


class ProbeContext:
    """What a probe may use. Built by the runner (in the child process for torch probes).

    ``gpu``: NVML or replay backend. ``device``: the torch device index the user chose
    (None: all). ``level``: quick/standard/full. ``options``: probe options from the
    command line (e.g. ``data_dir``). ``deadline``: monotonic time by which the probe
    should return (long loops check :meth:`time_left`). ``python``: the interpreter whose
    torch is checked (``report --python``; None: this one). ``torch_missing``: set by the
    runner when that interpreter has no torch (torch probes then answer without it).

    (A plain class, not a dataclass: building one costs `report --quick` a millisecond.)
    """

    def __init__(self, gpu: GpuBackend, device: int | None = None, level: str = "standard",
                 options: dict[str, Any] | None = None, deadline: float | None = None, replay: bool = False,
                 python: str | None = None, torch_missing: bool = False,
                 _torch_facts: dict[str, Any] | NA | None = None, _host_facts: dict[str, Any] | None = None,
                 _torch_build: TorchBuild | None = None, _cuda_start: CudaStart | NA | None = None,
                 events: EventSource | None = None,
                 _extensions: ExtensionScan | NA | None = None, _stack: Stack | NA | None = None) -> None:
        self.gpu = gpu
        self.device = device
        self.level = level
        self.options = {} if options is None else options
        self.deadline = deadline
        self.replay = replay
        self.python = python
        self.torch_missing = torch_missing
        # Preset facts (tests, replays) or None until first asked.
        self._torch_facts = _torch_facts
        self._host_facts = _host_facts
        self._torch_build = _torch_build
        self._cuda_start = _cuda_start
        self._cuda_pending: PendingCudaStart | None = None
        self._extensions = _extensions
        self._stack = _stack
        # torch or host facts handed in describe another machine than this one's files
        self._facts_given = _torch_facts is not None or _host_facts is not None
        #: a running event watcher (the TUI's, the exporter's) whose NVML stream the events probe reads
        self.events = events
        #: torch index -> NVML index as the devices probe matched them (by PCI bus id where torch
        #: ran); set by the runner once that probe has answered, for the probes after it
        self.torch_to_nvml: dict[int, int | None] = {}

    def __repr__(self) -> str:
        return (f"ProbeContext(gpu={self.gpu!r}, device={self.device!r}, level={self.level!r}, "
                f"replay={self.replay!r}, python={self.python!r})")

    def torch_allowed(self) -> bool:
        return self.level != "quick"

    def nvml_count(self, probe: str, *, at_least: int = 1, fewer: str = "no_gpu") -> int | ProbeResult:
        """How many GPUs NVML answers for, or the probe's skip result: NVML unusable
        (``nvml_unavailable:<probe>``) or fewer than ``at_least`` GPUs (the code ``fewer``).
        The opening of every probe that reads NVML alone."""
        from gpudoctor.core import findings

        na = self.gpu.status()
        if na is not None:
            return findings.skipped(probe, f"nvml_unavailable:{probe}", reason=na.reason)
        count = self.gpu.device_count()
        if not isinstance(count, int) or count < at_least:
            return findings.skipped(probe, fewer)
        return count

    def torch_facts(self) -> dict[str, Any] | NA:
        """torch facts (live, or from the recording); NA when not allowed or not recorded."""
        from gpudoctor.backends.na import NA

        if self._torch_facts is None:
            if not self.torch_allowed():
                return NA("QuickMode")
            if self.torch_missing:
                return NA("TorchNotInstalled")
            if self.replay:
                self._torch_facts = cast("ReplayBackend", self.gpu).torch_facts()
            else:
                from gpudoctor.backends.torch_cuda import torch_facts

                self._torch_facts = torch_facts()
        return self._torch_facts

    def torch_build(self) -> TorchBuild:
        """torch's version and CUDA build without importing it (a TorchBuild; cached).

        Replay: from the recording's torch facts. Live: read from torch/version.py of
        this interpreter, or of ``python`` (asked where its torch lies).
        """
        if self._torch_build is None:
            from gpudoctor.backends import torch_build

            if self.replay:
                self._torch_build = torch_build.build_from_facts(cast("ReplayBackend", self.gpu).torch_facts())
            elif self.python:
                self._torch_build = torch_build.inspect_interpreter(self.python)
            else:
                self._torch_build = torch_build.local_build()
        return self._torch_build

    def cuda_start(self) -> CudaStart | NA:
        """Whether the CUDA driver starts (cuInit in a child: no torch, no context; cached):
        a :class:`~gpudoctor.backends.cuda_driver.CudaStart`, or NA (not Linux, a replay, which
        does not record it)."""
        if self._cuda_start is None:
            from gpudoctor.backends import cuda_driver
            from gpudoctor.backends.na import NA

            if self.replay:
                self._cuda_start = NA("NotRecorded")
            elif self._cuda_pending is not None:
                self._cuda_start, self._cuda_pending = self._cuda_pending.answer(), None
            else:
                self._cuda_start = cuda_driver.cuda_start()
        return self._cuda_start

    def stack(self) -> Stack | NA:
        """The stack below NVML read from this machine's files (gpudoctor.backends.stack: the kernel
        module's and the libraries' versions, the container, the PCI bus; cached), or NA in a replay
        (not recorded) and where torch or host facts were handed in (they describe another machine)."""
        if self._stack is None:
            from gpudoctor.backends import stack
            from gpudoctor.backends.na import NA

            self._stack = (NA("NotRecorded") if self.replay or self._facts_given
                           else stack.read_stack(stack.live_root()))
        return self._stack

    def begin_cuda_start(self) -> None:
        """Start the CUDA driver's check now, so that it runs while the other probes do;
        :meth:`cuda_start` then waits for its answer (nothing to start for a replay)."""
        if self._cuda_start is None and self._cuda_pending is None and not self.replay:
            from gpudoctor.backends import cuda_driver

            self._cuda_pending = cuda_driver.begin_cuda_start()

    def cancel_cuda_start(self) -> None:
        """Stop a started check that nobody read (the report was interrupted)."""
        if self._cuda_pending is not None:
            self._cuda_pending.cancel()
            self._cuda_pending = None

    def extensions(self) -> ExtensionScan | NA:
        """The compiled CUDA extensions installed beside the checked torch (their fat binaries' headers
        read from the site-packages folder that holds torch; no import; cached): an
        :class:`~gpudoctor.backends.fatbin.ExtensionScan`, or NA in a replay (not recorded), where torch
        is not installed, or where torch or host facts were handed in (they describe another machine)."""
        if self._extensions is None:
            from gpudoctor.backends import fatbin
            from gpudoctor.backends.na import NA
            from gpudoctor.backends.torch_build import InterpreterError

            if self.replay or self._facts_given:
                self._extensions = NA("NotRecorded")
                return self._extensions
            try:
                build = self.torch_build()
            except InterpreterError:
                build = None
            if build is None or build.location is None:
                self._extensions = NA("TorchNotInstalled")
            else:
                budget = fatbin.QUICK_SCAN_S if self.level == "quick" else fatbin.FULL_SCAN_S
                self._extensions = fatbin.cached_scan(os.path.dirname(build.location), budget)
        return self._extensions

    def nvml_index(self, torch_index: int) -> int | None:
        """The NVML index of torch's device ``torch_index``: the devices probe's match (PCI bus id
        where torch ran), else CUDA_VISIBLE_DEVICES' order; None when neither can say."""
        if torch_index in self.torch_to_nvml:
            return self.torch_to_nvml[torch_index]
        from gpudoctor.backends.visibility import visible_nvml_indices

        visible = visible_nvml_indices(self.gpu)
        return visible[torch_index] if isinstance(visible, list) and 0 <= torch_index < len(visible) else None

    def host_facts(self) -> dict[str, Any]:
        if self._host_facts is None:
            recorded = cast("ReplayBackend", self.gpu).host_facts() if self.replay else None
            if recorded:
                self._host_facts = recorded
            else:
                from gpudoctor.backends.host import host_facts

                self._host_facts = host_facts()
        return self._host_facts

    def time_left(self) -> float:
        if self.deadline is None:
            return float("inf")
        return self.deadline - time.monotonic()


def _uncatalogued_modules() -> list[str]:
    """Probe modules in this package's folder(s) that CATALOGUE does not name (a directory
    listing: pkgutil would cost `report --quick` its own import)."""
    catalogued = {module for module, _ in CATALOGUE.values()}
    found: list[str] = []
    for folder in __path__:
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".py"):
                name = entry[:-3]
            elif os.path.isfile(os.path.join(folder, entry, "__init__.py")):
                name = entry
            else:
                continue
            if name.isidentifier() and not name.startswith("_") and name not in catalogued and name not in found:
                found.append(name)
    return found


def probe_names() -> list[str]:
    """Every probe's name, without importing any probe module (catalogue, then extra files)."""
    return list(CATALOGUE) + _uncatalogued_modules()


def registry(level: str | None = None, names: "list[str] | None" = None) -> dict[str, Probe]:
    """Probes in this package, by name, in report order.

    ``level``: only probes that run at it; ``names``: only these. Only the modules of the
    probes returned are imported (modules missing from CATALOGUE are imported to learn).
    """
    modules: list[str] = []
    for name, (module_name, probe_level) in CATALOGUE.items():
        if names is not None and name not in names:
            continue
        if level is not None and not _runs_at(probe_level, level):
            continue
        modules.append(module_name)
    modules += _uncatalogued_modules()
    found: list[Probe] = []
    for module_name in modules:
        module = importlib.import_module(f"{__name__}.{module_name}")
        probe = getattr(module, "PROBE", None)
        if not isinstance(probe, Probe):
            continue
        if names is not None and probe.name not in names:
            continue
        if level is not None and not probe.runs_at(level):
            continue
        found.append(probe)
    found.sort(key=lambda p: (p.order, p.name))
    return {p.name: p for p in found}


__all__ = ["Probe", "ProbeContext", "registry", "probe_names", "CATALOGUE", "LEVELS"]
