"""Helpers for the tests that run a real Prometheus server on loopback (never another address)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest

from gpudoctor._proc import stop_popen

PROMETHEUS = shutil.which("prometheus")

needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="the prometheus binary is not installed (Debian/Ubuntu: apt-get install -y --no-install-recommends prometheus)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(port: int, expr: str) -> list[dict]:
    """An instant query through Prometheus's HTTP API; the result list."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        data = json.load(response)
    assert data["status"] == "success", data
    return data["data"]["result"]


def stop(proc: subprocess.Popen | None) -> None:
    """Terminate a child, then kill it if it does not end within 10 s."""
    stop_popen(proc, grace_s=10.0)
