"""``gpudoctor fleet``: every node's GPUs from what Prometheus already holds, worst first.

It reads Prometheus's HTTP API (``/api/v1/query``, instant queries); it never scrapes nodes.
Two kinds of series are understood:

* gpudoctor's exporter (``gpudoctor_gpu_*``, ``gpudoctor_report_*``; docs/fleet.md), and
* NVIDIA dcgm-exporter (``DCGM_FI_DEV_*``), for nodes that run that instead.

One row per (instance, GPU). A row's status is the worst of its findings:

* ``fail``: the GPU stopped answering NVML, uncorrectable ECC errors since the driver loaded,
  row remapping failed, a critical Xid (see gpudoctor/xid.py), or the node's last report failed;
* ``stale``: the target stopped answering Prometheus (``up == 0``), or its readings are older
  than ``stale_after_s`` (a sampler stuck in the driver);
* ``warn``: a reset is pending to activate a row remap or page retirement, clocks held down by
  heat or a hardware slowdown (the power cap alone is a loaded board's normal state), a non-critical Xid, the last report warned or is old;
* ``pass``: none of these.

A GPU Prometheus no longer gets (a target that stopped answering, or a GPU gone from a live
exporter's scrape: a warning with its age) keeps its last known readings, Xid and report verdict
from the look-back window, judged as before and said to be last known: a critical last-known Xid
keeps the row failing.

Front end: no torch, no pynvml; only the standard library's HTTP client.
"""

from __future__ import annotations

import math
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence

from gpudoctor import xid
from gpudoctor.backends import busy, catalogue
from gpudoctor.backends.nvml import THROTTLE_REASONS
from gpudoctor.presentation import fmt_age, plain_text

SCHEMA_VERSION = 1
STATUS_ORDER = {"fail": 0, "stale": 1, "warn": 2, "pass": 3}
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_STALE_AFTER_S = 120.0
DEFAULT_LOOKBACK = "1h"
DEFAULT_REPORT_MAX_AGE_S = 24 * 3600.0
MAX_SERIES = 200_000  # an answer larger than this is refused rather than held in memory
# One answer's bytes: a series is about 200 bytes of JSON, so 32 MiB holds some 160,000 series
# (thousands of GPUs; fleets beyond that are read in parts with --match). Parsed JSON takes about
# 25 times its size: this keeps one answer under 1 GiB (256 MiB allowed answers of 6 GiB).
MAX_ANSWER_BYTES = 32 * 1024 * 1024
LABEL_MAX = 128

# Clock event reasons that cost speed for a reason worth a look: software power cap, hardware
# slowdown, software/hardware thermal slowdown, power brake. gpudoctor's exporter labels them by
# name; dcgm-exporter's DCGM_FI_DEV_CLOCK_THROTTLE_REASONS is NVML's bit mask (nvmlClocksEventReason*).
GPUDOCTOR_THROTTLE_WORDS = {"sw_power_cap": "power cap", "hw_slowdown": "hardware slowdown",
                            "sw_thermal_slowdown": "thermal slowdown (software)",
                            "hw_thermal_slowdown": "thermal slowdown (hardware)", "hw_power_brake": "power brake"}

# The series read, by source. Each query is one HTTP request; the selector is the user's --match.
# The readings a row shows are the catalogue's fleet readings (gpudoctor.backends.catalogue): their
# gauges, and the DCGM fields of those fleet reads from dcgm-exporter too.
GPUDOCTOR_METRICS = (
    "gpudoctor_gpu_info", "gpudoctor_gpu_up", "gpudoctor_gpu_error_info",
    *(r.prometheus for r in catalogue.fleet_readings()), "gpudoctor_gpu_throttled",
    "gpudoctor_gpu_ecc_errors_total", "gpudoctor_gpu_remapped_rows_failure", "gpudoctor_gpu_remapped_rows_pending",
    "gpudoctor_gpu_retired_pages_pending", "gpudoctor_gpu_xid_errors_total", "gpudoctor_gpu_kernel_log_xids",
    "gpudoctor_gpu_last_xid",
    "gpudoctor_gpu_last_xid_timestamp_seconds", "gpudoctor_nvml_up", "gpudoctor_nvml_error_info",
    "gpudoctor_sample_age_seconds", "gpudoctor_report_status", "gpudoctor_report_timestamp_seconds",
)
DCGM_METRICS = (
    *(r.dcgm for r in catalogue.fleet_readings() if r.dcgm_scale is not None), "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
)

