"""fleet against a real Prometheus scraping dcgm-exporter output of several releases side by side.

The exposition texts are files under tests/data/dcgm_exporter/, each citing where it comes from:
three RECORDED from public threads (dcgm-exporter 3.3.x with ``Hostname``; 4.x with ``Hostname`` and
``DCGM_FI_DRIVER_VERSION`` and pod labels; 4.8.x with ``hostname`` and pod labels), and the issue's
scenario ASSEMBLED from documented names (one node on 4.8 names, one on 4.9 names whose GPU 1 has
Xid 79; a third node on 4.8 names with the same Xid, for comparing verdicts). A loopback HTTP
server serves each text as a target; Prometheus scrapes them every second and also evaluates the
deploy/ rule file's rules (generated with a 10 s window).

Needs the ``prometheus`` binary; skips without it. Every wait is bounded.
"""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpudoctor.core import exitcodes
from gpudoctor.fleet import idle, rules
from gpudoctor.fleet import text as fleet_text
from support.prom_support import PROMETHEUS, free_port, needs_prometheus, query, stop

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "dcgm_exporter"
WINDOW = "10s"


# --------------------------------------------------------------------------- what needs no Prometheus
def test_docs_table_of_names_is_the_catalogues():
    doc = (ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    table = re.search(r"<!-- dcgm-names:begin -->\n(.*?)<!-- dcgm-names:end -->", doc, re.S)
    assert table, "docs/fleet.md lost its generated table's markers"
    assert table.group(1) == fleet_text.dcgm_names_table(), \
        "docs/fleet.md's name table is out of date: paste gpudoctor.fleet.text.dcgm_names_table()"


def test_every_reading_fleet_shows_is_read_under_both_releases_names_in_one_unit():
    from gpudoctor.backends import catalogue

    for r in catalogue.fleet_readings():
        fields = catalogue.dcgm_read(r.key)
        if r.key == "power_limit_w":  # not in dcgm-exporter's sets; no unit stated for the old name
            assert not fields
            continue
        assert {f.exporters for f in fields} == {catalogue.DCGM_OLD, catalogue.DCGM_NEW}, r.key
        assert all(f.name in rules.dcgm_metrics() for f in fields), r.key
    # the units dcgm-exporter 4.9 changed, each scaled to gpudoctor's
    assert {f.name: f.scale for f in catalogue.dcgm_read("gpu_util_pct")} == {
        "DCGM_FI_DEV_GPU_UTIL": 0.01, "DCGM_FI_DEV_GPU_UTIL_RATIO": 1.0}
    assert {f.name: f.scale for f in catalogue.dcgm_read("memory_used_bytes")} == {
        "DCGM_FI_DEV_FB_USED": 2.0 ** 20, "DCGM_FI_DEV_FB_USED_BYTES": 1.0}
    assert rules.DCGM_XID == ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR")


# --------------------------------------------------------------------------- a real Prometheus
class _Exposition(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def serve(text: str) -> tuple[http.server.ThreadingHTTPServer, int]:
    handler = type("Handler", (_Exposition,), {"body": text.encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def start_prometheus(tmp_path: Path, targets: list[int], rule_text: str = "") -> tuple[subprocess.Popen, int]:
    port = free_port()
    rule_line = ""
    if rule_text:
        (tmp_path / "held-idle.rules.yml").write_text(rule_text)
        rule_line = f"rule_files: ['{tmp_path / 'held-idle.rules.yml'}']\n"
    listed = ", ".join(f"'127.0.0.1:{p}'" for p in targets)
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n" + rule_line +
        f"scrape_configs:\n  - job_name: gpus\n    static_configs:\n      - targets: [{listed}]\n")
    log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    log.close()
    return proc, port


def wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


def fleet_json(port: int, *args: str) -> tuple[int, dict]:
    proc = subprocess.run([*_PY, "fleet", "--prometheus", f"http://127.0.0.1:{port}", "--json",
                           "--idle-window", WINDOW, "--lookback", "5m", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    return proc.returncode, (json.loads(proc.stdout) if proc.stdout.strip() else {"rows": [], "stderr": proc.stderr})


_PY = [__import__("sys").executable, "-m", "gpudoctor"]
SCENARIO_48 = (DATA / "scenario_node_4_8.prom").read_text()
# the same node on 4.8 names with GPU 1's Xid 79, for comparing the verdicts of both releases
SCENARIO_48_XID = re.sub(r'(DCGM_FI_DEV_XID_ERRORS\{gpu="1".*\}) 0', r"\1 79", SCENARIO_48).replace("node-48", "node-48x")
FIGURES = ("utilization", "memory_used_bytes", "memory_total_bytes", "temperature_c", "power_w", "sm_active",
           "name", "holder", "driver_version")


def _held_idle_reason_removed(reason: str) -> str:
    return re.sub(r"held by .*? GPU-hours[^)]*\)", "held-idle", reason)


@needs_prometheus
def test_mixed_4_8_and_4_9_fleet_same_figures_and_verdicts_unreadable_target_and_held_idle(tmp_path):
    texts = {"48": SCENARIO_48, "49": (DATA / "scenario_node_4_9.prom").read_text(), "48x": SCENARIO_48_XID,
             "v3": (DATA / "v3_hostname_issue250.prom").read_text(),
             "v48": (DATA / "v4_8_hostname_pr736.prom").read_text(),
             "v4": (DATA / "v4_driver_label_issue512.prom").read_text()}
    servers = {name: serve(text) for name, text in texts.items()}
    inst = {name: f"127.0.0.1:{port}" for name, (_server, port) in servers.items()}
    prometheus, port = start_prometheus(tmp_path, [p for _s, p in servers.values()], idle.rule_file(WINDOW))
    try:
        wait_for(lambda: len(query(port, "up == 1")) == len(servers), 60, "every target scraped")
        code, data = wait_for(lambda: (lambda r: r if len(r[1].get("held_idle", [])) >= 3 else None)(fleet_json(port)),
                              90, "fleet listing the held-idle GPUs")
        rows = {(r["instance"], r["gpu"]): r for r in data["rows"]}
        # the scenario: every GPU of both releases, in gpudoctor's units, the same figures
        for gpu in ("0", "1"):
            old, new, xid = rows[(inst["48"], gpu)], rows[(inst["49"], gpu)], rows[(inst["48x"], gpu)]
            assert {k: old[k] for k in FIGURES} == {k: new[k] for k in FIGURES} == {k: xid[k] for k in FIGURES}
        busy = rows[(inst["49"], "0")]
        assert busy["utilization"] == pytest.approx(0.87) and busy["memory_used_bytes"] == 40000 * 2 ** 20
        assert busy["memory_total_bytes"] == 81559 * 2 ** 20 and busy["temperature_c"] == 61
        assert busy["power_w"] == 512.5 and busy["driver_version"] == "570.86.15"
        assert busy["status"] == rows[(inst["48"], "0")]["status"] == "pass"
        assert {rows[(inst[n], "0")]["hostname"] for n in ("48", "49")} == {"node-48", "node-49"}
        # the same verdicts: Xid 79 under the new name fails GPU 1 as under the old one
        failed = rows[(inst["49"], "1")]
        assert failed["status"] == rows[(inst["48x"], "1")]["status"] == "fail" and failed["xid_last"] == 79
        assert _held_idle_reason_removed(failed["reason"]) == _held_idle_reason_removed(rows[(inst["48x"], "1")]["reason"])
        assert "fallen off the bus" in failed["reason"]
        assert rows[(inst["48"], "1")]["status"] == "warn"  # held but idle, no Xid
        # held but idle: pod ml/trainer-0 on GPU 1 of each node, with its cost
        listed = {(h["instance"], h["gpu"]): h for h in data["held_idle"]}
        assert set(listed) == {(inst[n], "1") for n in ("48", "49", "48x")}, data["held_idle"]
        for entry in listed.values():
            assert entry["holder"] == "pod ml/trainer-0 (container main)"
            assert entry["idle_for_s"] >= 10 and entry["gpu_hours"] == pytest.approx(entry["idle_for_s"] / 3600)
            assert entry["energy_kwh"] == pytest.approx(71.25 * entry["idle_for_s"] / 3.6e6, rel=1e-6)
        # recorded releases: Hostname (3.3.x), hostname and pods (4.8.x)
        v3 = rows[(inst["v3"], "0")]
        assert (v3["name"], v3["hostname"], v3["utilization"]) == ("Tesla V100-SXM2-32GB", "r6i3n0", 0.0)
        assert rows[(inst["v48"], "1")]["temperature_c"] == 44 and rows[(inst["v48"], "1")]["hostname"] == "dcgm-exporter-wwwjh"
        assert rows[(inst["v48"], "2")]["holder"] == "pod default/triton-server-f7cb5d77-95xcf (container triton-server)"
        assert rows[(inst["v48"], "0")]["memory_used_bytes"] == 3744 * 2 ** 20
        # a target whose GPU series fleet cannot read is a row of its own, never left out
        unread = rows[(inst["v4"], "")]
        assert unread["status"] == "stale" and unread["source"] == "unknown"
        assert unread["reason"].startswith("Prometheus holds series from this target that fleet cannot read: "
                                           "DCGM_FI_DEV_MEMORY_TEMP, DCGM_FI_PROF_GR_ENGINE_ACTIVE: ")
        assert code == exitcodes.FAIL
        for fail_on in ("warn", "fail"):
            alone, _ = fleet_json(port, "--match", f"instance={inst['v4']}", "--fail-on", fail_on)
            assert alone == exitcodes.PROBE_ERROR
        # the deploy/ rules, evaluated by Prometheus, name the same held-idle GPUs with the same holder
        # The rules are evaluated every few seconds and one GPU may qualify an evaluation after another:
        # wait until the recorded set is the one fleet listed, not for the first non-empty answer.
        def settled(promql: str, key, expected: set) -> set | None:
            seen = {key(s["metric"]) for s in query(port, promql)}
            seen_sets.append(seen)
            return seen if seen == expected else None

        seen_sets: list[set] = []
        expected = {(i, g, "trainer-0") for i, g in listed}
        try:
            wait_for(lambda: settled("gpudoctor:gpu_held_idle:info", lambda m: (m["instance"], m["gpu"], m.get("pod")),
                                     expected), 120, "the held-idle recording rule naming the GPUs fleet listed")
            wait_for(lambda: settled('ALERTS{alertname="GpuHeldButIdle"}', lambda m: (m["instance"], m["gpu"]),
                                     set(listed)), 120, "the held-idle alert on the GPUs fleet listed")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen: {seen_sets[-1:]}") from None
    finally:
        stop(prometheus)
        for server, _port in servers.values():
            server.shutdown()


@needs_prometheus
def test_a_fleet_that_does_not_know_the_new_names_lists_the_node_instead_of_dropping_it(tmp_path, monkeypatch):
    """The issue's failure, guarded: with only the 4.8 names known, the 4.9 node was left out and
    fleet exited 0. Without the new names it is now a failing row of its own naming them."""
    from gpudoctor import fleet

    server, target = serve((DATA / "scenario_node_4_9.prom").read_text())
    old = [f.name for f in __import__("gpudoctor.backends.catalogue", fromlist=["x"]).dcgm_fields()
           if f.exporters.startswith("4.8")]
    gpu_names = tuple(n for n in rules.dcgm_gpu_names() if n in old)
    metrics = tuple(n for n in rules.dcgm_metrics() if n in old or "EXP" in n)
    monkeypatch.setattr(rules, "dcgm_gpu_names", lambda: gpu_names)
    monkeypatch.setattr(rules, "dcgm_metrics", lambda: metrics)
    prometheus, port = start_prometheus(tmp_path, [target])
    try:
        wait_for(lambda: query(port, "DCGM_FI_DEV_XID_ERROR"), 60, "the 4.9 node scraped")
        view = fleet.collect(fleet.Prometheus(f"http://127.0.0.1:{port}"), [], lookback="5m")
        assert [(r.gpu, r.status) for r in view.rows] == [("", "stale")]
        assert view.rows[0].reason.startswith(
            "Prometheus holds series from this target that fleet cannot read: DCGM_FI_DEV_BOARD_POWER_WATTS, "
            "DCGM_FI_DEV_FB_CAPACITY_BYTES, DCGM_FI_DEV_FB_FREE_BYTES, DCGM_FI_DEV_FB_RESERVED_BYTES, "
            "DCGM_FI_DEV_FB_USED_BYTES, DCGM_FI_DEV_GPU_TEMP_CELSIUS and 2 more: ")
        assert fleet.exit_code(view, "fail") == exitcodes.PROBE_ERROR
    finally:
        stop(prometheus)
        server.shutdown()


@needs_prometheus
def test_no_answering_gpu_target_is_left_out_whatever_names_it_exports(tmp_path):
    """Every answering target with GPU series is a row: a dcgm-exporter whose counters file holds
    only the last-Xid gauge (4.9 name; GPU 1 at Xid 79), and gpudoctor's exporter on a node where
    NVML is missing (no GPU series, only its node-wide ones). Both were left out while fleet judged
    the healthy node and exited 0 (the Xid node) or named its own exporter's series as unreadable.
    A target with no GPU-like series at all (a node exporter) is not a GPU node: no row. A target
    that never answered is a stale row of its own."""
    xid_only = "\n".join(line for line in (DATA / "scenario_node_4_9.prom").read_text().splitlines()
                         if line.startswith("#") or "DCGM_FI_DEV_XID_ERROR" in line) + "\n"
    servers = {"healthy": serve(SCENARIO_48.replace('namespace="ml",pod="trainer-0"', 'namespace="",pod=""')),
               "xid": serve(xid_only), "node": serve("# TYPE node_load1 gauge\nnode_load1 0.5\n")}
    exporter = subprocess.Popen(
        [*_PY, "exporter", "--host", "127.0.0.1", "--port", "0", "--replay",
         str(ROOT / "tests" / "data" / "handmade_no_nvml.json"), "--interval", "0.5", "--report-interval", "0",
         "--exit-after", "150"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    prometheus = None
    try:
        match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", exporter.stderr.readline())
        assert match, "exporter did not start"
        inst = {name: f"127.0.0.1:{port}" for name, (_server, port) in servers.items()}
        inst["no_nvml"] = f"127.0.0.1:{match.group(1)}"
        inst["down"] = f"127.0.0.1:{free_port()}"
        prometheus, port = start_prometheus(tmp_path, [int(i.rsplit(":", 1)[1]) for i in inst.values()])
        wait_for(lambda: len(query(port, "up == 1")) == len(inst) - 1 and query(port, "up == 0")
                 and query(port, "gpudoctor_report_status"), 60, "every target scraped, the exporter's report included")
        code, data = fleet_json(port)
        rows = {(r["instance"], r["gpu"]): r for r in data["rows"]}
        assert {i for i, _gpu in rows} == {inst["healthy"], inst["xid"], inst["no_nvml"], inst["down"]}, data
        assert rows[(inst["down"], "")]["status"] == "stale" and "not answering" in rows[(inst["down"], "")]["reason"]
        assert rows[(inst["xid"], "1")]["status"] == "fail" and rows[(inst["xid"], "1")]["xid_last"] == 79
        assert rows[(inst["xid"], "1")]["name"] == "NVIDIA H100 80GB HBM3"
        assert rows[(inst["xid"], "0")]["status"] == "pass"
        node = rows[(inst["no_nvml"], "")]
        assert node["status"] == "fail" and "NVML is down on the node (LibraryNotFound)" in node["reason"], node
        assert "cannot read" not in node["reason"]
        assert code == exitcodes.FAIL
        for fail_on in ("warn", "fail"):  # the NVML-less node alone, the silent target alone: never 0
            alone, _ = fleet_json(port, "--match", f"instance={inst['no_nvml']}", "--fail-on", fail_on)
            assert alone == exitcodes.FAIL
            alone, _ = fleet_json(port, "--match", f"instance={inst['down']}", "--fail-on", fail_on)
            assert alone == exitcodes.PROBE_ERROR
    finally:
        stop(prometheus)
        stop(exporter)
        if exporter.stderr is not None:
            exporter.stderr.close()
        for server, _port in servers.values():
            server.shutdown()


@needs_prometheus
def test_a_gpu_gone_from_a_live_dcgm_exporter_keeps_its_last_known_xid_instead_of_passing(tmp_path):
    """GPU 1 of the 4.9 node reports Xid 79 (fallen off the bus), then DCGM stops exporting it while
    the exporter still answers. It was a PASS row with no readings, 'no problem seen', exit 0."""
    text = (DATA / "scenario_node_4_9.prom").read_text()
    server, target = serve(text)
    prometheus, port = start_prometheus(tmp_path, [target])
    try:
        wait_for(lambda: query(port, 'DCGM_FI_DEV_XID_ERROR{gpu="1"} == 79'), 60, "GPU 1's Xid scraped")
        server.RequestHandlerClass.body = ("\n".join(line for line in text.splitlines() if 'gpu="1"' not in line)
                                           + "\n").encode()
        wait_for(lambda: not query(port, '{gpu="1"}') and query(port, '{gpu="0"}'), 60, "GPU 1 gone from the scrape")
        code, data = fleet_json(port)
        rows = {r["gpu"]: r for r in data["rows"]}
        assert rows["0"]["status"] == "pass"
        gone = rows["1"]
        assert gone["status"] == "fail" and gone["xid_last"] == 79 and gone["last_known"] is True, gone
        assert "GPU no longer exported (last seen" in gone["reason"] and "fallen off the bus" in gone["reason"]
        assert gone["temperature_c"] == 35 and gone["last_known_age_s"] is not None
        assert code == exitcodes.FAIL
    finally:
        stop(prometheus)
        server.shutdown()


@needs_prometheus
def test_a_gpu_held_by_an_hpc_job_is_named_alike_by_fleet_and_the_deploy_rules(tmp_path):
    """dcgm-exporter's HPC job mapping labels a GPU with ``hpc_job`` (its transformation/const.go,
    hpcJobAttribute): GPU 1 of the 4.8 node, idle, held by job 1234 instead of a pod."""
    text = SCENARIO_48.replace('container="main",namespace="ml",pod="trainer-0"', 'hpc_job="1234"')
    server, target = serve(text)
    prometheus, port = start_prometheus(tmp_path, [target], idle.rule_file(WINDOW))
    try:
        wait_for(lambda: query(port, "up == 1"), 60, "the node scraped")
        code, data = wait_for(lambda: (lambda r: r if r[1].get("held_idle") else None)(fleet_json(port)),
                              90, "fleet listing the held-idle GPU")
        [entry] = data["held_idle"]
        assert (entry["gpu"], entry["holder"]) == ("1", "HPC job 1234")
        assert code == exitcodes.WARN
        recorded = wait_for(lambda: query(port, "gpudoctor:gpu_held_idle:info"), 60, "the held-idle recording rule")
        assert [(s["metric"]["gpu"], s["metric"].get("hpc_job")) for s in recorded] == [("1", "1234")]
    finally:
        stop(prometheus)
        server.shutdown()


@needs_prometheus
def test_a_node_upgraded_to_4_9_then_silent_keeps_its_newest_xid(tmp_path):
    """Mid-upgrade: the node exported 4.8 names (Xid 0), was upgraded to 4.9 (GPU 1 at Xid 79 under
    the new name), then stopped answering. Both names hold a last value in the look-back window;
    the newer release's is the node's last word, so GPU 1 keeps failing instead of showing Xid 0."""
    server, target = serve(SCENARIO_48)
    prometheus, port = start_prometheus(tmp_path, [target])
    try:
        wait_for(lambda: query(port, "DCGM_FI_DEV_XID_ERRORS"), 60, "the 4.8 node scraped")
        server.RequestHandlerClass.body = (DATA / "scenario_node_4_9.prom").read_bytes()
        wait_for(lambda: query(port, "DCGM_FI_DEV_XID_ERROR == 79"), 60, "the node on 4.9 names")
        server.shutdown()
        server.server_close()
        wait_for(lambda: query(port, "up == 0"), 60, "the target down")
        code, data = fleet_json(port)
        rows = {r["gpu"]: r for r in data["rows"]}
        assert rows["1"]["status"] == "fail" and rows["1"]["xid_last"] == 79, rows["1"]
        assert rows["1"]["last_known"] is True and rows["0"]["status"] == "stale"
        assert code == exitcodes.FAIL
    finally:
        stop(prometheus)
        server.shutdown()
