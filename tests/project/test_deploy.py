"""Cluster integrations in deploy/, each checked the way its own system would check it.

- Kubernetes: the DaemonSet, Service and Namespace validate against the Kubernetes API schemas
  (kubernetes-validate, strict: unknown fields are errors); the ServiceMonitor (a Prometheus
  Operator CRD, which those schemas do not cover) against the fields the operator defines, and
  all of them against each other: the Service selects the DaemonSet's pods and names its port,
  the ServiceMonitor selects the Service and scrapes that port.
- Slurm: slurmd drains a node when the Prolog or Epilog exits non-zero, and HealthCheckProgram
  acts through `scontrol`; the script runs here against real `gpudoctor report --quick` runs on
  recordings, with `scontrol` stood in for by a script that logs what it was asked.
- node-problem-detector: its custom plugin contract (exit 0 OK, 1 NonOK, 2 Unknown; one line of
  at most max_output_length characters on stdout), run the same way.
- Grafana: every metric a dashboard query names is one the exporter serves.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpudoctor import exporter

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
HEALTHY = ROOT / "tests" / "data" / "handmade_two_gpu_training_standin.json"
GPU_LOST = ROOT / "tests" / "data" / "handmade_gpu_lost.json"


def _docs(name):
    return list(yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()))


@pytest.mark.parametrize("name", ["namespace.yaml", "daemonset.yaml", "service.yaml"])
def test_kubernetes_objects_validate_against_the_api_schemas(name):
    import kubernetes_validate  # a dev dependency: the check must run, not skip

    for doc in _docs(name):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_a_broken_manifest_is_caught_by_the_same_check():
    import kubernetes_validate

    (ds,) = _docs("daemonset.yaml")
    ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9402"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, kubernetes_validate.latest_version(), strict=True)


SERVICE_MONITOR_SPEC = {"jobLabel", "selector", "namespaceSelector", "endpoints", "targetLabels",
                        "podTargetLabels", "sampleLimit"}
SERVICE_MONITOR_ENDPOINT = {"port", "targetPort", "path", "scheme", "interval", "scrapeTimeout",
                            "relabelings", "metricRelabelings", "honorLabels", "params"}
RELABEL = {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}


def test_service_monitor_uses_only_operator_fields_and_finds_the_exporter():
    (sm,) = _docs("servicemonitor.yaml")
    (svc,) = _docs("service.yaml")
    (ds,) = _docs("daemonset.yaml")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1" and sm["kind"] == "ServiceMonitor"
    assert set(sm["spec"]) <= SERVICE_MONITOR_SPEC
    for endpoint in sm["spec"]["endpoints"]:
        assert set(endpoint) <= SERVICE_MONITOR_ENDPOINT
        assert re.fullmatch(r"\d+[smh]", endpoint["interval"])
        for rule in endpoint.get("relabelings", []):
            assert set(rule) <= RELABEL
    # the chain Prometheus follows: ServiceMonitor -> Service -> pods of the DaemonSet
    assert sm["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
    assert svc["metadata"]["namespace"] == sm["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    port_names = {p["name"] for p in svc["spec"]["ports"]}
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= port_names
    container = ds["spec"]["template"]["spec"]["containers"][0]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(container_ports)
    # the exporter listens where the pod says, on every address (the default is loopback only)
    args = container["args"]
    assert args[0] == "exporter" and args[args.index("--host") + 1] == "0.0.0.0"
    assert int(args[args.index("--port") + 1]) == container_ports["metrics"]
    # the arguments are ones the real command line accepts
    from gpudoctor.cli import build_parser

    parsed = build_parser().parse_args(args)
    assert parsed.port == 9402


# --------------------------------------------------------------------------- Slurm and NPD
@pytest.fixture()
def tools(tmp_path):
    """A `gpudoctor` that is this checkout, and an `scontrol` that logs what it is asked."""
    gd = tmp_path / "gpudoctor"
    gd.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpudoctor "$@"\n')
    sc = tmp_path / "scontrol"
    sc.write_text('#!/bin/sh\necho "$*" >> "$SCONTROL_LOG"\n'
                  'if [ "$1" = show ]; then echo "NodeName=n1 State=IDLE+DRAIN Reason=$NODE_REASON [root@2026]"; fi\n')
    for f in (gd, sc):
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, GPUDOCTOR=str(gd), SCONTROL=str(sc), SCONTROL_LOG=str(tmp_path / "scontrol.log"),
               GPUDOCTOR_REPORT_DIR=str(tmp_path / "reports"), SLURMD_NODENAME="n1", PYTHONPATH=str(ROOT))
    env.pop("SLURM_SCRIPT_CONTEXT", None)
    return env, tmp_path / "scontrol.log"


def _slurm(env, role, recording, **extra):
    env = dict(env, GPUDOCTOR_REPORT_ARGS=f"--replay {recording}", **extra)
    return subprocess.run(["sh", str(DEPLOY / "slurm" / "gpudoctor-node-check.sh"), role],
                          env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_slurm_prolog_fails_on_a_lost_gpu_so_slurmd_drains_the_node(tools):
    env, log = tools
    proc = _slurm(env, "prolog", GPU_LOST)
    assert proc.returncode == 1, proc.stderr
    assert "gpudoctor: GPU 0" in proc.stderr and "fallen off the bus" in proc.stderr
    ok = _slurm(env, "epilog", HEALTHY)
    assert ok.returncode == 0, ok.stderr
    assert not log.exists()  # the Prolog/Epilog never call scontrol: slurmd drains on the exit code


def test_slurm_health_check_drains_then_resumes_only_its_own_drain(tools):
    env, log = tools
    assert _slurm(env, "healthcheck", GPU_LOST).returncode == 0
    drain = log.read_text().splitlines()
    assert drain[0].startswith("update nodename=n1 state=drain reason=gpudoctor: GPU 0")
    log.unlink()
    assert _slurm(env, "healthcheck", HEALTHY, NODE_REASON="gpudoctor: GPU 0 lost").returncode == 0
    assert log.read_text().splitlines() == ["show node n1", "update nodename=n1 state=resume"]
    log.unlink()
    assert _slurm(env, "healthcheck", HEALTHY, NODE_REASON="admin: bad fan").returncode == 0
    assert log.read_text().splitlines() == ["show node n1"]  # someone else's drain stays


def test_slurm_never_drains_when_gpudoctor_itself_cannot_run(tools, tmp_path):
    env, log = tools
    proc = _slurm(dict(env, GPUDOCTOR=str(tmp_path / "missing")), "prolog", GPU_LOST)
    assert proc.returncode == 0
    assert _slurm(env, "healthcheck", tmp_path / "no-such-recording.json").returncode == 0
    assert not log.exists() or "drain" not in log.read_text()


def _npd(env, recording):
    env = dict(env, GPUDOCTOR_REPORT_ARGS=f"--replay {recording}")
    return subprocess.run(["sh", str(DEPLOY / "node-problem-detector" / "gpudoctor-npd-check.sh")],
                          env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_node_problem_detector_plugin_contract(tools, tmp_path):
    env, _ = tools
    config = json.loads((DEPLOY / "node-problem-detector" / "gpudoctor-plugin-monitor.json").read_text())
    limit = config["pluginConfig"]["max_output_length"]
    assert config["plugin"] == "custom"
    conditions = {c["type"] for c in config["conditions"]}
    for rule in config["rules"]:
        assert rule["type"] in ("permanent", "temporary")
        assert rule["type"] == "temporary" or rule["condition"] in conditions
        assert Path(rule["path"]).name == "gpudoctor-npd-check.sh"
        assert re.fullmatch(r"\d+(s|m)", rule["timeout"])

    healthy = _npd(env, HEALTHY)
    assert (healthy.returncode, healthy.stdout) == (0, "gpudoctor: GPUs healthy\n")
    lost = _npd(env, GPU_LOST)
    assert lost.returncode == 1
    assert lost.stdout.startswith("gpudoctor: GPU 0") and len(lost.stdout.rstrip("\n")) <= limit
    assert lost.stdout.count("\n") == 1
    broken = _npd(dict(env, GPUDOCTOR=str(tmp_path / "missing")), HEALTHY)
    assert broken.returncode == 2 and "could not check" in broken.stdout


# --------------------------------------------------------------------------- Grafana
def test_grafana_dashboard_names_only_metrics_the_exporter_serves():
    dashboard = json.loads((DEPLOY / "grafana" / "gpudoctor-dashboard.json").read_text())
    served = set(exporter.all_metric_names())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    named = {name for expr in exprs for name in re.findall(r"\b(gpudoctor_[a-z0-9_]+)\b", expr)}
    assert exprs and named
    assert named <= served, f"not served by the exporter: {sorted(named - served)}"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
