"""Anonymisation (``--anonymize``): strip GPU UUIDs, serial numbers and host names from
plain JSON data (a report's ``to_dict()``, a recording) before it leaves the machine.

Standard library only: the report renderers and the recorder both use it. Which keys hold a
GPU's identifiers is the reading catalogue's to say (``StaticFact.identifying``), and core imports
no other layer: the callers pass them (``backends.catalogue.identifying_keys()``); the host's own
keys are :data:`HOST_KEYS`, here.
"""

from __future__ import annotations

import os
import re
from typing import Any, Collection


def _hostname() -> str:
    """socket.gethostname() without importing socket (its import costs `report --quick` a millisecond)."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket

    return socket.gethostname()


def anonymize_report_dict(data: dict[str, Any], identifying: Collection[str]) -> dict[str, Any]:
    """:func:`anonymize_dict`, also stripping every other host a result names
    (``details.hosts``: the ranks of a distributed check on other nodes)."""
    data = anonymize_dict(data, identifying)
    for result in data.get("results", []):
        for host in list((result.get("details") or {}).get("hosts") or []):
            if isinstance(host, str) and host not in ("", "?", REDACTED):
                data = anonymize_dict(data, identifying, hostname=host)
    return data


# --------------------------------------------------------------------------- anonymize
# A GPU or MIG UUID, whole or any prefix of it: CUDA_VISIBLE_DEVICES accepts a unique prefix
# ("GPU-0f0e0d0c-0b0a"), and a prefix identifies the board as well as the whole UUID does.
# Any case: the text came from a user's environment as often as from NVML.
_UUID_RE = re.compile(r"\b(GPU|MIG)-[0-9a-f]+(-[0-9a-f]+)*\b", re.IGNORECASE)
# The same UUID without its prefix (nvidia-container-toolkit and some schedulers write it so).
_BARE_UUID_RE = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
#: The keys whose values name this host or its people, not a GPU (host facts, which the reading
#: catalogue does not hold): the host's name, and ``user``, the account of a process in a recording,
#: as a home directory names it. A GPU's identifying keys (uuid, serial...) are the catalogue's.
HOST_KEYS = frozenset({"hostname", "host_name", "user"})
# Variables whose entries name devices: every entry that is not a plain index is an identifier,
# whatever its spelling, and is struck out wherever it appears.
_DEVICE_LIST_VARS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                     "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
REDACTED = "<redacted>"


def anonymize_dict(data: object, identifying: Collection[str], hostname: str | None = None) -> Any:
    """Strip GPU UUIDs, serial numbers and the host name, wherever they appear: values, keys,
    lists and free text (findings, notes), and every device named in a *_VISIBLE_DEVICES
    variable (of this process or recorded in ``data``). ``identifying``: the keys whose values
    identify a device (the catalogue's, ``backends.catalogue.identifying_keys()``); the value under
    such a key, or under one of :data:`HOST_KEYS`, is struck out whole, and so is a named value's
    (``{"name": "uuid", "value": ...}``, a report's measurement)."""
    if hostname is None:
        found = _find_key(data, "hostname")
        hostname = found if isinstance(found, str) and found else _hostname()
    return _Anonymizer(hostname, _device_names(data), _home_patterns(), HOST_KEYS | frozenset(identifying))(data)


def _find_key(data: object, key: str) -> Any:
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


def _device_names(data: object) -> list[str]:
    """The non-index entries of every device-list variable: this process's environment and
    each place ``data`` records one (``{"VAR": value}``, ``{"name": "VAR", "value": value}``)."""
    values = [os.environ.get(name) for name in _DEVICE_LIST_VARS]
    wanted = {name.lower() for name in _DEVICE_LIST_VARS}
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if isinstance(key, str) and key.lower() in wanted:
                    values.append(value)
                stack.append(value)
            name = item.get("name")
            if isinstance(name, str) and name.lower() in wanted:
                values.append(item.get("value"))
        elif isinstance(item, list):
            stack.extend(item)
    names = set()
    for value in values:
        if isinstance(value, str):
            for entry in value.split(","):
                entry = entry.strip().strip("'\"")
                if len(entry) >= 3 and not entry.isdigit() and entry.lower() not in ("all", "none", "void"):
                    names.add(entry)
    return sorted(names, key=len, reverse=True)  # longest first: a prefix never splits a whole name


def _unknown(value: object) -> bool:
    """Nothing to strip: no value, or a recording's "not available" (``{"__na__": reason}``, which
    says why NVML gave none: a fabric's NotSupported must stay that, not read as a redacted UUID)."""
    return value in (None, "") or (isinstance(value, dict) and list(value) == ["__na__"])


class _Anonymizer:
    def __init__(self, hostname: str, device_names: list[str], homes: list[re.Pattern[str]] | None = None,
                 secret_keys: frozenset[str] = frozenset()) -> None:
        self.hostname = hostname
        self.homes = homes or []
        self.secret_keys = secret_keys
        self.devices = re.compile("|".join(re.escape(n) for n in device_names), re.IGNORECASE) \
            if device_names else None

    def __call__(self, data: object) -> Any:
        if isinstance(data, dict):
            out: dict[Any, Any] = {}
            name = data.get("name")
            named = isinstance(name, str) and name in self.secret_keys  # a measurement {"name": "uuid", "value": ...}
            for key, value in data.items():
                clean = self.text(key) if isinstance(key, str) else key
                while clean in out:  # two keys that differed only in an identifier
                    clean = f"{clean}'"
                secret = key in self.secret_keys or (named and key == "value")
                out[clean] = REDACTED if secret and not _unknown(value) else self(value)
            return out
        if isinstance(data, (list, tuple)):
            return [self(v) for v in data]
        if isinstance(data, str):
            return self.text(data)
        return data

    def text(self, text: str) -> str:
        if self.devices is not None:
            text = self.devices.sub(REDACTED, text)
        text = _BARE_UUID_RE.sub(REDACTED, _UUID_RE.sub(REDACTED, text))
        hostname = self.hostname
        if hostname and len(hostname) >= 3:
            text = text.replace(hostname, REDACTED)
        elif hostname:
            # A short name ("n1", "g7") is replaced only as a whole token, not inside words.
            text = re.sub(rf"(?<![\w.-]){re.escape(hostname)}(?![\w-])", REDACTED, text)
        for pattern in self.homes:
            text = pattern.sub(HOME, text)
        return text


# --------------------------------------------------------------------------- home directories
#: What a home directory becomes: a path such as /home/alice/.venv/bin/python names the user.
HOME = "<home>"
# Where a path component ends, and what may not come just before a path's start (a home path
# inside a longer path, /data/home/x, is not a home directory).
_PATH_END = r"(?=[/\\\s\"'`:;,()<>|=]|$)"
_PATH_START = r"(?<![\w.~/\\-])"
_NAME = r"[^/\\\s\"'`:;,()<>|=]+"
_HOME_RE = re.compile(_PATH_START + rf"(?:/home/{_NAME}|/Users/{_NAME}|/root|[A-Za-z]:\\Users\\{_NAME})" + _PATH_END)


def _home_patterns(home: str | None = None) -> list[re.Pattern[str]]:
    """The home-directory patterns: the usual places, and this user's ``$HOME`` wherever it is."""
    home = os.path.expanduser("~") if home is None else home
    patterns = [_HOME_RE]
    if home and home.rstrip("/\\") and not _HOME_RE.fullmatch(home.rstrip("/\\")):
        patterns.append(re.compile(_PATH_START + re.escape(home.rstrip("/\\")) + _PATH_END))
    return patterns


def strip_home_paths(data: object, home: str | None = None) -> Any:
    """Every home directory at the start of a path (``/home/NAME``, ``/Users/NAME``, ``/root``,
    ``C:\\Users\\NAME``, and this user's ``$HOME`` wherever it is) replaced by :data:`HOME`, in
    every string of plain JSON data (keys too); :func:`anonymize_dict` does this as it goes."""
    return _Anonymizer("", [], _home_patterns(home), secret_keys=frozenset())(data)


__all__ = ["HOME", "HOST_KEYS", "REDACTED", "anonymize_dict", "anonymize_report_dict", "strip_home_paths"]
