"""A real Prometheus server scrapes the exporter on loopback; we read a metric back
through Prometheus' HTTP API (/api/v1/query).

Needs the ``prometheus`` binary (Debian: ``apt-get install -y --no-install-recommends
prometheus``); skips with that reason when it is absent. Only loopback addresses; every
wait is bounded.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from support.prom_support import PROMETHEUS, free_port, needs_prometheus, query, stop

ROOT = Path(__file__).resolve().parents[2]
GPU_LOST = ROOT / "tests" / "data" / "exporter_gpu_lost_handmade.json"
pytestmark = needs_prometheus


def test_prometheus_scrapes_the_exporter(tmp_path):
    exporter = subprocess.Popen(
        [sys.executable, "-m", "gpudoctor", "exporter", "--host", "127.0.0.1", "--port", "0",
         "--replay", str(GPU_LOST), "--interval", "0.5", "--report-interval", "0", "--exit-after", "90"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    prometheus = None
    log = None
    try:
        line = exporter.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert match, f"exporter did not start: {line}"
        exporter_port = int(match.group(1))
        prom_port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n"
            "  - job_name: gpudoctor\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n")
        log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 (closed below)
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--storage.tsdb.retention.time=1h"],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        deadline = time.monotonic() + 120  # Prometheus starting and scraping on a busy machine
        temperature = up = lost = None
        while time.monotonic() < deadline and prometheus.poll() is None:
            try:
                up = query(prom_port, 'up{job="gpudoctor"}')
                temperature = query(prom_port, 'gpudoctor_gpu_temperature_celsius{gpu="0"}')
                lost = query(prom_port, 'gpudoctor_gpu_up{gpu="1"}')
            except OSError:  # not listening yet
                pass
            if up and temperature and lost and lost[0]["value"][1] == "0":
                break
            time.sleep(0.5)
        assert prometheus.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
        assert up and up[0]["value"][1] == "1", f"Prometheus never scraped the exporter: {up}"
        assert temperature, "gpudoctor_gpu_temperature_celsius never reached Prometheus"
        # the recording's GPU 0 reads 64 C, then 65 C (held: the replay does not loop)
        assert float(temperature[0]["value"][1]) in (64.0, 65.0)
        assert temperature[0]["metric"]["pci_bus_id"] == "0000:07:00.0"
        assert lost and lost[0]["value"][1] == "0", f"GPU 1 (lost in the recording) not down: {lost}"
        nvml = query(prom_port, "gpudoctor_nvml_up")
        assert nvml[0]["value"][1] == "1"
    finally:
        for proc in (prometheus, exporter):
            stop(proc)
        if log is not None:
            log.close()
        if exporter.stderr is not None:
            exporter.stderr.close()
