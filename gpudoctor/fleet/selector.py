"""fleet's input: the user's ``--match`` label matchers, the Prometheus URL, and the PromQL selectors."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Iterable, Sequence

from gpudoctor.core._text import plain_text

from .rows import FleetError

_MATCH = re.compile(r"^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$", re.S)


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


def selector(matchers: Sequence[Matcher], extra: str = "") -> str:
    parts = [m.promql() for m in matchers]
    if extra:
        parts.insert(0, extra)
    return "{" + ",".join(parts) + "}"


def names_regex(names: Iterable[str]) -> str:
    return '__name__=~"' + "|".join(names) + '"'
