"""Readiness against a known-good baseline: is this node as good as the ones that work?

A baseline is a report (``gpudoctor report --full -o good.json``) from a node known to be good,
or a directory of them, whose figures are reduced to their median per metric (so one bad node
in the directory does not move the bar). The candidate is another report of the same GPU model.
Each measured figure is compared with its tolerance (below): worse than ``warn_pct`` is a warn,
worse than ``fail_pct`` a fail, each with both values and the percentage. Better is fine.

Different GPU models are refused (exit 2) unless forced; a different driver, torch or CUDA build
is named as a warning, since a changed stack explains (and is itself) a difference from the
known-good node.

The result is a :class:`~gpudoctor.core.model.ProbeResult` named ``baseline``, so it travels in the
report schema: ``report --baseline`` appends it to the report, ``compare`` prints a report
holding only it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from gpudoctor.core import findings
from gpudoctor.core._num import number
from gpudoctor.core.model import ProbeResult, Status
from gpudoctor.core._text import plain_strings as _plain_strings
from gpudoctor.system.safejson import JsonFileError, non_finite, parse_bounded, read_bounded

# A --full report is well under 1 MiB; parsed JSON takes about 25 times its size in memory, so
# this bound keeps one report under half a GiB (it was 64 MiB: 1.6 GiB for one file).
MAX_REPORT_BYTES = 16 * 1024 * 1024
MAX_BASELINE_FILES = 1000


class BaselineError(ValueError):
    """A baseline or report that cannot be used: one line, exit 2."""


@dataclass(frozen=True)
class Tolerance:
    """How one figure is judged. ``better``: higher or lower. ``field``: the measurement's value,
    or its reference (PCIe: the link's maximum generation/width, since an idle GPU lowers the
    current one). Percentages are of the baseline's figure; ``absolute`` tolerances (degrees C)
    are differences."""

    probe: str
    name: str
    better: str  # "higher" or "lower"
    warn: float
    fail: float
    absolute: bool = False
    field: str = "value"
    why: str = ""


# Tolerances, per metric. Sources of the spreads they allow: repeated runs of the same probe on
# one node vary by a few percent (CUDA-event medians of rotated inputs; docs/measurements.md), so
# a warn starts well above that noise; a fail is a gap that no noise explains.
TOLERANCES: tuple[Tolerance, ...] = (
    *(Tolerance("transfer", f"{kind}_bandwidth", "higher", 10, 25,
                why=findings.BASELINE_WHY["copies"])
      for kind in ("pinned_h2d", "pinned_d2h", "pageable_h2d", "pageable_d2h")),
    Tolerance("transfer", "d2d_bandwidth", "higher", 10, 25, why=findings.BASELINE_WHY["d2d"]),
    *(Tolerance("compute", f"{mode}_matmul", "higher", 10, 25,
                why=findings.BASELINE_WHY["matmul"])
      for mode in ("fp32", "tf32", "fp16", "bf16")),
    Tolerance("compute", "cpu_fp32_matmul", "higher", 15, 30,
              why=findings.BASELINE_WHY["cpu_matmul"]),
    Tolerance("memory", "cuda_context", "lower", 20, 50,
              why=findings.BASELINE_WHY["context"]),
    Tolerance("workload", "workload_samples_per_s", "higher", 15, 30,
              why=findings.BASELINE_WHY["samples"]),
    Tolerance("workload", "workload_samples_per_joule", "higher", 15, 30,
              why=findings.BASELINE_WHY["energy"]),
    Tolerance("health", "power_draw", "lower", 20, 50,
              why=findings.BASELINE_WHY["idle_power"]),
    Tolerance("health", "temperature", "lower", 10, 20, absolute=True,
              why=findings.BASELINE_WHY["temperature"]),
    Tolerance("health", "pcie_link_gen", "higher", 0.01, 0.01, field="reference",
              why=findings.BASELINE_WHY["link_gen"]),
    Tolerance("health", "pcie_link_width", "higher", 0.01, 0.01, field="reference",
              why=findings.BASELINE_WHY["link_width"]),
    Tolerance("distributed", "allreduce_busbw_peak", "higher", 10, 25,
              why=findings.BASELINE_WHY["allreduce"]),
)


# --------------------------------------------------------------------------- reading reports
def read_report(path: str | Path) -> dict[str, Any]:
    """A gpudoctor JSON report, bounded in size, with a one-line error for anything else."""
    path = Path(path)
    try:
        data = read_bounded(path, MAX_REPORT_BYTES)
    except JsonFileError as exc:
        raise BaselineError(f"{path}: {exc}") from None
    return parse_report(data, str(path))


def parse_report(data: bytes | str, name: str = "report") -> dict[str, Any]:
    """The report in ``data``, checked where compare reads it; :class:`BaselineError` otherwise.

    Bounded like every JSON input (:mod:`gpudoctor.system.safejson`); every string is made plain
    text; ``host`` must be an object, a result an object with a text ``probe``, a measurement
    an object with a text ``name`` and a ``device`` that is a GPU index or null. A figure
    that is not a finite number (NaN, Infinity, ``1e400``, an integer of 400 digits) becomes
    NA: its value null, with the reason in its ``note``.
    """
    try:
        report = parse_bounded(data, max_depth=MAX_REPORT_DEPTH, max_containers=MAX_REPORT_CONTAINERS)
    except JsonFileError as exc:
        raise BaselineError(f"{name}: {exc} (expected `gpudoctor report --json` output)") from None
    if (not isinstance(report, dict) or not isinstance(report.get("results"), list)
            or not isinstance(report.get("schema_version"), str) or not report["schema_version"].startswith("1.")):
        raise BaselineError(f"{name}: not a gpudoctor report (no schema_version 1.x with results)")
    try:
        return _checked(plain_strings(report))
    except _Wrong as exc:
        raise BaselineError(f"{name}: not a gpudoctor report: {exc}") from None


MAX_REPORT_DEPTH = 64
MAX_REPORT_CONTAINERS = 2_000_000
_NUMBER_FIELDS = ("value", "reference")


def plain_strings(value: object) -> Any:
    """``value`` with every string in it (keys too) made plain text, bounded."""
    return _plain_strings(value, MAX_REPORT_TEXT)


MAX_REPORT_TEXT = 4096


class _Wrong(ValueError):
    """Where in a report, and what was expected there."""


def _checked(report: dict[str, Any]) -> dict[str, Any]:
    if report.get("host") is not None and not isinstance(report["host"], dict):
        raise _Wrong("host: expected an object")
    if report.get("status") is not None and not isinstance(report["status"], str):
        raise _Wrong("status: expected a string")
    for i, result in enumerate(report["results"]):
        where = f"results[{i}]"
        if not isinstance(result, dict):
            raise _Wrong(f"{where}: expected an object")
        if not isinstance(result.get("probe", ""), str):
            raise _Wrong(f"{where}.probe: expected a string")
        if result.get("status") is not None and not isinstance(result["status"], str):
            raise _Wrong(f"{where}.status: expected a string or null")
        measurements = result.get("measurements")
        if measurements is None:
            continue
        if not isinstance(measurements, list):
            raise _Wrong(f"{where}.measurements: expected an array")
        for j, m in enumerate(measurements):
            at = f"{where}.measurements[{j}]"
            if not isinstance(m, dict):
                raise _Wrong(f"{at}: expected an object")
            if not isinstance(m.get("name", ""), str):
                raise _Wrong(f"{at}.name: expected a string")
            device = m.get("device")
            if device is not None and (isinstance(device, bool) or not isinstance(device, int)
                                       or not 0 <= device < 1 << 16):
                raise _Wrong(f"{at}.device: expected a GPU index (an integer from 0) or null")
            for key in _NUMBER_FIELDS:
                if non_finite(m.get(key)):
                    m[key] = None
                    m["note"] = f"{key}: not a finite number; read as NA"
    return report


def _measurements(report: dict[str, Any]) -> Iterable[tuple[str, dict[str, Any]]]:
    for result in report.get("results", []):
        if not isinstance(result, dict):
            continue
        for m in result.get("measurements") or []:
            if isinstance(m, dict):
                yield str(result.get("probe", "")), m


def identity(report: dict[str, Any]) -> dict[str, Any]:
    """GPU models (by device), driver, torch and its CUDA build, as the report read them."""
    models: dict[int, str] = {}
    found: dict[str, Any] = {"driver": None, "torch": None, "torch_cuda": None}
    for probe, m in _measurements(report):
        if probe == "devices" and m.get("name") == "name" and isinstance(m.get("value"), str):
            models[int(m.get("device") or 0)] = m["value"]
        if probe == "environment":
            key = {"nvidia_driver": "driver", "torch": "torch", "torch_cuda_build": "torch_cuda"}.get(str(m.get("name")))
            if key and m.get("value") is not None:
                found[key] = m["value"]
    found["models"] = [models[i] for i in sorted(models)]
    return found


def figures(report: dict[str, Any]) -> dict[tuple[str, str, int | None], float]:
    """Every judged figure of a report: (probe, name, device) -> number."""
    wanted = {(t.probe, t.name): t for t in TOLERANCES}
    out: dict[tuple[str, str, int | None], float] = {}
    for probe, m in _measurements(report):
        tol = wanted.get((probe, str(m.get("name"))))
        if tol is None:
            continue
        value = m.get(tol.field)
        if (figure := number(value, finite=True)) is not None:
            out[(probe, tol.name, m.get("device"))] = figure
    return out


# --------------------------------------------------------------------------- baselines
@dataclass
class Baseline:
    figures: dict[tuple[str, str, int | None], float]
    identity: dict[str, Any]
    sources: list[str]
    outliers: list[str]  # "file: metric x% off the median" for directory baselines
    failed: list[str] = field(default_factory=list)  # baseline reports whose own status is fail


def failed(report: dict[str, Any]) -> bool:
    """Whether a report's own verdict was fail: its node was not usable, so its figures prove nothing."""
    status = report.get("status")
    if status is None:  # written without a status: the worst of its results
        statuses = {r.get("status") for r in report.get("results", []) if isinstance(r, dict)}
        return "fail" in statuses
    return status == "fail"


