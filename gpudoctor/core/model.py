"""Plain data shared by every layer: statuses, measurements, findings, results, reports.

This module imports nothing heavier than the standard library (no torch, pynvml or
textual), so that any front end, a replayed report or a test can use it cheaply.
"""

from __future__ import annotations

import time as _time
import enum
import math
from typing import Any, Collection, Iterable, Mapping

from gpudoctor.core._record import field, record

#: Version of the JSON report layout (docs/report.schema.json). Bump the major
#: part when a field is removed or changes meaning; add fields freely.
SCHEMA_VERSION = "1.0"


class Status(str, enum.Enum):
    """Outcome of a probe or of a single finding, ordered by severity."""

    PASS = "pass"
    SKIP = "skip"
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @classmethod
    def worst(cls, statuses: Iterable["Status"], default: "Status | None" = None) -> "Status":
        """The most severe of ``statuses`` that ran; SKIP only when every one was skipped;
        ``default`` (else PASS) when there are none.

        A skipped check neither passes nor fails: three passes and a skip are PASS ("no problem
        found by the checks that ran", with the skip counted beside it), not "nothing could be
        checked"."""
        worst: Status | None = None
        skipped = False
        for status in statuses:
            status = cls(status)
            if status is cls.SKIP:
                skipped = True
            elif worst is None or status.severity > worst.severity:
                worst = status
        if worst is not None:
            return worst
        if skipped:
            return cls.SKIP
        return default if default is not None else cls.PASS

    def __str__(self) -> str:  # "pass", not "Status.PASS", in f-strings
        return self.value


# skip ranks above pass where statuses are sorted; Status.worst counts a skip only when nothing ran.
_SEVERITY = {Status.PASS: 0, Status.SKIP: 1, Status.WARN: 2, Status.FAIL: 3, Status.ERROR: 4}


