"""fleet's data: a row per (instance, GPU) with its findings, the view of all rows, the series read.

A row's findings are :class:`gpudoctor.core.model.Finding` (codes and words from gpudoctor.core.findings).
Fleet's four statuses map onto :class:`~gpudoctor.core.model.Status`: ``stale`` is a finding that could
not be checked (``Status.ERROR``: the target or its sampler does not answer).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from gpudoctor.backends import catalogue
from gpudoctor.core.findings import fleet_phrase, one_line
from gpudoctor.core.model import Finding, Status

SCHEMA_VERSION = 1
STATUS_ORDER = {"fail": 0, "stale": 1, "warn": 2, "pass": 3}
#: A finding's status as fleet shows it.
FLEET_STATUS = {Status.FAIL: "fail", Status.ERROR: "stale", Status.WARN: "warn", Status.PASS: "pass",
                Status.SKIP: "pass"}
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_STALE_AFTER_S = 120.0
DEFAULT_LOOKBACK = "1h"
DEFAULT_REPORT_MAX_AGE_S = 24 * 3600.0
#: How long a held GPU must do no work to be listed as held but idle (a Prometheus duration).
DEFAULT_IDLE_WINDOW = "30m"

Key = tuple[str, str]  # (instance, gpu)


class FleetError(Exception):
    """A fleet query that could not be answered; ``kind`` picks the exit code."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "usage", "unreachable", "query", "empty"


@dataclass
class Series:
    labels: dict[str, str]
    value: float


def key_of(labels: dict[str, str]) -> Key:
    return labels.get("instance", ""), labels.get("gpu", "")


@dataclass
class FleetRow:
    instance: str
    gpu: str
    status: str = "pass"
    reason: str = ""
    source: str = "gpudoctor"
    name: str = ""
    uuid: str = ""
    job: str = ""
    # The readings are the catalogue's fleet readings (gpudoctor.backends.catalogue: ``Reading.fleet``
    # names each), in the exporter's units (ratios 0-1, bytes, watts): ``row.utilization`` reads
    # ``readings["utilization"]``, None until a source gives it. to_dict writes them after ``job``.
    readings: dict[str, float | None] = field(default_factory=dict)
    xid_count: int | None = None
    xid_last: int | None = None
    xid_last_words: str | None = None
    xid_last_time: float | None = None
    report_status: str | None = None
    report_age_s: float | None = None
    # dcgm-exporter's host name and driver version labels (either spelling: docs/fleet.md)
    hostname: str = ""
    driver_version: str = ""
    # Who holds the GPU: a Kubernetes pod or an HPC/Slurm job ("" none seen), and where it is held
    # but did no work for the idle window: for how long, and what that cost (fleet.idle).
    holder: str = ""
    idle_for_s: float | None = None
    idle_gpu_hours: float | None = None
    idle_energy_kwh: float | None = None
    # True for a GPU Prometheus no longer gets (its target stopped answering, or it vanished from a
    # live exporter): its readings and findings are the last known, last_known_age_s old (None: unknown).
    last_known: bool = False
    last_known_age_s: float | None = None
    findings: list[Finding] = field(default_factory=list)

    def add(self, found: Finding | None) -> None:
        if found is not None:
            self.findings.append(found)

    def settle(self) -> None:
        ordered = sorted(self.findings, key=lambda f: STATUS_ORDER[FLEET_STATUS[f.status]])
        self.status = FLEET_STATUS[ordered[0].status] if ordered else "pass"
        self.reason = "; ".join(one_line(f) for f in ordered) if ordered else fleet_phrase("all_clear")

    def __getattr__(self, name: str) -> float | None:
        # only for names that are not fields: a fleet reading of the catalogue reads as its value
        if name in fleet_names():
            return self.__dict__.get("readings", {}).get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in fleet_names():
            self.readings[name] = value
        else:
            object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if key == "readings":
                continue
            data[key] = value
            if key == "job":  # the readings, in the catalogue's order
                data.update({r.fleet: self.readings.get(r.fleet) for r in catalogue.fleet_readings()})
        data.pop("findings")
        for key, value in data.items():
            if isinstance(value, float) and not math.isfinite(value):
                data[key] = None
        return data


@catalogue.per_catalogue
def fleet_names() -> frozenset[str]:
    """The row fields that hold readings: the catalogue's fleet readings' names."""
    return frozenset(r.fleet for r in catalogue.fleet_readings())


@dataclass
class FleetView:
    prometheus: str
    selector: str
    queried_at: float
    rows: list[FleetRow]
    targets: dict[str, int]  # instance -> up (1/0)
    queries: int = 0
    idle_window: str = DEFAULT_IDLE_WINDOW

    def held_idle(self) -> list[FleetRow]:
        """The GPUs held by a job or pod that did no work for the idle window, longest first."""
        return sorted((r for r in self.rows if r.idle_for_s is not None), key=lambda r: -(r.idle_for_s or 0.0))

    def counts(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUS_ORDER}
        for row in self.rows:
            counts[row.status] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "prometheus": self.prometheus,
            "selector": self.selector,
            "queried_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.queried_at)),
            "counts": self.counts(),
            "nodes": len({row.instance for row in self.rows}),
            "targets_down": sorted(i for i, up in self.targets.items() if not up),
            "idle_window": self.idle_window,
            "held_idle": [{"instance": r.instance, "gpu": r.gpu, "holder": r.holder, "idle_for_s": r.idle_for_s,
                           "gpu_hours": r.idle_gpu_hours, "energy_kwh": r.idle_energy_kwh} for r in self.held_idle()],
            "rows": [row.to_dict() for row in self.rows],
        }
