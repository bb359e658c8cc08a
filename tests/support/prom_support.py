"""Helpers for the tests that run a real Prometheus server on loopback (never another address)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from gpudoctor.system._proc import stop_popen

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
    with urllib.request.urlopen(url, timeout=30) as response:
        data = json.load(response)
    assert data["status"] == "success", data
    return data["data"]["result"]


def parse_samples(text: str) -> dict[tuple[str, tuple], float]:
    """Exposition text parsed the way Prometheus would: {(name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def one_value(samples: dict[tuple[str, tuple], float], name: str, **labels: str) -> float:
    """The value of the one series ``name`` with these labels (it fails unless exactly one matches)."""
    matches = [v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == w for k, w in labels.items())]
    assert len(matches) == 1, f"{name} {labels}: {len(matches)} series"
    return matches[0]


def stop(proc: subprocess.Popen | None) -> None:
    """Terminate a child, then kill it if it does not end within 10 s."""
    stop_popen(proc, grace_s=10.0)


def assert_exporter_report_fails(env: dict[str, str], cwd: Path, extra: tuple[str, ...] = ()) -> None:
    """Start ``gpudoctor exporter`` on a free port with ``env`` (and ``extra`` arguments, e.g.
    ``("--replay", path)``) and wait (60 s at most) until its ``gpudoctor_report_status`` says fail:
    the exporter publishes the report's verdict."""
    proc = subprocess.Popen([sys.executable, "-m", "gpudoctor", "exporter", "--port", "0", "--interval", "0.5",
                             "--exit-after", "90", *extra], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        while url is None:
            line = proc.stderr.readline()
            assert line, f"the exporter ended (exit {proc.poll()}) before serving"
            found = re.search(r"serving (http://\S+/metrics)", line)
            url = found.group(1) if found else None
        deadline, body = time.monotonic() + 60, ""
        while time.monotonic() < deadline and 'gpudoctor_report_status{status="fail"} 1.0' not in body:
            with urllib.request.urlopen(url, timeout=10) as answer:
                body = answer.read().decode()
            time.sleep(0.3)
        assert 'gpudoctor_report_status{status="fail"} 1.0' in body, \
            [line for line in body.splitlines() if "report" in line]
    finally:
        proc.terminate()
        proc.wait(30)
