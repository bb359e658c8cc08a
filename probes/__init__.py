"""Probes: one module per check (installed as ``gpudoctor.probes``).

Each probe module defines ``PROBE = Probe.define(__name__, run, "title", ...)`` (named after
the module, described by its docstring's first line), whose ``run(ctx)`` takes a
:class:`ProbeContext` and returns a :class:`~gpudoctor.model.ProbeResult`. A probe never
prints and never imports torch at module level (``report --quick`` must not load torch);
it asks its backends for readings. The runner discovers every module in this package,
so adding a probe is adding a file.

Levels: a probe runs at its ``level`` and above (``quick`` < ``standard`` < ``full``).
``uses_torch`` probes run in the runner's child process with a time limit; at the
``quick`` level they still run, in-process, but ``ctx.torch_facts()`` is unavailable
and they must answer from NVML and host facts alone.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from gpudoctor.model import ProbeResult

LEVELS = ("quick", "standard", "full")


@dataclass(frozen=True)
class Probe:
    name: str
    title: str
    run: Callable[["ProbeContext"], ProbeResult]
    level: str = "standard"
    uses_torch: bool = False
    timeout_s: float = 60.0
    order: int = 100
    description: str = ""

    @classmethod
    def define(cls, module: str, run: Callable[["ProbeContext"], ProbeResult], title: str, **options: Any) -> "Probe":
        """The probe of module ``module`` (pass ``__name__``): its name is the module's, its
        description the first line of the module's docstring unless ``description`` is given."""
        if "description" not in options:
            doc = (sys.modules[module].__doc__ or "").strip()
            options["description"] = doc.splitlines()[0] if doc else ""
        return cls(name=module.rpartition(".")[2], title=title, run=run, **options)

    def runs_at(self, level: str) -> bool:
        return LEVELS.index(level) >= LEVELS.index(self.level)


@dataclass
class ProbeContext:
    """What a probe may use. Built by the runner (in the child process for torch probes).

    ``gpu``: NVML or replay backend. ``device``: the torch device index the user chose
    (None: all). ``level``: quick/standard/full. ``options``: probe options from the
    command line (e.g. ``data_dir``). ``deadline``: monotonic time by which the probe
    should return (long loops check :meth:`time_left`).
    """

    gpu: Any
    device: int | None = None
    level: str = "standard"
    options: dict[str, Any] = field(default_factory=dict)
    deadline: float | None = None
    replay: bool = False
    _torch_facts: Any = None
    _host_facts: Any = None

    def torch_allowed(self) -> bool:
        return self.level != "quick"

    def torch_facts(self) -> Any:
        """torch facts (live, or from the recording); NA when not allowed or not recorded."""
        from gpudoctor.backends.na import NA

        if self._torch_facts is None:
            if not self.torch_allowed():
                return NA("QuickMode")
            if self.replay:
                self._torch_facts = self.gpu.torch_facts()
            else:
                from gpudoctor.backends.torch_cuda import torch_facts

                self._torch_facts = torch_facts()
        return self._torch_facts

    def host_facts(self) -> dict[str, Any]:
        if self._host_facts is None:
            if self.replay and self.gpu.host_facts():
                self._host_facts = self.gpu.host_facts()
            else:
                from gpudoctor.backends.host import host_facts

                self._host_facts = host_facts()
        return self._host_facts

    def time_left(self) -> float:
        if self.deadline is None:
            return float("inf")
        return self.deadline - time.monotonic()


def registry() -> dict[str, Probe]:
    """All probes in this package, by name, in report order."""
    found: list[Probe] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        probe = getattr(module, "PROBE", None)
        if isinstance(probe, Probe):
            found.append(probe)
    found.sort(key=lambda p: (p.order, p.name))
    return {p.name: p for p in found}


__all__ = ["Probe", "ProbeContext", "registry", "LEVELS"]
