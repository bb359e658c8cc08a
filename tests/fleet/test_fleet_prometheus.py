"""`gpudoctor fleet` against a real Prometheus scraping three exporters on loopback ports:
a healthy node, a node whose GPU was lost, and a node whose GPU logged Xid 79.

Needs the ``prometheus`` binary (Debian: ``apt-get install -y --no-install-recommends
prometheus``; .ci/run installs it); skips with that reason when it is absent. Only loopback;
every wait is bounded.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from gpudoctor.core import exitcodes
from support.prom_support import PROMETHEUS, free_port, needs_prometheus, query, stop

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "tests" / "data" / "handmade_two_gpu_training_standin.json"
GPU_LOST = ROOT / "tests" / "data" / "exporter_gpu_lost_handmade.json"
pytestmark = needs_prometheus


def _xid79_recording(tmp_path: Path) -> Path:
    """The healthy recording, with GPU 1 having reported Xid 79 through NVML (a hand-made fault)."""
    data = json.loads(HEALTHY.read_text())
    data = copy.deepcopy(data)
    data["meta"]["scenario"] = "xid79"
    data["meta"]["note"] = "HAND-MADE fault scenario built by the test: GPU 1 reported Xid 79 (fallen off the bus)."
    data["nvml"]["events"] = [[], [{"time": time.time() - 120, "kind": "xid", "code": 79, "source": "nvml"}]]
    data["nvml"]["kernel_log"] = {"readable": False, "reason": "cannot read /dev/kmsg: Permission denied"}
    path = tmp_path / "handmade_xid79.json"
    path.write_text(json.dumps(data))
    return path


def _exporter(recording: Path) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpudoctor", "exporter", "--host", "127.0.0.1", "--port", "0",
         "--replay", str(recording), "--interval", "0.5", "--report-interval", "0", "--exit-after", "120"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
    assert match, f"exporter did not start: {line}"
    return proc, int(match.group(1))


def _wait(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:  # Prometheus not listening yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _fleet(prom_port: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpudoctor", "fleet", "--prometheus",
                           f"http://127.0.0.1:{prom_port}", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_fleet_lists_three_exporters_worst_first_then_sees_onestop(tmp_path):
    exporters = []
    prometheus = None
    log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 (closed below)
    try:
        ports = {}
        for name, recording in (("healthy", HEALTHY), ("lost", GPU_LOST), ("xid79", _xid79_recording(tmp_path))):
            proc, port = _exporter(recording)
            exporters.append(proc)
            ports[name] = port
        prom_port = free_port()
        targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports.values())
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                          f"scrape_configs:\n  - job_name: gpudoctor\n    static_configs:\n      - targets: [{targets}]\n")
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--storage.tsdb.retention.time=1h"],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        _wait(lambda: len([r for r in query(prom_port, 'up{job="gpudoctor"} == 1')]) == 3
              and len(query(prom_port, "gpudoctor_gpu_info")) >= 5
              and query(prom_port, "gpudoctor_gpu_last_xid"), 60, "three exporters scraped")

        # Prometheus holds every series once each exporter was scraped twice (rates need two
        # points); on a loaded machine that can lag the first scrape: ask until all six GPUs are in.
        deadline = time.monotonic() + 60
        while True:
            proc = _fleet(prom_port, "--json")
            rows = json.loads(proc.stdout)["rows"] if proc.stdout.strip() else []
            if len(rows) >= 6 or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert proc.returncode == exitcodes.FAIL, proc.stderr
        data = json.loads(proc.stdout)
        rows = data["rows"]
        assert len(rows) == 6, rows
        inst = {v: f"127.0.0.1:{p}" for v, p in ports.items()}
        # The Xid node's quick report fails (its events probe fails on a critical Xid, as the TUI,
        # watch and the exporter do): both its GPUs fail, GPU 1 for the Xid itself, GPU 0 for the
        # node's report (an Xid 79 means draining the node). It warned before that fix.
        failed = {(r["instance"], r["gpu"]) for r in rows[:3]}
        assert [r["status"] for r in rows[:3]] == ["fail"] * 3, rows
        assert failed == {(inst["lost"], "1"), (inst["xid79"], "1"), (inst["xid79"], "0")}
        by_key = {(r["instance"], r["gpu"]): r for r in rows}
        assert "GpuIsLost" in by_key[(inst["lost"], "1")]["reason"]
        xid_row = by_key[(inst["xid79"], "1")]
        assert xid_row["xid_last"] == 79 and xid_row["xid_count"] == 1
        assert "fallen off the bus" in xid_row["reason"]
        assert "the node's last report failed" in by_key[(inst["xid79"], "0")]["reason"]
        # the lost node's other GPU is throttled in that recording (power cap, thermal): a warning
        assert rows[3]["status"] == "warn" and (rows[3]["instance"], rows[3]["gpu"]) == (inst["lost"], "0")
        assert "clocks held down" in rows[3]["reason"] and "thermal" in rows[3]["reason"]
        assert [(r["status"], r["instance"]) for r in rows[4:]] == [("pass", inst["healthy"])] * 2, rows
        assert by_key[(inst["healthy"], "0")]["temperature_c"] is not None
        assert data["counts"]["fail"] == 3 and not data["targets_down"]

        text = _fleet(prom_port, "--match", f"instance={inst['healthy']}")
        assert text.returncode == exitcodes.OK, text.stderr
        assert inst["lost"] not in text.stdout and "PASS" in text.stdout

        # one exporter stops: Prometheus marks its series stale; fleet names the target
        stop(exporters[2])
        _wait(lambda: query(prom_port, f'up{{instance="{inst["xid79"]}"}} == 0'), 30, "the stopped target seen down")
        after = _fleet(prom_port, "--json")
        down = json.loads(after.stdout)
        assert inst["xid79"] in down["targets_down"]
        stale = {r["gpu"]: r for r in down["rows"] if r["instance"] == inst["xid79"]}
        # its last known report failed (the Xid 79): kept with its age, so GPU 0 stays failing too
        assert stale["0"]["status"] == "fail" and "not answering Prometheus" in stale["0"]["reason"], stale["0"]
        assert "last known" in stale["0"]["reason"] and stale["0"]["last_known"]
        # the last known Xid 79 is kept and keeps its GPU failing (it was dropped: `-`, stale)
        dead = stale["1"]
        assert dead["status"] == "fail" and dead["xid_last"] == 79 and dead["last_known"]
        assert "last known" in dead["reason"] and "not answering Prometheus" in dead["reason"]
        assert after.returncode == exitcodes.FAIL  # the lost GPU still fails

        stop(prometheus)
        gone = _fleet(prom_port)
        assert gone.returncode == exitcodes.UNREACHABLE
        assert gone.stdout == "" and len(gone.stderr.strip().splitlines()) == 1
        assert "cannot be reached" in gone.stderr
    finally:
        stop(prometheus)
        for proc in exporters:
            stop(proc)
            if proc.stderr is not None:
                proc.stderr.close()
        log.close()