def load_baseline(path: str | Path) -> Baseline:
    """One report, or the median of every ``*.json`` report in a directory (same GPU model)."""
    path = Path(path)
    if not path.is_dir():
        report = read_report(path)
        return Baseline(figures(report), identity(report), [str(path)], [], [str(path)] if failed(report) else [])
    files = sorted(p for p in path.glob("*.json") if p.is_file())[:MAX_BASELINE_FILES + 1]
    if not files:
        raise BaselineError(f"{path}: no *.json reports in this directory")
    if len(files) > MAX_BASELINE_FILES:
        raise BaselineError(f"{path}: more than {MAX_BASELINE_FILES} reports; pick a smaller set")
    # One report in memory at a time: each is reduced to its identity, figures and verdict before
    # the next is read (a directory of large reports, or many links to one, held them all).
    # A file that is another name of one already read (a hard link) is read once.
    seen_files: set[tuple[int, int]] = set()
    kept: list[Path] = []
    ids: list[dict[str, Any]] = []
    failing: list[str] = []
    per_metric: dict[tuple[str, str, int | None], list[tuple[str, float]]] = {}
    for f in files:
        try:
            info = f.stat()
        except OSError as exc:
            raise BaselineError(f"{f}: cannot read: {exc.strerror or exc}") from None
        if (info.st_dev, info.st_ino) in seen_files:
            continue
        seen_files.add((info.st_dev, info.st_ino))
        report = read_report(f)
        kept.append(f)
        ids.append(identity(report))
        if failed(report):
            failing.append(str(f))
        for key, value in figures(report).items():
            per_metric.setdefault(key, []).append((f.name, value))
        del report
    files = kept
    models = {tuple(i["models"]) for i in ids if i["models"]}
    if len(models) > 1:
        listing = "; ".join(f"{f.name}: {', '.join(i['models']) or 'no GPU'}" for f, i in zip(files, ids))
        raise BaselineError(f"{path}: reports of different GPU models ({listing}); keep one model per directory")
    medians = {key: statistics.median(v for _, v in values) for key, values in per_metric.items()}
    tolerances = {(t.probe, t.name): t for t in TOLERANCES}
    outliers = []
    for key, values in per_metric.items():
        if len(values) < 3:
            continue  # a median of two is their mean: no outlier can be named
        tol = tolerances[(key[0], key[1])]
        for name, value in values:
            gap = _worse_by(tol, medians[key], value)
            if gap is not None and gap > tol.fail:
                outliers.append(f"{name}: {_label(key)} {_fmt(value)} vs the median {_fmt(medians[key])}")
    merged = dict(ids[0])
    for part in ("driver", "torch", "torch_cuda"):
        seen = sorted({str(i[part]) for i in ids if i[part] is not None})
        merged[part] = seen[0] if len(seen) == 1 else (" / ".join(seen) if seen else None)
    return Baseline(medians, merged, [str(f) for f in files], sorted(outliers), failing)


