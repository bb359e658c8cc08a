"""fleet's collection: the queries of one look at the fleet, one row per GPU, judged and sorted.

A GPU Prometheus no longer gets (a target that stopped answering, or a GPU gone from a live
exporter's scrape: a warning with its age) keeps its last known readings, Xid and report verdict
from the look-back window, judged as before and said to be last known.
"""

from __future__ import annotations

import re
import time
from typing import Sequence

from gpudoctor.core import findings
from gpudoctor.sampling.presentation import fmt_age

from . import idle, rules
from .client import Prometheus
from .rows import (DEFAULT_IDLE_WINDOW, DEFAULT_LOOKBACK, DEFAULT_REPORT_MAX_AGE_S, DEFAULT_STALE_AFTER_S, STATUS_ORDER, FleetError,
                    FleetRow, FleetView, Key, Series, key_of)
from .selector import Matcher, names_regex, selector as _selector


def collect(client: Prometheus, matchers: Sequence[Matcher] = (), *, stale_after_s: float = DEFAULT_STALE_AFTER_S,
            lookback: str = DEFAULT_LOOKBACK, report_max_age_s: float = DEFAULT_REPORT_MAX_AGE_S,
            now: float | None = None, idle_window: str = DEFAULT_IDLE_WINDOW) -> FleetView:
    """Query Prometheus and build one judged row per GPU, worst first."""
    now = time.time() if now is None else now
    selector = _selector(matchers)
    up = client.query("up" + selector, at=now)
    current = client.query(_selector(matchers, names_regex(rules.gpudoctor_metrics() + rules.dcgm_metrics())), at=now)
    targets = {s.labels.get("instance", ""): int(s.value) for s in up}
    by_metric: rules.ByMetric = {}
    for s in current:
        by_metric.setdefault(s.labels.get("__name__", ""), []).append(s)
    rows, sampled_at = _known_rows(client, matchers, lookback, now)
    _rows_of_other_series(rows, by_metric)
    _unreadable_targets(client, matchers, rows, targets, now)
    gone = _not_exported(rows, by_metric, targets)
    if gone:  # two or three more queries, only for the nodes concerned (a healthy fleet costs none)
        nodes = Matcher("instance", "=~", "|".join(sorted({re.escape(key[0]) for key in gone})))
        # The last value of every kept series (last_over_time keeps the metric name), and when each
        # GPU was last exported (the scrape time of its info series).
        last_known = client.query(f"last_over_time({_selector([*matchers, nodes], names_regex(rules.last_known_metrics()))}"
                                  f"[{lookback}])", at=now)
        _ages(rows, gone, targets, sampled_at, _last_seen(client, [*matchers, nodes], rows, gone, lookback, now), now)
        _keep_last_known(by_metric, last_known, gone, targets)
    rules.judge_gpudoctor(rows, by_metric, now, stale_after_s, report_max_age_s)
    window = (now - _duration_s(lookback), lookback)
    rules.judge_dcgm(rows, by_metric, _xid_history(client, matchers, by_metric, lookback, now), window)
    rules.judge_busy(rows)
    rules.mark_last_known(rows, gone)
    rules.judge_targets(rows, targets, sampled_at, now)
    idle.judge(client, matchers, rows, now, window=idle_window, lookback=lookback)
    if not rows:
        raise FleetError("empty", f"Prometheus at {client.url} holds no GPU series"
                                  f"{' for ' + selector if matchers else ''} (neither gpudoctor's exporter "
                                  "nor dcgm-exporter in the last " + lookback + ")")
    for row in rows.values():
        row.settle()
    ordered = sorted(rows.values(), key=lambda r: (STATUS_ORDER[r.status], *rules.not_working_first(r), r.instance,
                                                   _gpu_sort(r.gpu)))
    return FleetView(client.url, selector, now, ordered, targets, client.queries, idle_window)


def _known_rows(client: Prometheus, matchers: Sequence[Matcher], lookback: str,
                now: float) -> tuple[dict[Key, FleetRow], dict[str, float]]:
    """A row for every GPU seen in the look-back window (so a target that stopped answering still
    lists its GPUs), and each instance's last sample time."""
    selector = _selector(matchers)
    known = client.query(f"last_over_time(gpudoctor_gpu_info{selector}[{lookback}])", at=now)
    # a GPU of dcgm-exporter: any reading fleet shows, under the names of any exporter release
    known_dcgm = client.query(f"last_over_time({_selector(matchers, names_regex(rules.dcgm_gpu_names()))}[{lookback}])",
                              at=now)
    last_sample = client.query(f"last_over_time(gpudoctor_sample_timestamp_seconds{selector}[{lookback}])", at=now)
    rows: dict[Key, FleetRow] = {}

    def row_for(labels: dict[str, str], source: str) -> FleetRow:
        key = key_of(labels)
        row = rows.get(key)
        if row is None:
            row = rows[key] = FleetRow(instance=key[0], gpu=key[1], source=source, job=labels.get("job", ""))
        return row

    for s in known:
        row = row_for(s.labels, "gpudoctor")
        row.name, row.uuid = s.labels.get("name", ""), s.labels.get("uuid", "")
    for s in known_dcgm:
        row = row_for(s.labels, "dcgm-exporter")
        row.name = row.name or s.labels.get("modelName", "")
        row.uuid = row.uuid or s.labels.get("UUID", "")
    return rows, {s.labels.get("instance", ""): s.value for s in last_sample}


