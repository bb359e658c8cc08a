"""Anonymisation (``--anonymize``): strip GPU UUIDs, serial numbers and host names from
plain JSON data (a report's ``to_dict()``, a recording) before it leaves the machine.

Standard library only: the report renderers and the recorder both use it.
"""

from __future__ import annotations

import os
import re
import socket
from typing import Any


def anonymize_report_dict(data: dict[str, Any]) -> dict[str, Any]:
    """:func:`anonymize_dict`, also stripping every other host a result names
    (``details.hosts``: the ranks of a distributed check on other nodes)."""
    data = anonymize_dict(data)
    for result in data.get("results", []):
        for host in list((result.get("details") or {}).get("hosts") or []):
            if isinstance(host, str) and host not in ("", "?", REDACTED):
                data = anonymize_dict(data, hostname=host)
    return data


# --------------------------------------------------------------------------- anonymize
# A GPU or MIG UUID, whole or any prefix of it: CUDA_VISIBLE_DEVICES accepts a unique prefix
# ("GPU-0f0e0d0c-0b0a"), and a prefix identifies the board as well as the whole UUID does.
_UUID_RE = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]+(-[0-9a-fA-F]+)*\b")
_SECRET_KEYS = {"uuid", "serial", "hostname", "host_name", "board_serial"}
REDACTED = "<redacted>"


def anonymize_dict(data: Any, hostname: str | None = None) -> Any:
    """Strip GPU UUIDs, serial numbers and the host name, wherever they appear."""
    if hostname is None:
        found = _find_key(data, "hostname")
        hostname = found if isinstance(found, str) and found else socket.gethostname()
    return strip_home_paths(_anonymize(data, hostname))


def _find_key(data: Any, key: str) -> Any:
    if isinstance(data, dict):
        if key in data:
            return data[key]
        for v in data.values():
            found = _find_key(v, key)
            if found is not None:
                return found
    elif isinstance(data, list):
        for v in data:
            found = _find_key(v, key)
            if found is not None:
                return found
    return None


def _anonymize(data: Any, hostname: str) -> Any:
    if isinstance(data, dict):
        return {k: (REDACTED if k in _SECRET_KEYS and data[k] not in (None, "") else _anonymize(v, hostname))
                for k, v in data.items()}
    if isinstance(data, list):
        return [_anonymize(v, hostname) for v in data]
    if isinstance(data, str):
        text = _UUID_RE.sub(REDACTED, data)
        if hostname and len(hostname) >= 3:
            text = text.replace(hostname, REDACTED)
        elif hostname:
            # A short name ("n1", "g7") is replaced only as a whole token, not inside words.
            text = re.sub(rf"(?<![\w.-]){re.escape(hostname)}(?![\w-])", REDACTED, text)
        return text
    return data


# --------------------------------------------------------------------------- home directories
#: What a home directory becomes: a path such as /home/alice/.venv/bin/python names the user.
HOME = "<home>"
# Where a path component ends, and what may not come just before a path's start (a home path
# inside a longer path, /data/home/x, is not a home directory).
_PATH_END = r"(?=[/\\\s\"'`:;,()<>|=]|$)"
_PATH_START = r"(?<![\w.~/\\-])"
_NAME = r"[^/\\\s\"'`:;,()<>|=]+"
_HOME_RE = re.compile(_PATH_START + rf"(?:/home/{_NAME}|/Users/{_NAME}|/root|[A-Za-z]:\\Users\\{_NAME})" + _PATH_END)


def strip_home_paths(data: Any, home: str | None = None) -> Any:
    """Every home directory at the start of a path (``/home/NAME``, ``/Users/NAME``, ``/root``,
    ``C:\\Users\\NAME``, and this user's ``$HOME`` wherever it is) replaced by :data:`HOME`, in
    every string of plain JSON data."""
    home = os.path.expanduser("~") if home is None else home
    patterns = [_HOME_RE]
    if home and home.rstrip("/\\") and not _HOME_RE.fullmatch(home.rstrip("/\\")):
        patterns.append(re.compile(_PATH_START + re.escape(home.rstrip("/\\")) + _PATH_END))

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, str):
            for pattern in patterns:
                value = pattern.sub(HOME, value)
        return value

    return strip(data)


__all__ = ["HOME", "REDACTED", "anonymize_dict", "anonymize_report_dict", "strip_home_paths"]