# What is kept of a GPU or node that Prometheus no longer gets (a stopped target, a GPU gone from a
# live exporter): the last value of each of these in the look-back window. Not the moment's state
# (throttling, NVML up, sample age), which says nothing once the node is silent.
LAST_KNOWN_METRICS = tuple(name for name in GPUDOCTOR_METRICS + DCGM_METRICS if name not in (
    "gpudoctor_gpu_info", "gpudoctor_gpu_throttled", "gpudoctor_nvml_up", "gpudoctor_nvml_error_info",
    "gpudoctor_sample_age_seconds", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"))

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_MATCH = re.compile(r"^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$", re.S)


class FleetError(Exception):
    """A fleet query that could not be answered; ``kind`` picks the exit code."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "usage", "unreachable", "query", "empty"


# --------------------------------------------------------------------------- input
@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def promql(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{self.label}{self.op}"{escaped}"'


def parse_match(text: str) -> Matcher:
    """``job=gpu``, ``instance!=node1:9402``, ``job=~"gpu.*"``: one Prometheus label matcher."""
    m = _MATCH.match(text or "")
    if not m:
        raise FleetError("usage", f"--match {text!r}: expected LABEL=VALUE (also !=, =~, !~), e.g. job=gpu")
    label, op, value = m.groups()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    if label == "__name__":
        raise FleetError("usage", "--match __name__=...: fleet picks the metrics itself; match on other labels")
    if op in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as exc:
            raise FleetError("usage", f"--match {text!r}: not a regular expression ({exc})") from None
    return Matcher(label, op, value)


def check_url(url: str) -> str:
    """The Prometheus base URL, without a trailing slash; one-line error when it is not one."""
    try:
        parts = urllib.parse.urlsplit(url or "")
    except ValueError as exc:  # "http://[::1": Invalid IPv6 URL
        raise FleetError("usage", f"--prometheus {plain_text(url, limit=200)!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise FleetError("usage", f"--prometheus {url!r}: expected http(s)://HOST[:PORT][/PATH], "
                                  "e.g. http://prometheus:9090")
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise FleetError("usage", f"--prometheus {url!r}: the port is not a number from 0 to 65535") from None
    return url.rstrip("/")


# --------------------------------------------------------------------------- Prometheus
@dataclass
class Series:
    labels: dict[str, str]
    value: float


class Prometheus:
    """A minimal client for ``/api/v1/query`` with bounded answers and one-line errors."""

    unreadable: Sequence[str] = ()  # the last answer's samples left out (NA), and why

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                 opener: Callable[..., Any] | None = None) -> None:
        self.url = check_url(url)
        self.timeout_s = timeout_s
        self._open = opener or urllib.request.urlopen
        self.queries = 0
        # ``timeout_s`` bounds every query of this client together, not each socket read: a
        # server that trickles a byte at a time held `fleet --timeout 3` for minutes.
        self.deadline = time.monotonic() + timeout_s

    def query(self, expr: str, at: float | None = None) -> list[Series]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        request = urllib.request.Request(f"{self.url}/api/v1/query?" + urllib.parse.urlencode(params),
                                         headers={"Accept": "application/json"})
        self.queries += 1
        try:
            body = self._fetch_by_deadline(request)
        except urllib.error.HTTPError as exc:
            body = exc.read(64 * 1024)
            raise FleetError(*self._http_error(exc.code, body)) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise FleetError("unreachable", f"Prometheus at {self.url} cannot be reached: "
                                            f"{plain_text(reason, limit=200)}") from None
        if len(body) > MAX_ANSWER_BYTES:
            raise FleetError("query", f"Prometheus answered more than {MAX_ANSWER_BYTES >> 20} MiB; "
                                      "narrow the selection with --match")
        return self._parse(body)

    def _fetch_by_deadline(self, request: Any) -> bytes:
        """The answer's body (at most MAX_ANSWER_BYTES + 1), or TimeoutError at the deadline.

        The request runs in a daemon thread and this one waits for it until the deadline only:
        connecting, the headers and the body together, however slowly each byte comes."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer within the {self.timeout_s:g} s allowed")
        box: dict[str, Any] = {}
        given_up = threading.Event()

        def fetch() -> None:
            try:
                with self._open(request, timeout=left) as response:
                    chunks: list[bytes] = []
                    size = 0
                    read = getattr(response, "read1", None) or response.read
                    while size <= MAX_ANSWER_BYTES and not given_up.is_set():
                        chunk = read(min(1 << 16, MAX_ANSWER_BYTES + 1 - size))
                        if not chunk:
                            break
                        chunks.append(chunk)
                        size += len(chunk)
                    box["body"] = b"".join(chunks)
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc

        thread = threading.Thread(target=fetch, name="gpudoctor-fleet-query", daemon=True)
        thread.start()
        thread.join(left)
        if thread.is_alive():
            given_up.set()  # it stops at its next chunk; a daemon, it never holds the exit
            raise TimeoutError(f"no complete answer within the {self.timeout_s:g} s allowed")
        if "error" in box:
            raise box["error"]
        return box["body"]

    def _http_error(self, code: int, body: bytes) -> tuple[str, str]:
        try:
            data = _decode(body)
            error = plain_text(data.get("error") or "", limit=300)
            kind = "query" if data.get("errorType") in ("bad_data", "execution", "timeout") else "unreachable"
            return kind, f"Prometheus at {self.url} refused the query (HTTP {code}): {error}"
        except (ValueError, AttributeError):
            return "unreachable", (f"{self.url} answered HTTP {code} without Prometheus's JSON: "
                                   "is this the Prometheus server's address?")

    def _parse(self, body: bytes) -> list[Series]:
        series, self.unreadable = parse_answer(body, self.url)
        return series


# --------------------------------------------------------------------------- answers
# The one reader of Prometheus's answers: whatever the server (or whatever answers at its
# address) sends, the rest of fleet sees only Series with text labels and a finite value, or
# a FleetError. A sample that is not a finite number (NaN, +Inf: Prometheus's answer to 0/0 or
# an overflow) is NA: left out, its reason kept in Prometheus.unreadable. A series that lacks a
# label its metric is judged by is left out the same way.
ANSWER_MAX_DEPTH = 16  # an instant vector nests 5 levels deep
REQUIRED_LABELS = {"gpudoctor_gpu_throttled": ("reason",)}
MAX_UNREADABLE = 20  # reasons kept per answer


def _decode(body: bytes) -> Any:
    from gpudoctor.safejson import JsonFileError, parse_bounded

    try:
        return parse_bounded(body, max_depth=ANSWER_MAX_DEPTH, max_containers=4 * MAX_SERIES + 16)
    except JsonFileError:
        raise ValueError("not Prometheus's JSON") from None


def _label_text(key: str, value: str) -> str:
    text = plain_text(value, limit=LABEL_MAX)
    if key == "gpu" and not text.isascii():  # "²" is a digit to str.isdigit, not to int(): keep it as text
        text = text.encode("ascii", "backslashreplace").decode("ascii")[:LABEL_MAX]
    return text


def parse_answer(body: bytes, url: str = "Prometheus") -> tuple[list[Series], list[str]]:
    """(series, reasons for the samples left out) of one /api/v1/query answer; else FleetError."""
    try:
        data = _decode(body)
    except ValueError:
        raise FleetError("unreachable", f"{url} answered something that is not JSON: "
                                        "is this the Prometheus server's address?") from None
    if not isinstance(data, dict) or data.get("status") != "success":
        error = data.get("error") if isinstance(data, dict) else None
        shown = plain_text(error if isinstance(error, str) else "no error message", limit=300)
        raise FleetError("query", f"Prometheus at {url} could not answer: {shown}")
    inner = data.get("data")
    result = inner.get("result") if isinstance(inner, dict) else None
    if not isinstance(result, list):
        raise FleetError("query", f"Prometheus at {url} answered an unexpected shape (no result list)")
    if len(result) > MAX_SERIES:
        raise FleetError("query", f"Prometheus answered {len(result)} series (limit {MAX_SERIES}); "
                                  "narrow the selection with --match")
    series: list[Series] = []
    unreadable: list[str] = []

    def skip(labels: dict[str, str], why: str) -> None:
        if len(unreadable) < MAX_UNREADABLE:
            name = labels.get("__name__") or "a series"
            where = ", ".join(f"{k}={labels[k]}" for k in ("instance", "gpu") if labels.get(k))
            unreadable.append(f"{name}{f' ({where})' if where else ''}: {why}")

    for item in result:
        metric = item.get("metric") if isinstance(item, dict) else None
        sample = item.get("value") if isinstance(item, dict) else None
        if (not isinstance(metric, dict) or not isinstance(sample, list) or len(sample) != 2
                or not all(isinstance(v, str) for v in metric.values())):
            skip({}, "not a series of Prometheus's instant vector")
            continue
        labels = {plain_text(k, limit=LABEL_MAX): _label_text(k, v) for k, v in metric.items()}
        missing = [label for label in REQUIRED_LABELS.get(labels.get("__name__", ""), ()) if label not in labels]
        if missing:
            skip(labels, f"no {missing[0]!r} label")
            continue
        raw = sample[1]
        try:
            value = float(raw) if isinstance(raw, str) and len(raw) <= 64 else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            skip(labels, f"not a finite number ({plain_text(raw, limit=24)}); NA")
            continue
        series.append(Series(labels, value))
    return series, unreadable


# --------------------------------------------------------------------------- rows
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
    # The readings (gpudoctor.backends.catalogue's fleet readings: a test keeps the two the same),
    # in the exporter's units.
    utilization: float | None = None  # ratio 0-1
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_active: float | None = None  # ratio 0-1 (NVML GPM / DCGM_FI_PROF_SM_ACTIVE)
    tensor_active: float | None = None  # ratio 0-1 (NVML GPM / DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)
    xid_count: int | None = None
    xid_last: int | None = None
    xid_last_words: str | None = None
    xid_last_time: float | None = None
    report_status: str | None = None
    report_age_s: float | None = None
    # True for a GPU Prometheus no longer gets (its target stopped answering, or it vanished from a
    # live exporter): its readings and findings are the last known, last_known_age_s old (None: unknown).
    last_known: bool = False
    last_known_age_s: float | None = None
    findings: list[tuple[str, str]] = field(default_factory=list)  # (status, words)

    def add(self, status: str, words: str) -> None:
        self.findings.append((status, words))

    def settle(self) -> None:
        ordered = sorted(self.findings, key=lambda f: STATUS_ORDER[f[0]])
        self.status = ordered[0][0] if ordered else "pass"
        self.reason = "; ".join(words for _, words in ordered) if ordered else "no problem seen"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("findings")
        for key, value in data.items():
            if isinstance(value, float) and not math.isfinite(value):
                data[key] = None
        return data


def _key(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("instance", ""), labels.get("gpu", "")


def _selector(matchers: Sequence[Matcher], extra: str = "") -> str:
    parts = [m.promql() for m in matchers]
    if extra:
        parts.insert(0, extra)
    return "{" + ",".join(parts) + "}"


def _names_regex(names: Iterable[str]) -> str:
    return '__name__=~"' + "|".join(names) + '"'


@dataclass
class FleetView:
    prometheus: str
    selector: str
    queried_at: float
    rows: list[FleetRow]
    targets: dict[str, int]  # instance -> up (1/0)
    queries: int = 0

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
            "rows": [row.to_dict() for row in self.rows],
        }


def collect(client: Prometheus, matchers: Sequence[Matcher] = (), *, stale_after_s: float = DEFAULT_STALE_AFTER_S,
            lookback: str = DEFAULT_LOOKBACK, report_max_age_s: float = DEFAULT_REPORT_MAX_AGE_S,
            now: float | None = None) -> FleetView:
    """Query Prometheus and build one judged row per GPU, worst first."""
    now = time.time() if now is None else now
    selector = _selector(matchers)
    up = client.query("up" + selector, at=now)
    current = client.query(_selector(matchers, _names_regex(GPUDOCTOR_METRICS + DCGM_METRICS)), at=now)
    # GPUs seen in the look-back window, so a target that stopped answering still lists its GPUs.
    known = client.query(f"last_over_time(gpudoctor_gpu_info{selector}[{lookback}])", at=now)
    known_dcgm = client.query(f"last_over_time(DCGM_FI_DEV_GPU_TEMP{selector}[{lookback}])", at=now)
    last_sample = client.query(f"last_over_time(gpudoctor_sample_timestamp_seconds{selector}[{lookback}])", at=now)
    targets = {s.labels.get("instance", ""): int(s.value) for s in up}
    by_metric: dict[str, list[Series]] = {}
    for s in current:
        by_metric.setdefault(s.labels.get("__name__", ""), []).append(s)

    rows: dict[tuple[str, str], FleetRow] = {}

    def row_for(labels: dict[str, str], source: str) -> FleetRow:
        key = _key(labels)
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
    sampled_at = {s.labels.get("instance", ""): s.value for s in last_sample}
    gone = _not_exported(rows, by_metric, targets)
    if gone:  # two more queries, only for the nodes concerned (a healthy fleet costs none)
        nodes = Matcher("instance", "=~", "|".join(sorted({re.escape(key[0]) for key in gone})))
        # The last value of every kept series (last_over_time keeps the metric name), and when each
        # GPU was last exported (the scrape time of its info series).
        last_known = client.query(f"last_over_time({_selector([*matchers, nodes], _names_regex(LAST_KNOWN_METRICS))}"
                                  f"[{lookback}])", at=now)
        last_seen = client.query(f"last_over_time(timestamp(gpudoctor_gpu_info{_selector([*matchers, nodes])})"
                                 f"[{lookback}:])", at=now)
        _ages(rows, gone, targets, sampled_at, {_key(s.labels): s.value for s in last_seen}, now)
        _keep_last_known(by_metric, last_known, gone, targets)
    _judge_gpudoctor(rows, by_metric, now, stale_after_s, report_max_age_s)
    _judge_dcgm(rows, by_metric)
    _judge_busy(rows)
    _mark_last_known(rows, gone)
    _judge_targets(rows, targets, sampled_at, now)
    if not rows:
        raise FleetError("empty", f"Prometheus at {client.url} holds no GPU series"
                                  f"{' for ' + selector if matchers else ''} (neither gpudoctor's exporter "
                                  "nor dcgm-exporter in the last " + lookback + ")")
    for row in rows.values():
        row.settle()
    ordered = sorted(rows.values(), key=lambda r: (STATUS_ORDER[r.status], *_not_working_first(r), r.instance,
                                                   _gpu_sort(r.gpu)))
    return FleetView(client.url, selector, now, ordered, targets, client.queries)


def _not_exported(rows: dict[tuple[str, str], FleetRow], by_metric: dict[str, list[Series]],
                  targets: dict[str, int]) -> dict[tuple[str, str], float | None]:
    """The GPUs Prometheus no longer gets: those of a target that stopped answering (``up == 0``),
    and those of a live gpudoctor exporter missing from its latest scrape (seen in the look-back
    window, no series of them now: they vanished). Their ages are filled in by :func:`_ages`."""
    exported = {_key(s.labels) for series in by_metric.values() for s in series}
    return {key: None for key, row in rows.items()
            if targets.get(row.instance, 1) == 0 or (row.source == "gpudoctor" and key not in exported)}


def _ages(rows: dict[tuple[str, str], FleetRow], gone: dict[tuple[str, str], float | None], targets: dict[str, int],
          sampled_at: dict[str, float], seen_at: dict[tuple[str, str], float], now: float) -> None:
    """How old the last readings of each GPU no longer exported are: a silent target's last sample,
    a vanished GPU's last scrape; a vanished GPU is a warning, with that age."""
    for key in gone:
        row = rows[key]
        since = sampled_at.get(row.instance) if targets.get(row.instance, 1) == 0 else seen_at.get(key)
        age = gone[key] = now - since if since else None
        if targets.get(row.instance, 1) != 0:
            row.add("warn", "GPU no longer exported" + (f" (last seen {fmt_age(age)} ago)" if age is not None else "")
                    + ": it fell off the bus, was reset or removed, or the exporter lost it; check `nvidia-smi` "
                      "and the kernel log on the node")


def _keep_last_known(by_metric: dict[str, list[Series]], last_known: list[Series],
                     gone: dict[tuple[str, str], float | None], targets: dict[str, int]) -> None:
    """Add the last known series of GPUs no longer exported (and the node-wide ones of silent
    targets: the report verdict) where the latest scrape has none, so they are judged as before."""
    present = {(name, _key(s.labels)) for name, series in by_metric.items() for s in series}
    for s in last_known:
        name, key = s.labels.get("__name__", ""), _key(s.labels)
        if not name or (name, key) in present:
            continue  # a Prometheus that dropped the name: nothing to file it under
        if key in gone or (key[1] == "" and targets.get(key[0], 1) == 0):
            by_metric.setdefault(name, []).append(s)


def _mark_last_known(rows: dict[tuple[str, str], FleetRow], gone: dict[tuple[str, str], float | None]) -> None:
    """Say of each finding of a GPU no longer exported that it is the last known state, with its age.
    A critical last-known Xid keeps the row failing: the node has probably died of it."""
    for key, age in gone.items():
        row = rows[key]
        row.last_known, row.last_known_age_s = True, age
        words = "last known" + (f" ({fmt_age(age)} ago)" if age is not None else "")
        row.findings = [(status, text if text.startswith("GPU no longer exported") else f"{words}: {text}")
                        for status, text in row.findings]


def _gpu_sort(gpu: str) -> tuple[int, str]:
    return (int(gpu), "") if gpu.isdigit() else (1 << 30, gpu)


def _values(by_metric: dict[str, list[Series]], name: str) -> dict[tuple[str, str], list[Series]]:
    out: dict[tuple[str, str], list[Series]] = {}
    for s in by_metric.get(name, []):
        out.setdefault(_key(s.labels), []).append(s)
    return out


def _one(by_metric: dict[str, list[Series]], name: str) -> dict[tuple[str, str], float]:
    return {key: series[0].value for key, series in _values(by_metric, name).items()}


def _per_instance(by_metric: dict[str, list[Series]], name: str) -> dict[str, list[Series]]:
    out: dict[str, list[Series]] = {}
    for s in by_metric.get(name, []):
        out.setdefault(s.labels.get("instance", ""), []).append(s)
    return out




def _judge_gpudoctor(rows: dict[tuple[str, str], FleetRow], m: dict[str, list[Series]], now: float,
                     stale_after_s: float, report_max_age_s: float) -> None:
    simple = {r.fleet: _one(m, r.prometheus) for r in catalogue.fleet_readings()}
    for attr, values in simple.items():
        for key, value in values.items():
            if key in rows:
                setattr(rows[key], attr, value)
    errors = {key: [s.labels.get("reason", "") for s in series]
              for key, series in _values(m, "gpudoctor_gpu_error_info").items()}
    for key, value in _one(m, "gpudoctor_gpu_up").items():
        if key in rows and value == 0:
            reason = ", ".join(r for r in errors.get(key, []) if r) or "no reading"
            rows[key].add("fail", f"GPU not answering NVML ({reason}): check `nvidia-smi` and the kernel log "
                                  "on the node; a lost GPU needs a reset or a reboot")
    uncorrected = {key: sum(s.value for s in series if s.labels.get("error_type") == "uncorrected"
                            and s.labels.get("counter") == "volatile")
                   for key, series in _values(m, "gpudoctor_gpu_ecc_errors_total").items()}
    pending = dict(_one(m, "gpudoctor_gpu_remapped_rows_pending"))
    for key, value in _one(m, "gpudoctor_gpu_retired_pages_pending").items():
        pending[key] = max(value, pending.get(key, 0.0))
    _judge_memory(rows, uncorrected, _one(m, "gpudoctor_gpu_remapped_rows_failure"), pending)
    for key, series in _values(m, "gpudoctor_gpu_throttled").items():
        if key not in rows:
            continue
        _judge_clocks(rows[key], [s.labels["reason"] for s in series if s.value >= 1])
    counts = _one(m, "gpudoctor_gpu_xid_errors_total")
    for key, logged in _one(m, "gpudoctor_gpu_kernel_log_xids").items():
        counts[key] = counts.get(key, 0.0) + logged  # seen while watching + logged before it began
    times = {k: v for k, v in _one(m, "gpudoctor_gpu_last_xid_timestamp_seconds").items() if v > 0}
    for key, value in _one(m, "gpudoctor_gpu_last_xid").items():
        if key in rows:
            _add_xid(rows[key], int(value), counts.get(key), times.get(key), now)
    for key, value in counts.items():
        if key in rows:
            rows[key].xid_count = int(value)
    _judge_instances(rows, m, now, stale_after_s, report_max_age_s)


def _busy_verdict(row: FleetRow) -> busy.Verdict | None:
    """The verdict of gpudoctor.backends.busy over a row's ratios (None without SM activity:
    fleet does not repeat "cannot tell" on every pre-Hopper row)."""
    if row.sm_active is None or row.utilization is None:
        return None
    pct = {"gpu_util_pct": row.utilization * 100, "sm_active_pct": row.sm_active * 100}
    if row.tensor_active is not None:
        pct["tensor_active_pct"] = row.tensor_active * 100
    return busy.verdict(pct)


def _judge_busy(rows: dict[tuple[str, str], FleetRow]) -> None:
    """Busy but not working (utilisation high, SM activity low): a warning, in the verdict's words."""
    for row in rows.values():
        verdict = _busy_verdict(row)
        if verdict is not None and verdict.code == "busy_small_kernels":
            row.add("warn", verdict.text())


def _not_working_first(row: FleetRow) -> tuple[int, float]:
    """Within a status, "busy but not working" GPUs first, the least SM activity first."""
    verdict = _busy_verdict(row)
    if verdict is not None and verdict.code == "busy_small_kernels" and row.sm_active is not None:
        return (0, row.sm_active)
    return (1, 0.0)


def _judge_memory(rows: dict[tuple[str, str], FleetRow], uncorrected: dict[tuple[str, str], float],
                  remap_failed: dict[tuple[str, str], float], reset_pending: dict[tuple[str, str], float]) -> None:
    """Device memory faults, the same facts whichever exporter sent them."""
    for key, value in uncorrected.items():
        if key in rows and value > 0:
            rows[key].add("fail", f"{value:.0f} uncorrectable ECC error(s) since the driver loaded: "
                                  "drain the node and reset the GPU")
    for key, value in remap_failed.items():
        if key in rows and value >= 1:
            rows[key].add("fail", "row remapping failed: the GPU needs replacing")
    for key, value in reset_pending.items():
        if key in rows and value >= 1:
            rows[key].add("warn", "a GPU reset is pending to take faulty memory out of use")


def _judge_instances(rows: dict[tuple[str, str], FleetRow], m: dict[str, list[Series]], now: float,
                     stale_after_s: float, report_max_age_s: float) -> None:
    by_instance: dict[str, list[FleetRow]] = {}
    for row in rows.values():
        by_instance.setdefault(row.instance, []).append(row)
    nvml_errors = {i: [s.labels.get("reason", "") for s in ss]
                   for i, ss in _per_instance(m, "gpudoctor_nvml_error_info").items()}
    for instance, series in _per_instance(m, "gpudoctor_nvml_up").items():
        if series[0].value >= 1:
            continue
        reasons = [r for r in nvml_errors.get(instance, []) if r]
        for row in by_instance.get(instance, []):
            if "SampleStale" in reasons:
                row.add("stale", "the exporter's sampler is stuck inside an NVML call (readings are old)")
            else:
                row.add("fail", f"NVML is down on the node ({', '.join(reasons) or 'no reason given'})")
    for instance, series in _per_instance(m, "gpudoctor_sample_age_seconds").items():
        if series[0].value > stale_after_s:
            for row in by_instance.get(instance, []):
                row.add("stale", f"readings {fmt_age(series[0].value)} old")
    stamps = {i: ss[0].value for i, ss in _per_instance(m, "gpudoctor_report_timestamp_seconds").items()}
    for instance, series in _per_instance(m, "gpudoctor_report_status").items():
        current = next((s.labels.get("status") for s in series if s.value >= 1), None)
        age = now - stamps[instance] if instance in stamps else None
        for row in by_instance.get(instance, []):
            row.report_status, row.report_age_s = current, age
            if current == "fail":
                row.add("fail", "the node's last report failed: run `gpudoctor report` there")
            elif current in ("warn", "error"):
                row.add("warn", f"the node's last report: {current}")
            if age is not None and age > report_max_age_s:
                row.add("warn", f"the node's last report is {fmt_age(age)} old")


def _add_xid(row: FleetRow, code: int, count: float | None, when: float | None, now: float) -> None:
    if code <= 0:
        return
    row.xid_last = code
    row.xid_last_time = when
    entry = xid.explain(code)
    row.xid_last_words = entry.words
    ago = f", {fmt_age(now - when)} ago" if when else ""
    severity = "fail" if entry.severity == "critical" else "warn"
    row.add(severity, f"Xid {code}{ago}: {entry.words}; {entry.action}")
    if count is not None:
        row.xid_count = int(count)


def _judge_xid_window(row: FleetRow, series: list[Series]) -> None:
    """Every Xid code counted in dcgm-exporter's window, each judged; the worst is the row's last Xid."""
    counts: dict[int, int] = {}
    window = ""
    for s in series:
        code = s.labels.get("xid", "")
        if not (code.isascii() and code.isdigit() and 0 < len(code) <= 4) or not s.value > 0:
            continue
        counts[int(code)] = counts.get(int(code), 0) + int(min(s.value, 1e9))
        ms = s.labels.get("window_size_in_ms", "")
        if ms.isascii() and ms.isdigit() and 0 < len(ms) <= 10:
            window = f" in the last {fmt_age(int(ms) / 1000)}"
    if not counts:
        return
    ranked = sorted(counts, key=lambda c: (xid.explain(c).severity == "critical", c))
    for code in ranked:
        entry = xid.explain(code)
        row.add("fail" if entry.severity == "critical" else "warn",
                f"Xid {code} ({counts[code]} time(s){window}): {entry.words}; {entry.action}")
    row.xid_last, row.xid_last_words = ranked[-1], xid.explain(ranked[-1]).words
    row.xid_count = sum(counts.values())


def _judge_dcgm(rows: dict[tuple[str, str], FleetRow], m: dict[str, list[Series]]) -> None:
    for attr, name, scale in ((r.fleet, r.dcgm, r.dcgm_scale) for r in catalogue.fleet_readings()
                              if r.dcgm_scale is not None):
        for key, value in _one(m, name).items():
            if key in rows and getattr(rows[key], attr) is None:
                setattr(rows[key], attr, value * scale)
    free = _one(m, "DCGM_FI_DEV_FB_FREE")
    for key, used in _one(m, "DCGM_FI_DEV_FB_USED").items():
        if key in rows and key in free and rows[key].memory_total_bytes is None:
            rows[key].memory_total_bytes = (used + free[key]) * 2 ** 20
    # dcgm-exporter's windowed count (--xid-count-window-size): one series per GPU and Xid code seen
    # in the window. Where a node exports it, it is judged instead of the last-Xid gauge, which
    # keeps its last value for ever and shows only the newest code (a critical Xid followed by a
    # harmless one disappeared behind it).
    windowed = _values(m, "DCGM_EXP_XID_ERRORS_COUNT")
    for key, series in windowed.items():
        if key in rows:
            _judge_xid_window(rows[key], series)
    counted = {instance for instance, _gpu in windowed}
    for key, value in _one(m, "DCGM_FI_DEV_XID_ERRORS").items():
        if key in rows and rows[key].xid_last is None and key[0] not in counted:
            _add_xid(rows[key], int(value), None, None, 0.0)
    _judge_memory(rows, _one(m, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), _one(m, "DCGM_FI_DEV_ROW_REMAP_FAILURE"),
                  _one(m, "DCGM_FI_DEV_ROW_REMAP_PENDING"))
    masks = dict(_one(m, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"))
    masks.update(_one(m, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"))
    for key, value in masks.items():
        if key in rows and rows[key].source == "dcgm-exporter":
            _judge_clocks(rows[key], [code for bit, (code, _words) in THROTTLE_REASONS.items() if int(value) & bit])


def _judge_clocks(row: "FleetRow", reasons: Iterable[str]) -> None:
    """Clocks held down by heat or by the hardware: a warning, naming the power cap too when it is
    also active. The power cap alone is the normal state of a fully loaded board (as the health
    probe judges it), so it is no warning by itself."""
    active = {code for code in reasons if code in GPUDOCTOR_THROTTLE_WORDS}
    if active - {"sw_power_cap"}:
        row.add("warn", "clocks held down: " + ", ".join(sorted(GPUDOCTOR_THROTTLE_WORDS[c] for c in active)))


def _judge_targets(rows: dict[tuple[str, str], FleetRow], targets: dict[str, int],
                   sampled_at: dict[str, float], now: float) -> None:
    for row in rows.values():
        if targets.get(row.instance, 1) == 0:
            since = sampled_at.get(row.instance)
            when = f" (last reading {fmt_age(now - since)} ago)" if since else ""
            row.add("stale", f"target not answering Prometheus{when}: is the exporter running on the node?")
    covered = {row.instance for row in rows.values()}
    for instance, value in targets.items():
        if value == 0 and instance not in covered:
            row = rows[(instance, "")] = FleetRow(instance=instance, gpu="", source="")
            row.add("stale", "target not answering Prometheus, and no GPU of it seen in the look-back window")


# --------------------------------------------------------------------------- output
def exit_code(view: FleetView, fail_on: str = "warn") -> int:
    from gpudoctor import exitcodes

    counts = view.counts()
    if counts["fail"]:
        return exitcodes.FAIL
    if counts["stale"]:
        return exitcodes.PROBE_ERROR
    if counts["warn"] and fail_on == "warn":
        return exitcodes.WARN
    return exitcodes.OK


def error_exit_code(error: FleetError) -> int:
    from gpudoctor import exitcodes

    return {"usage": exitcodes.USAGE, "query": exitcodes.USAGE, "empty": exitcodes.NO_GPU}.get(
        error.kind, exitcodes.UNREACHABLE)


def fmt_number(value: float | None, scale: float, unit: str, digits: int = 0) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value * scale:.{digits}f}{unit}"


def fmt_mem(row: FleetRow) -> str:
    if row.memory_used_bytes is None:
        return "-"
    used = row.memory_used_bytes / 2 ** 30
    if row.memory_total_bytes:
        return f"{used:.0f}/{row.memory_total_bytes / 2 ** 30:.0f}G"
    return f"{used:.0f}G"


def render_text(view: FleetView, width: int = 120) -> str:
    counts = view.counts()
    nodes = len({row.instance for row in view.rows})
    lines = [f"fleet: {len(view.rows)} GPU row(s) on {nodes} node(s) from {view.prometheus}"
             + (f" {view.selector}" if view.selector != "{}" else "")
             + " · " + ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER)]
    header = f"{'STATUS':<6} {'INSTANCE':<24} {'GPU':>3} {'UTIL':>5} {'MEM':>9} {'TEMP':>5} {'POWER':>6} " \
             f"{'XID':>4} {'REPORT':<11} REASON"
    lines.append(header)
    fixed = len(header) - len("REASON")
    for row in view.rows:
        report = "-" if row.report_status is None else row.report_status
        if row.report_age_s is not None and row.report_status is not None:
            report += f" {fmt_age(row.report_age_s).replace(' ', '')}"
        instance = row.instance if len(row.instance) <= 24 else row.instance[:23] + "…"
        xid_text = "-" if row.xid_last is None else str(row.xid_last)
        line = (f"{row.status.upper():<6} {instance:<24} {row.gpu or '-':>3} {fmt_number(row.utilization, 100, '%'):>5} "
                f"{fmt_mem(row):>9} {fmt_number(row.temperature_c, 1, 'C'):>5} {fmt_number(row.power_w, 1, 'W'):>6} "
                f"{xid_text:>4} {report:<11} ")
        lines.extend(_wrap_reason(line, row.reason, fixed, width))
    return "\n".join(lines) + "\n"


def _wrap_reason(prefix: str, reason: str, indent: int, width: int) -> list[str]:
    import textwrap

    room = max(30, width - indent)
    parts = textwrap.wrap(reason, room) or [""]
    return [prefix + parts[0]] + [" " * indent + part for part in parts[1:]]