def _clean_number(value: object) -> object:
    """JSON has no NaN/Inf: store them as None so every report stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@record
class Measurement:
    """A measured or read value with its unit, e.g. ``pinned_h2d_bandwidth 24.1 GB/s``.

    ``value`` is None when the quantity could not be read; ``note`` then says why
    (e.g. ``"NotSupported"``). ``reference`` is the ceiling or threshold it is
    compared with (same unit), when there is one.
    """

    name: str
    value: Any
    unit: str = ""
    device: int | None = None
    reference: float | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "value": _clean_number(self.value), "unit": self.unit}
        if self.device is not None:
            out["device"] = self.device
        if self.reference is not None:
            out["reference"] = _clean_number(self.reference)
        if self.note:
            out["note"] = self.note
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Measurement":
        return cls(
            name=data["name"],
            value=data.get("value"),
            unit=data.get("unit", ""),
            device=data.get("device"),
            reference=data.get("reference"),
            note=data.get("note", ""),
        )


@record
class Finding:
    """Something a probe saw: what (``summary``), why it matters, and what to do.

    ``code`` is a stable machine-readable identifier (``driver_too_old``,
    ``no_cuda_device``...) that scripts may match on. ``evidence`` holds the figures the
    judgement was made on (JSON-safe values); it is written only when there are some, so a
    finding without evidence is the same JSON as before it existed. The words of the codes
    that several front ends show live in :mod:`gpudoctor.core.findings`.
    """

    status: Status
    code: str
    summary: str
    why: str = ""
    fix: str = ""
    device: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status.value,
            "code": self.code,
            "summary": self.summary,
            "why": self.why,
            "fix": self.fix,
        }
        if self.device is not None:
            out["device"] = self.device
        if self.evidence:
            out["evidence"] = {k: _clean_number(v) for k, v in self.evidence.items()}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Finding":
        return cls(
            status=Status(data["status"]),
            code=data.get("code", ""),
            summary=data.get("summary", ""),
            why=data.get("why", ""),
            fix=data.get("fix", ""),
            device=data.get("device"),
            evidence=dict(data.get("evidence") or {}),
        )


#: The ``details`` key by which a probe says its process must not run another probe (see
#: :meth:`ProbeResult.poison_process`).
POISONED = "process_poisoned"


@record
class ProbeResult:
    """The outcome of one probe.

    ``status`` defaults to the worst finding (PASS without findings) unless set.
    ``details`` holds structured extras (tables, per-step series) that renderers may
    show; it must be JSON-safe.
    """

    probe: str
    status: Status | None = None
    summary: str = ""
    measurements: list[Measurement] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        if self.status is None:
            self.status = Status.worst((f.status for f in self.findings), default=Status.PASS)
        self.status = Status(self.status)

    # Builders keep probe code short and uniform.
    def measure(self, name: str, value: object, unit: str = "", *, device: int | None = None,
                reference: float | None = None, note: str = "") -> Measurement:
        m = Measurement(name, value, unit, device=device, reference=reference, note=note)
        self.measurements.append(m)
        return m

    def find(self, status: Status | str, code: str, summary: str, why: str = "", fix: str = "",
             device: int | None = None) -> Finding:
        f = Finding(Status(status), code, summary, why, fix, device)
        self.findings.append(f)
        return f

    def poison_process(self, why: str) -> None:
        """Say that the process this probe ran in cannot be trusted with another probe (a peer copy
        that never finished still holds both devices' streams): the runner ends that probe child and
        starts a fresh one for the next probe. ``details[POISONED]`` holds ``why``."""
        self.details[POISONED] = why

    def settle(self, summary: str | None = None) -> "ProbeResult":
        """Recompute status from findings (call after adding findings)."""
        self.status = Status.worst((f.status for f in self.findings), default=Status.PASS)
        if summary is not None:
            self.summary = summary
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "status": Status(self.status).value,
            "summary": self.summary,
            "duration_s": round(float(self.duration_s), 4),
            "measurements": [m.to_dict() for m in self.measurements],
            "findings": [f.to_dict() for f in self.findings],
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ProbeResult":
        return cls(
            probe=data["probe"],
            status=Status(data["status"]),
            summary=data.get("summary", ""),
            measurements=[Measurement.from_dict(m) for m in data.get("measurements", [])],
            findings=[Finding.from_dict(f) for f in data.get("findings", [])],
            details=dict(data.get("details", {})),
            duration_s=float(data.get("duration_s", 0.0)),
        )

    @classmethod
    def error(cls, probe: str, summary: str, duration_s: float = 0.0, **details: object) -> "ProbeResult":
        """A probe that could not complete: crashed, hung, or its process died."""
        from gpudoctor.core.findings import finding  # its words live there; findings imports this module

        result = cls(probe=probe, status=Status.ERROR, summary=summary, duration_s=duration_s,
                     details=dict(details))
        result.findings.append(finding("probe_error", summary=summary, probe=probe))
        return result

    @classmethod
    def skip(cls, probe: str, summary: str, code: str = "skipped", why: str = "", fix: str = "") -> "ProbeResult":
        result = cls(probe=probe, status=Status.SKIP, summary=summary)
        result.findings.append(Finding(Status.SKIP, code, summary, why, fix))
        return result


def utc_now_iso() -> str:
    """Now, as datetime.now(timezone.utc).isoformat(timespec="seconds") writes it (without
    importing datetime: a millisecond of every `report --quick`)."""
    return _time.strftime("%Y-%m-%dT%H:%M:%S+00:00", _time.gmtime())


@record
class Report:
    """A whole run of probes on one machine, as written by ``gpudoctor report --json``."""

    results: list[ProbeResult] = field(default_factory=list)
    host: dict[str, Any] = field(default_factory=dict)
    created: str = field(default_factory=utc_now_iso)
    schema_version: str = SCHEMA_VERSION
    tool_version: str = ""
    source: str = "live"  # "live" or "replay:<file>"
    interrupted: bool = False

    @property
    def status(self) -> Status:
        return Status.worst((Status(r.status) for r in self.results), default=Status.SKIP)

    def result(self, probe: str) -> ProbeResult | None:
        for r in self.results:
            if r.probe == probe:
                return r
        return None

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for r in self.results:
            out[Status(r.status).value] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": {"name": "gpudoctor", "version": self.tool_version},
            "created": self.created,
            "source": self.source,
            "status": self.status.value,
            "counts": self.counts(),
            "interrupted": self.interrupted,
            "host": self.host,
            "results": [r.to_dict() for r in self.results],
        }

    def to_json(self, anonymize: bool | Collection[str] = False, indent: int | None = 2) -> str:
        """The JSON document ``report --json`` prints; with ``anonymize``, host names, GPU UUIDs and
        serials stripped. ``True`` strips the keys the reading catalogue marks identifying
        (``backends.catalogue.identifying_keys()``, loaded by name: core imports no layer above it);
        a collection of keys strips those. Here rather than in the text renderer, so that
        `report --quick --json` imports nothing of the text report."""
        import json

        data = self.to_dict()
        if anonymize is not False:
            from gpudoctor.core.anonymize import anonymize_report_dict

            if isinstance(anonymize, str):
                raise TypeError("anonymize: True, or a collection of keys (not one string)")
            if isinstance(anonymize, bool):  # True: the catalogue's identifying keys
                import importlib

                keys: Collection[str] = importlib.import_module("gpudoctor.backends.catalogue").identifying_keys()
            else:
                keys = anonymize
            data = anonymize_report_dict(data, keys)
        return json.dumps(data, indent=indent, allow_nan=False, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Report":
        return cls(
            results=[ProbeResult.from_dict(r) for r in data.get("results", [])],
            host=dict(data.get("host", {})),
            created=data.get("created", ""),
            schema_version=data.get("schema_version", SCHEMA_VERSION),
            tool_version=(data.get("tool") or {}).get("version", ""),
            source=data.get("source", "live"),
            interrupted=bool(data.get("interrupted", False)),
        )