# --------------------------------------------------------------------------- comparing
def _worse_by(tol: Tolerance, base: float, value: float) -> float | None:
    """How much worse ``value`` is than ``base`` (percent, or absolute units); None when not worse."""
    diff = (base - value) if tol.better == "higher" else (value - base)
    if diff <= 0:
        return None
    if tol.absolute:
        return diff
    if base == 0:
        return math.inf
    return diff / abs(base) * 100.0


def _fmt(value: float) -> str:
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-2):
        return f"{value:.3g}"
    return f"{value:.4g}"


def _label(key: tuple[str, str, int | None]) -> str:
    probe, name, device = key
    return f"{name}" + (findings.baseline_phrase("on_gpu", device=device) if device is not None else "")


def compare(baseline: Baseline, candidate: dict[str, Any], *, force: bool = False,
            candidate_name: str = "this report") -> ProbeResult:
    """Judge ``candidate`` (a report dict) against ``baseline``. Raises BaselineError when the
    GPU models differ and ``force`` is false, or when nothing can be compared."""
    result = ProbeResult(probe="baseline")
    result.details["baseline_files"] = baseline.sources
    failures = _failed_reports(result, baseline, candidate, candidate_name)
    mine, theirs = identity(candidate), baseline.identity
    if mine["models"] and theirs["models"] and mine["models"] != theirs["models"]:
        words = findings.baseline_phrase("models", mine=", ".join(mine["models"]), theirs=", ".join(theirs["models"]))
        if not force:
            raise BaselineError(findings.baseline_phrase("models_differ", models=words))
        result.findings.append(findings.finding("baseline_model_differs", models=words))
    _stack_drift(result, mine, theirs)
    judged = _judge(result, baseline, figures(candidate))
    if baseline.outliers:
        result.details["baseline_outliers"] = baseline.outliers
        result.findings.append(findings.finding("baseline_outliers_ignored", count=len(baseline.outliers),
                                                outliers="; ".join(baseline.outliers[:3]),
                                                more=" ..." if len(baseline.outliers) > 3 else ""))
    if judged == 0 and not failures:
        raise BaselineError(findings.baseline_phrase("nothing_in_common", name=candidate_name))
    regressions = [f for f in result.findings if f.code == "baseline_regression"]
    worse = (findings.baseline_phrase("worse", count=len(regressions)) if regressions
             else findings.baseline_phrase("none_worse"))
    compared = findings.baseline_phrase("compared", judged=judged, reports=len(baseline.sources), worse=worse)
    result.settle("; ".join(failures + [compared]))
    return result