def _rows_of_other_series(rows: dict[Key, FleetRow], by_metric: rules.ByMetric) -> None:
    """A row for each GPU a live target exports series of that fleet reads, though none of the names
    that make a row (a dcgm-exporter whose counters file holds only its last-Xid gauge or its ECC
    fields): its Xid and memory faults are judged, never left out."""
    for name in rules.dcgm_metrics():
        for s in by_metric.get(name, []):
            key = key_of(s.labels)
            if key[1] and key not in rows:
                rows[key] = FleetRow(instance=key[0], gpu=key[1], source="dcgm-exporter", job=s.labels.get("job", ""),
                                     name=s.labels.get("modelName", ""), uuid=s.labels.get("UUID", ""))


def _not_exported(rows: dict[Key, FleetRow], by_metric: rules.ByMetric,
                  targets: dict[str, int]) -> dict[Key, float | None]:
    """The GPUs Prometheus no longer gets: those of a target that stopped answering (``up == 0``),
    and those of a live exporter (gpudoctor's or dcgm-exporter) missing from its latest scrape (seen
    in the look-back window, no series of them now: they vanished; DCGM stops exporting a GPU that
    fell off the bus). Their ages are filled in by :func:`_ages`."""
    exported = {key_of(s.labels) for series in by_metric.values() for s in series}
    return {key: None for key, row in rows.items()
            if targets.get(row.instance, 1) == 0 or (row.gpu and key not in exported)}


def _last_seen(client: Prometheus, matchers: Sequence[Matcher], rows: dict[Key, FleetRow],
               gone: dict[Key, float | None], lookback: str, now: float) -> dict[Key, float]:
    """When each GPU of the nodes concerned was last exported: the scrape time of gpudoctor's info
    series, or the last subquery step at which it had a series dcgm-exporter makes a row from (one
    more query, only where a dcgm-exporter GPU is gone; counted per GPU first, as timestamp() drops
    the names and the series of one GPU would then collide)."""
    seen = {key_of(s.labels): s.value for s in client.query(
        f"last_over_time(timestamp(gpudoctor_gpu_info{_selector(matchers)})[{lookback}:])", at=now)}
    if any(rows[key].source == "dcgm-exporter" for key in gone):
        dcgm = _selector(matchers, names_regex(rules.dcgm_gpu_names()))
        for s in client.query(f"last_over_time(timestamp(count by (instance, gpu) ({dcgm}))[{lookback}:])", at=now):
            seen.setdefault(key_of(s.labels), s.value)
    return seen


def _ages(rows: dict[Key, FleetRow], gone: dict[Key, float | None], targets: dict[str, int],
          sampled_at: dict[str, float], seen_at: dict[Key, float], now: float) -> None:
    """How old the last readings of each GPU no longer exported are: a silent target's last sample,
    a vanished GPU's last scrape; a vanished GPU is a warning, with that age."""
    for key in gone:
        row = rows[key]
        since = sampled_at.get(row.instance) if targets.get(row.instance, 1) == 0 else seen_at.get(key)
        age = gone[key] = now - since if since else None
        if targets.get(row.instance, 1) != 0:
            last_seen = findings.fleet_phrase("last_seen", age=fmt_age(age)) if age is not None else ""
            row.add(findings.finding("gpu_not_exported", since=last_seen))


def _keep_last_known(by_metric: rules.ByMetric, last_known: list[Series],
                     gone: dict[Key, float | None], targets: dict[str, int]) -> None:
    """Add the last known series of GPUs no longer exported (and the node-wide ones of silent
    targets: the report verdict) where the latest scrape has none, so they are judged as before."""
    present = {(name, key_of(s.labels)) for name, series in by_metric.items() for s in series}
    for s in last_known:
        name, key = s.labels.get("__name__", ""), key_of(s.labels)
        if not name or (name, key) in present:
            continue  # a Prometheus that dropped the name: nothing to file it under
        if key in gone or (key[1] == "" and targets.get(key[0], 1) == 0):
            by_metric.setdefault(name, []).append(s)


