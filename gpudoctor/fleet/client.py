"""fleet's Prometheus client: instant queries over ``/api/v1/query`` with bounded answers, a
deadline for all of them together, and one-line errors; and the one reader of its answers.

Whatever the server (or whatever answers at its address) sends, the rest of fleet sees only
:class:`~gpudoctor.fleet.rows.Series` with sanitised text labels and a finite value, or a
:class:`~gpudoctor.fleet.rows.FleetError`.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Sequence

from gpudoctor.core._text import plain_text

from .rows import DEFAULT_TIMEOUT_S, FleetError, Series
from .selector import check_url

MAX_SERIES = 200_000  # an answer larger than this is refused rather than held in memory
# One answer's bytes: a series is about 200 bytes of JSON, so 32 MiB holds some 160,000 series
# (thousands of GPUs; fleets beyond that are read in parts with --match). Parsed JSON takes about
# 25 times its size: this keeps one answer under 1 GiB (256 MiB allowed answers of 6 GiB).
MAX_ANSWER_BYTES = 32 * 1024 * 1024
LABEL_MAX = 128


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
        return self._parse(self._answer(expr, at))

    def query_history(self, expr: str, at: float | None = None) -> list[History]:
        """A range selector's samples (``expr`` ends with ``[1h]``): Prometheus's range vector, each
        series its labels and its finite ``(time, value)`` samples, oldest first."""
        return parse_history(self._answer(expr, at), self.url)

    def _answer(self, expr: str, at: float | None) -> bytes:
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
        return body

    def _fetch_by_deadline(self, request: urllib.request.Request) -> bytes:
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
# A sample that is not a finite number (NaN, +Inf: Prometheus's answer to 0/0 or an overflow) is
# NA: left out, its reason kept in Prometheus.unreadable. A series that lacks a label its metric
# is judged by is left out the same way.
ANSWER_MAX_DEPTH = 16  # an instant vector nests 5 levels deep
REQUIRED_LABELS = {"gpudoctor_gpu_throttled": ("reason",), "DCGM_EXP_CLOCK_EVENTS_COUNT": ("clock_event",)}
MAX_UNREADABLE = 20  # reasons kept per answer


def _decode(body: bytes) -> Any:
    from gpudoctor.system.safejson import JsonFileError, parse_bounded

    try:
        return parse_bounded(body, max_depth=ANSWER_MAX_DEPTH, max_containers=4 * MAX_SERIES + 16)
    except JsonFileError:
        raise ValueError("not Prometheus's JSON") from None


def _label_text(key: str, value: str) -> str:
    text = plain_text(value, limit=LABEL_MAX)
    if key == "gpu" and not text.isascii():  # "²" is a digit to str.isdigit, not to int(): keep it as text
        text = text.encode("ascii", "backslashreplace").decode("ascii")[:LABEL_MAX]
    return text


#: One series of a range vector: its labels and its samples ``[(time, value)]``, oldest first.
History = tuple[dict[str, str], list[tuple[float, float]]]
MAX_HISTORY_SAMPLES = 100_000  # samples kept of one range-vector answer, all series together


def parse_history(body: bytes, url: str = "Prometheus") -> list[History]:
    """The series of one range-vector answer (``resultType`` "matrix"), labels sanitised as
    :func:`parse_answer` does, samples that are not finite numbers left out; else FleetError."""
    try:
        data = _decode(body)
    except ValueError:
        raise FleetError("unreachable", f"{url} answered something that is not JSON") from None
    inner = data.get("data") if isinstance(data, dict) and data.get("status") == "success" else None
    result = inner.get("result") if isinstance(inner, dict) else None
    if not isinstance(result, list):
        raise FleetError("query", f"Prometheus at {url} answered an unexpected shape (no result list)")
    out: list[History] = []
    kept = 0
    for item in result[:MAX_SERIES]:
        metric = item.get("metric") if isinstance(item, dict) else None
        values = item.get("values") if isinstance(item, dict) else None
        if not isinstance(metric, dict) or not isinstance(values, list) or not all(
                isinstance(v, str) for v in metric.values()):
            continue
        samples = []
        for pair in values[:max(0, MAX_HISTORY_SAMPLES - kept)]:
            try:
                when, value = float(pair[0]), float(pair[1]) if len(str(pair[1])) <= 64 else math.nan
            except (TypeError, ValueError, IndexError):
                continue
            if math.isfinite(when) and math.isfinite(value):
                samples.append((when, value))
        kept += len(samples)
        out.append(({plain_text(k, limit=LABEL_MAX): _label_text(k, v) for k, v in metric.items()}, sorted(samples)))
    return out


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

    def leave_out(labels: dict[str, str], why: str) -> None:
        if len(unreadable) < MAX_UNREADABLE:
            name = labels.get("__name__") or "a series"
            where = ", ".join(f"{k}={labels[k]}" for k in ("instance", "gpu") if labels.get(k))
            unreadable.append(f"{name}{f' ({where})' if where else ''}: {why}")

    for item in result:
        metric = item.get("metric") if isinstance(item, dict) else None
        sample = item.get("value") if isinstance(item, dict) else None
        if (not isinstance(metric, dict) or not isinstance(sample, list) or len(sample) != 2
                or not all(isinstance(v, str) for v in metric.values())):
            leave_out({}, "not a series of Prometheus's instant vector")
            continue
        labels = {plain_text(k, limit=LABEL_MAX): _label_text(k, v) for k, v in metric.items()}
        missing = [label for label in REQUIRED_LABELS.get(labels.get("__name__", ""), ()) if label not in labels]
        if missing:
            leave_out(labels, f"no {missing[0]!r} label")
            continue
        raw = sample[1]
        try:
            value = float(raw) if isinstance(raw, str) and len(raw) <= 64 else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            leave_out(labels, f"not a finite number ({plain_text(raw, limit=24)}); NA")
            continue
        series.append(Series(labels, value))
    return series, unreadable