def _failed_reports(result: ProbeResult, baseline: Baseline, candidate: dict[str, Any], candidate_name: str) -> list[str]:
    """A failing report on either side fails the comparison, first: figures as good as the baseline's
    say nothing about a node whose report failed, and a failing baseline is no known-good node."""
    said = []
    if failed(candidate):
        said.append(findings.baseline_phrase("candidate_failed", name=candidate_name))
        result.findings.append(findings.finding("report_failed:baseline", name=candidate_name))
    if baseline.failed:
        names = ", ".join(baseline.failed)
        said.append(findings.baseline_phrase("base_failed", names=names))
        result.findings.append(findings.finding("baseline_report_failed", names=names))
    return said


def _stack_drift(result: ProbeResult, mine: dict[str, Any], theirs: dict[str, Any]) -> None:
    for key in ("driver", "torch", "torch_cuda"):
        if mine[key] is not None and theirs[key] is not None and str(mine[key]) != str(theirs[key]):
            result.findings.append(findings.finding(f"baseline_{key}_differs", mine=mine[key], theirs=theirs[key]))


def _judge(result: ProbeResult, baseline: Baseline, mine: dict[tuple[str, str, int | None], float]) -> int:
    tolerances = {(t.probe, t.name): t for t in TOLERANCES}
    judged = 0
    table = result.details.setdefault("figures", [])
    for key in sorted(baseline.figures, key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2])):
        if key not in mine:
            continue
        tol = tolerances[(key[0], key[1])]
        base, value = baseline.figures[key], mine[key]
        judged += 1
        unit = "C" if tol.absolute else ""
        result.measure(f"{key[0]}.{key[1]}", value, unit, device=key[2], reference=base,
                       note=f"baseline {_fmt(base)}; tolerance {tol.warn:g}{' C' if tol.absolute else ' %'} (warn), "
                            f"{tol.fail:g}{' C' if tol.absolute else ' %'} (fail), {tol.better} is better")
        gap = _worse_by(tol, base, value)
        status = Status.PASS if gap is None or gap <= tol.warn else (Status.FAIL if gap > tol.fail else Status.WARN)
        table.append({"probe": key[0], "figure": key[1], "device": key[2], "baseline": base, "value": value,
                      "unit": "C" if tol.absolute else "%", "worse_by": None if gap is None or not math.isfinite(gap)
                      else round(gap, 2), "status": status.value})
        if gap is None or status == Status.PASS:
            continue
        amount = f"{gap:.1f} C" if tol.absolute else (f"{gap:.0f} %" if math.isfinite(gap) else "infinitely")
        direction = "above" if tol.better == "lower" else "below"
        result.findings.append(findings.finding(
            "baseline_regression", status=status, device=key[2], value=_fmt(value), amount=amount, direction=direction,
            what=key[1] + (findings.baseline_phrase("link_maximum") if tol.field == "reference" else ""),
            where="" if key[2] is None else findings.baseline_phrase("on_gpu", device=key[2]), base=_fmt(base),
            warn=tol.warn, fail=tol.fail, unit=" C" if tol.absolute else " %", why=findings.sentence(tol.why),
            probe=key[0]))
    return judged