_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def _duration_s(lookback: str) -> float:
    """'1h' -> 3600.0 (the Prometheus durations `fleet --lookback` takes; 0 for anything else)."""
    found = re.fullmatch(r"([0-9]{1,9})([smhdwy])", lookback)
    return float(int(found.group(1)) * _UNITS_S[found.group(2)]) if found else 0.0


def _xid_history(client: Prometheus, matchers: Sequence[Matcher], by_metric: rules.ByMetric, lookback: str,
                 now: float) -> dict[Key, rules.XidHistory]:
    """dcgm-exporter's last-Xid gauge over the look-back window, for the nodes whose gauge shows an
    Xid now (one query; a fleet without Xids costs none): the gauge keeps only its newest value, so
    the sequence is what tells a critical Xid followed by a harmless one, and a value that has not
    changed for the whole window."""
    shown = sorted({re.escape(s.labels.get("instance", "")) for name in rules.DCGM_XID
                    for s in by_metric.get(name, []) if s.value > 0})
    if not shown:
        return {}
    nodes = Matcher("instance", "=~", "|".join(shown))
    try:
        # the gauge under its 4.8 or its 4.9 name
        history = client.query_history(f"{_selector([*matchers, nodes], names_regex(rules.DCGM_XID))}[{lookback}]",
                                       at=now)
    except FleetError as exc:
        if exc.kind != "query":
            raise
        return {}  # a server that refuses the range selector: the gauge's last value is judged, as before
    return {key_of(labels): samples for labels, samples in history if samples}


# Names that look like a GPU exporter's (dcgm-exporter, gpudoctor's, nvidia_gpu_exporter, vendor
# exporters): a target with such series and no row fleet could build is listed, never left out.
GPU_LIKE = '__name__=~"(?i)(.*dcgm.*|.*gpu_.*|.*_gpu.*|.*nvidia.*|.*nvml.*)"'
UNREADABLE_SHOWN = 6


# The answering targets without a row are asked about in groups whose instance regex stays under
# this many characters (a URL of a few KiB): one query per group, none when every target has rows.
INSTANCES_PER_QUERY_CHARS = 3000


def _instance_groups(instances: Sequence[str]) -> list[str]:
    groups: list[list[str]] = [[]]
    for instance in instances:
        escaped = re.escape(instance)
        if groups[-1] and sum(len(e) + 1 for e in groups[-1]) + len(escaped) > INSTANCES_PER_QUERY_CHARS:
            groups.append([])
        groups[-1].append(escaped)
    return ["|".join(group) for group in groups if group]


def _unreadable_targets(client: Prometheus, matchers: Sequence[Matcher], rows: dict[Key, FleetRow],
                        targets: dict[str, int], now: float) -> None:
    """A row for each answering target without a GPU row that holds GPU-like series: those fleet
    cannot read are named; a target of only names fleet reads (gpudoctor's exporter on a node where
    NVML is down or sees no GPU) is judged by its node-wide series (NVML, the report) and says it
    exports no GPU. Made before the judging, so the node-wide judgements reach these rows too. Only
    those targets are asked about (the series of GPUs fleet reads are never loaded again)."""
    covered = {row.instance for row in rows.values()}
    uncovered = sorted(i for i, up in targets.items() if up and i not in covered)
    found, waiting = [], set(uncovered)
    for group in _instance_groups(uncovered):
        selector = _selector([*matchers, Matcher("instance", "=~", group)], GPU_LIKE)
        found += client.query(f"group by (instance, __name__) ({selector})", at=now)
    known = set(rules.gpudoctor_metrics() + rules.dcgm_metrics())
    names: dict[str, set[str]] = {}
    for s in found:
        instance, name = s.labels.get("instance", ""), s.labels.get("__name__", "")
        if name and instance in waiting:
            names.setdefault(instance, set()).add(name)
    for instance, held in names.items():
        # gpudoctor's own exporter's names are all known to fleet, read or not
        unknown = sorted(n for n in held if n not in known and not n.startswith("gpudoctor_"))
        if unknown:
            row = rows[(instance, "")] = FleetRow(instance=instance, gpu="", source="unknown")
            row.add(findings.finding("target_unreadable", names=_some(unknown), evidence={"names": unknown[:50]}))
        else:
            row = rows[(instance, "")] = FleetRow(instance=instance, gpu="", source="gpudoctor")
            row.add(findings.finding("target_no_gpu", names=_some(sorted(held)), evidence={"names": sorted(held)[:50]}))


def _some(names: list[str]) -> str:
    """The first names, then how many more."""
    return ", ".join(names[:UNREADABLE_SHOWN]) + (f" and {len(names) - UNREADABLE_SHOWN} more"
                                                   if len(names) > UNREADABLE_SHOWN else "")


def _gpu_sort(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)
