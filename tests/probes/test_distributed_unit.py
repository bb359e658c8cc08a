"""The distributed probe's arithmetic and verdicts, from hand-made rank payloads (no torch),
and the NVLink query through the NVML gate with a fake NVML module."""

from __future__ import annotations

import copy
import subprocess
import sys
from types import SimpleNamespace

import pytest
from support.fresh_interpreter import modules_loaded

from gpudoctor.backends import NA, NvmlBackend, NvmlGate
from support.nvml_fake import FakePynvml, nvml_error
from gpudoctor.probes.distributed import (assemble, bus_bandwidth, classify_failures, find_stragglers,
                                          parse_size)


def test_parse_size_binary_units():
    assert parse_size("4096") == 4096
    assert parse_size("64K") == 64 << 10
    assert parse_size("1m") == 1 << 20
    assert parse_size("2GiB") == 2 << 30
    with pytest.raises(ValueError):
        parse_size("big")
    with pytest.raises(ValueError):
        parse_size("2")


def test_bus_bandwidth_is_nccl_tests_definition():
    # 1 GB in 0.1 s: algbw 10 GB/s; busbw = algbw * 2 (n-1) / n
    assert bus_bandwidth(10**9, 0.1, 2) == pytest.approx((10.0, 10.0))
    assert bus_bandwidth(10**9, 0.1, 8) == pytest.approx((10.0, 17.5))
    assert bus_bandwidth(10**9, 0.1, 4)[1] == pytest.approx(15.0)


def test_find_stragglers_uses_median_of_the_others_and_a_floor():
    assert find_stragglers({0: 0.010, 1: 0.011, 2: 0.010, 3: 0.030}) == [(3, 0.030, 0.010)]
    assert find_stragglers({0: 0.010, 1: 0.012}) == []          # 1.2x: not a straggler
    assert find_stragglers({0: 0.0010, 1: 0.0025}) == []        # 2.5x but only 1.5 ms: timer noise
    assert find_stragglers({0: 0.5}) == []


def test_classify_failures_blames_the_first_death_and_the_rank_left_behind():
    out = classify_failures({0: "failed: RuntimeError: Connection reset by peer", 1: "exited with code 17"},
                            {0: 5.0, 1: 5.0}, set(), {0: (3, "allreduce 1 MiB"), 1: (2, "allreduce 64 KiB")}, 60)
    assert out[1]["kind"] == "failed" and out[0]["kind"] == "stopped"
    out = classify_failures({}, {}, {0, 1, 2}, {0: (5, "ddp gradient check"), 1: (4, "ddp setup"),
                                                2: (5, "ddp gradient check")}, 30)
    assert out[1]["kind"] == "hung" and "within 30 s" in out[1]["text"]
    assert out[0]["kind"] == out[2]["kind"] == "stopped"
    assert "waiting for rank(s) 1" in out[2]["text"]


def payload(rank: int, *, world: int = 2, host: str = "node-a", compute: float = 0.004,
            correct: bool = True, grad_diff: float = 0.0, node: dict | None = None) -> dict:
    p = {
        "rank": rank, "world_size": world, "local_rank": rank, "hostname": host, "device": f"cuda:{rank}",
        "device_name": "GPU", "backend": "nccl", "init_s": 0.5, "error": None,
        "allreduce": [{"bytes": 1 << 20, "dtype": "float32", "correct": correct, "iters": 20,
                       "mean_s": 0.001 * (1 + rank * 0.1)}],
        "ddp": {"batch_per_rank": 64, "loss": 2.3, "grad_max_abs_diff_vs_manual": grad_diff,
                "grad_max_abs": 0.5, "grad_spread": 0.0, "param_spread": 0.0,
                "step_times_s": [0.006] * 10, "compute_times_s": [compute] * 10, "parameters": 575050},
    }
    if node is not None:
        p["node"] = node
    return p


TWO_GPU_NODE = {
    "hostname": "node-a", "cuda_devices": 2, "device_names": ["GPU", "GPU"],
    "peer_access": [[None, True], [True, None]],
    "nvlink": [[{"link": 0, "active": True, "version": 4, "remote_pci_bus_id": "0000:0f:00.0",
                 "remote_type": "gpu"}],
               [{"link": 0, "active": True, "version": 4, "remote_pci_bus_id": "0000:07:00.0",
                 "remote_type": "gpu"}]],
    "dataparallel": {"devices": 2, "max_abs_diff": 0.0, "grads_finite": True, "ok": True, "seconds": 0.1},
}


def test_assemble_healthy_two_gpu_node():
    r = assemble({0: payload(0, node=TWO_GPU_NODE), 1: payload(1)}, {}, 2, "nccl", "local")
    assert r.status.value == "pass", [f.summary for f in r.findings]
    row = r.details["allreduce"][0]
    # the slowest rank's time (rank 1: 1.1 ms) sets the bandwidth
    assert row["time_us"] == pytest.approx(1100.0)
    assert row["busbw_GBps"] == pytest.approx((1 << 20) / 0.0011 / 1e9, rel=1e-3)
    m = {x.name: x for x in r.measurements}
    assert m["allreduce_busbw_1MiB"].unit == "GB/s"
    assert m["nvlink_active_links"].value == 2


def test_assemble_flags_wrong_sums_wrong_gradients_and_stragglers():
    r = assemble({0: payload(0, correct=False), 1: payload(1, grad_diff=0.1, compute=0.02)}, {}, 2, "nccl",
                 "local")
    codes = {f.code: f for f in r.findings}
    assert r.status.value == "fail"
    assert "allreduce_wrong_result" in codes and "rank(s) 0" in codes["allreduce_wrong_result"].summary
    assert "ddp_gradients_wrong" in codes
    assert codes["straggler"].status.value == "warn" and "rank 1" in codes["straggler"].summary
    assert "distributed_ok" not in codes


def test_cpu_ranks_sharing_a_host_are_not_called_stragglers():
    slow = [payload(0), payload(1, compute=0.02)]
    for p in slow:
        p["backend"] = "gloo"
    r = assemble({0: slow[0], 1: slow[1]}, {}, 2, "gloo", "local")
    assert r.status.value == "pass"
    assert any(f.code == "straggler_shared_cpu" for f in r.findings)


def test_assemble_node_problems_and_one_gpu_skip():
    bad = copy.deepcopy(TWO_GPU_NODE)
    bad["peer_access"] = [[None, False], [False, None]]
    bad["nvlink"][1][0]["active"] = False
    bad["dataparallel"] = {"devices": 2, "ok": False, "error": "RuntimeError: CUDA error: peer access"}
    r = assemble({0: payload(0, node=bad), 1: payload(1)}, {}, 2, "nccl", "local")
    codes = {f.code: f for f in r.findings}
    assert codes["no_peer_access"].status.value == "warn" and "0->1" in codes["no_peer_access"].summary
    assert "GPU 1 link 0" in codes["nvlink_link_down"].summary
    assert codes["dataparallel_failed"].status.value == "fail"
    assert r.status.value == "fail"

    one = {"hostname": "node-b", "cuda_devices": 1, "skip_reason": "only one CUDA device is visible"}
    r = assemble({0: payload(0, node=one), 1: payload(1)}, {}, 2, "nccl", "local")
    skip = [f for f in r.findings if f.code == "multi_gpu_skipped"]
    assert skip and "only one CUDA device" in skip[0].summary and skip[0].status.value == "skip"
    assert r.status.value == "pass"  # the parts that ran passed


def test_assemble_with_no_rank_finished_fails_with_the_culprit():
    failures = {0: {"kind": "hung", "text": "did not finish within 60 s (last phase: init_process_group)"},
                1: {"kind": "stopped", "text": "was waiting for rank(s) 0 in init_process_group when stopped"}}
    r = assemble({}, failures, 2, "nccl", "local")
    assert r.status.value == "fail"
    assert r.summary.startswith("rank 0 did not finish")


# --------------------------------------------------------------------------- NVLink via NVML
def _nvlink_nvml(links_per_device: dict[int, int], version: int = 4) -> FakePynvml:
    """GPUs with ``links_per_device[i]`` NVLinks each (0: no NVLink); link 2 is down; every link
    goes to an NVSwitch at bus 0F and reports ``version``."""
    nvml = FakePynvml(len(links_per_device))
    nvml.NVML_NVLINK_MAX_LINKS = 6
    nvml.NVML_NVLINK_DEVICE_TYPE_GPU, nvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU, nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH = 0, 1, 2

    def on_link(n, answer):
        def read(link):
            if n == 0:
                raise nvml_error("NotSupported")()
            if link >= n:
                raise nvml_error("InvalidArgument")()
            return answer(link)
        return read

    for index, n in links_per_device.items():
        nvml.devices[index].update({
            "nvmlDeviceGetNvLinkState": on_link(n, lambda link: 0 if link == 2 else 1),
            "nvmlDeviceGetNvLinkRemotePciInfo": on_link(n, lambda link: SimpleNamespace(busId=b"00000000:0F:00.0")),
            "nvmlDeviceGetNvLinkRemoteDeviceType": on_link(n, lambda link: 2),
            "nvmlDeviceGetNvLinkVersion": on_link(n, lambda link: version)})
    return nvml


def test_nvlink_query_through_the_gate():
    backend = NvmlBackend(NvmlGate(_nvlink_nvml({0: 4, 1: 0})))
    links = backend.nvlink(0)
    assert [l["link"] for l in links] == [0, 1, 2, 3]
    assert [l["active"] for l in links] == [True, True, False, True]
    assert links[0]["remote_pci_bus_id"] == "0000:0f:00.0"
    assert links[0]["remote_type"] == "switch" and links[0]["version"] == 4
    assert backend.nvlink(1) == NA("NotSupported")  # no NVLink on this board: a value, not an error


def test_nvlink_without_nvml_is_na():
    assert NvmlBackend(NvmlGate(FakePynvml(init_error="LibraryNotFound"))).nvlink(0) == NA("LibraryNotFound")


def test_front_ends_do_not_import_torch():
    assert modules_loaded("import gpudoctor.cli as c; c.build_parser(); import gpudoctor.exporter, "
                          "gpudoctor.commands.distributed, gpudoctor.probes.distributed",
                          ("torch", "pynvml", "textual")) == []


def test_quick_level_skips_without_importing_torch():

    code = ("import sys; from gpudoctor.probes import ProbeContext; from gpudoctor.probes.distributed import run; "
            "r = run(ProbeContext(gpu=None, level='quick')); "
            "print(r.status.value, r.findings[0].code, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["skip", "quick_mode", "False"], out.stderr


def test_anonymize_strips_every_ranks_host_name():
    import json

    from gpudoctor.core.model import Report
    from gpudoctor.console.render import report_to_json

    def _to_json(report, anonymize):
        return report_to_json(report, anonymize=anonymize)

    result = assemble({0: payload(0, host="node-alpha"), 1: payload(1, host="node-beta", compute=0.02)}, {}, 2,
                      "nccl", "torchrun")
    text = _to_json(Report(results=[result]), anonymize=True)
    assert "node-alpha" not in text and "node-beta" not in text
    data = json.loads(text)
    assert data["results"][0]["details"]["ranks"][0]["hostname"] == "<redacted>"
    assert "straggler" in {f["code"] for f in data["results"][0]["findings"]}
    assert "node-beta" in _to_json(Report(results=[result]), anonymize=False)


def _links(states: list[bool]) -> list[dict]:
    return [{"link": i, "active": a, "version": 4, "remote_pci_bus_id": None, "remote_type": "gpu"}
            for i, a in enumerate(states)]


def _node_with_links(per_gpu: list) -> dict:
    node = copy.deepcopy(TWO_GPU_NODE)
    node["nvlink"] = per_gpu
    return node


def test_nvlink_capable_boards_without_a_bridge_are_not_warned():
    # H100 PCIe / H200 NVL without a bridge: NVML answers every link "inactive", not NotSupported.
    node = _node_with_links([_links([False] * 18), _links([False] * 18)])
    r = assemble({0: payload(0, node=node), 1: payload(1)}, {}, 2, "nccl", "local")
    codes = {f.code: f for f in r.findings}
    assert "nvlink_link_down" not in codes
    assert codes["nvlink_not_connected"].status.value == "pass"
    assert "no NVLink connected" in codes["nvlink_not_connected"].summary
    assert r.status.value == "pass"
    assert {m.name: m for m in r.measurements}["nvlink_active_links"].value == 0


def test_nvlink_warns_on_a_link_down_beside_links_up_and_on_fewer_links_than_peers():
    node = _node_with_links([_links([True] * 4), _links([True, True, False, True])])
    r = assemble({0: payload(0, node=node), 1: payload(1)}, {}, 2, "nccl", "local")
    down = [f for f in r.findings if f.code == "nvlink_link_down"]
    assert len(down) == 1 and down[0].status.value == "warn"
    assert "GPU 1 link 2" in down[0].summary and "GPU 0" not in down[0].summary

    # GPU 2 has no link up while its peers have bridges: that GPU's bridge is missing or dead.
    node = _node_with_links([_links([True, True]), _links([True, True]), _links([False, False])])
    r = assemble({0: payload(0, node=node), 1: payload(1)}, {}, 2, "nccl", "local")
    down = [f for f in r.findings if f.code == "nvlink_link_down"]
    assert len(down) == 1
    assert "GPU 2 link 0, GPU 2 link 1" in down[0].summary and "GPU 2 has 0 link(s) up, a peer 2" in down[0].summary

    # all links up everywhere, or NotSupported on a board without NVLink: nothing to say
    for links in ([_links([True] * 6), _links([True] * 6)], ["NotSupported", "NotSupported"]):
        r = assemble({0: payload(0, node=_node_with_links(links)), 1: payload(1)}, {}, 2, "nccl", "local")
        assert not [f for f in r.findings if f.code.startswith("nvlink")], r.findings
        assert r.status.value == "pass"


def _compute_mode_nvml(modes: dict[int, object]) -> FakePynvml:
    """GPUs in the given compute modes (None: NVML does not say), by NVML index."""
    nvml = FakePynvml(max(modes) + 1)
    for index, mode in modes.items():
        nvml.devices[index]["nvmlDeviceGetComputeMode"] = nvml_error("NotSupported") if mode is None else mode
    return nvml


def test_dataparallel_is_skipped_on_exclusive_gpus_held_by_other_ranks():
    from gpudoctor.probes._distributed_worker import dataparallel_blocker

    def blocker(modes, local_ranks, indices=None):
        gpu = NvmlBackend(NvmlGate(_compute_mode_nvml(modes)))
        return dataparallel_blocker(gpu, indices if indices is not None else sorted(modes), local_ranks)

    why = blocker({0: 0, 1: 3}, 2)
    assert why.startswith("GPU 1 is in exclusive-process compute mode and 1 other local rank(s) hold their GPUs")
    assert "GPU 0" not in why
    assert "GPU 0 is in prohibited compute mode" in blocker({0: 2, 1: 0}, 2)
    # NVML index 5 is torch's GPU 0 under CUDA_VISIBLE_DEVICES: named by the torch index
    assert blocker({5: 3, 6: 0}, 2, indices=[5, 6]).startswith("GPU 0 is in exclusive-process")
    assert blocker({0: 0, 1: 0}, 2) is None          # default mode: run it
    assert blocker({0: 3, 1: 3}, 1) is None          # no other rank holds a GPU: run it
    assert blocker({0: None, 1: 0}, 2) is None       # mode unknown: run it, a failure will say why

    node = copy.deepcopy(TWO_GPU_NODE)
    node["dataparallel"] = {"devices": 2, "skipped": why}
    r = assemble({0: payload(0, node=node), 1: payload(1)}, {}, 2, "nccl", "local")
    codes = {f.code: f for f in r.findings}
    assert "dataparallel_failed" not in codes
    assert codes["dataparallel_skipped"].status.value == "skip" and "exclusive-process" in codes[
        "dataparallel_skipped"].summary
    assert r.status.value == "pass"


def test_nvlink_version_enum_is_decoded_with_the_bindings_constants():
    import pynvml

    assert pynvml.NVML_NVLINK_VERSION_4_0 == 6  # nvidia-ml-py 13.x: the enum, not the number

    with_enum = _nvlink_nvml({0: 2}, version=6)  # an H100 on a newer driver
    for name, value in (("INVALID", 0), ("1_0", 1), ("2_0", 2), ("2_2", 3), ("3_0", 4), ("3_1", 5), ("4_0", 6),
                        ("5_0", 7)):
        setattr(with_enum, f"NVML_NVLINK_VERSION_{name}", value)
    links = NvmlBackend(NvmlGate(with_enum)).nvlink(0)
    assert [(l["version"], l["version_name"]) for l in links] == [(6, "4.0"), (6, "4.0")]
    # the real binding's constants decode the same way
    real = _nvlink_nvml({0: 1}, version=6)
    for name in dir(pynvml):
        if name.startswith("NVML_NVLINK_VERSION_"):
            setattr(real, name, getattr(pynvml, name))
    links = NvmlBackend(NvmlGate(real)).nvlink(0)
    assert links[0]["version_name"] == "4.0"
    # an older binding without the constants: the raw value only, no guess
    links = NvmlBackend(NvmlGate(_nvlink_nvml({0: 1}))).nvlink(0)
    assert links[0]["version"] == 4 and links[0]["version_name"] is None


def test_nvlink_version_is_shown_raw_beside_the_enum_reading_and_never_fails():
    """Issue #40 item 2: nvml.h declares nvmlDeviceGetNvLinkVersion's answer a plain unsigned int;
    public NCCL benchmarks work around H100s answering 4 where the enum says 6 is "4.0". The raw
    value is shown beside any name the enum gives it, and a value the enum lacks (or a non-number)
    costs nothing."""
    from gpudoctor.core.model import ProbeResult
    from gpudoctor.probes.distributed import _nvlink_findings

    names = {"1_0": 1, "2_0": 2, "2_2": 3, "3_0": 4, "3_1": 5, "4_0": 6, "5_0": 7}

    def links_answering(version):
        nvml = _nvlink_nvml({0: 2}, version=version)
        for name, value in names.items():
            setattr(nvml, f"NVML_NVLINK_VERSION_{name}", value)
        return NvmlBackend(NvmlGate(nvml)).nvlink(0)

    h100_answering_4 = links_answering(4)
    assert [(l["version"], l["version_name"]) for l in h100_answering_4] == [(4, "3.0"), (4, "3.0")]
    r = ProbeResult("distributed")
    _nvlink_findings(r, "node-a", [h100_answering_4, h100_answering_4])
    note = {m.name: m for m in r.measurements}["nvlink_active_links"].note
    assert "4 (as nvmlNvlinkVersion_t: NVLink 3.0)" in note  # the raw 4 beside the enum's name
    unknown = links_answering(99)
    assert unknown[0]["version"] == 99 and unknown[0]["version_name"] is None
    odd = links_answering("4.0")  # not an unsigned int: no number made of it, no exception
    assert odd[0]["version"] is None and odd[0]["version_name"] is None
    r = ProbeResult("distributed")
    _nvlink_findings(r, "node-b", [unknown, odd])
    note = {m.name: m for m in r.measurements}["nvlink_active_links"].note
    assert "99 (not a value of the binding's nvmlNvlinkVersion_t)" in note and "not read" in note


def test_nccl_asked_for_without_a_gpu_names_the_missing_gpu_not_nccl(monkeypatch):
    """Issue #12 item 5: a torch with NCCL but no GPU said "no NCCL in this torch"."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from gpudoctor.probes import ProbeContext
    from gpudoctor.probes.distributed import run

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    result = run(ProbeContext(gpu=None, level="full", options={"backend": "nccl"}))
    assert result.status.value == "skip" and result.findings[0].code == "nccl_unavailable"
    assert "no CUDA device" in result.summary and "no NCCL" not in result.summary
    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    result = run(ProbeContext(gpu=None, level="full", options={"backend": "nccl"}))
    assert result.summary == "NCCL asked for, but this torch build has no NCCL"


class _OneGpuTorch:
    """What `report --full`'s distributed probe sees on a one-GPU node: torch.cuda and
    torch.distributed answered by stand-ins (this machine has no GPU and no NCCL)."""

    def __init__(self, monkeypatch, *, init_error: Exception | None = None) -> None:
        import torch
        import torch.distributed as dist

        self.calls: list[tuple] = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 5))
        real_ones = torch.ones
        monkeypatch.setattr(torch, "ones", lambda n, device=None: self.calls.append(("ones", device)) or real_ones(n))
        monkeypatch.setattr(dist, "is_nccl_available", lambda: True)

        def init(backend, **kw):
            self.calls.append(("init", backend, kw.get("world_size"), type(kw.get("store")).__name__))
            if init_error is not None:
                raise init_error

        monkeypatch.setattr(dist, "init_process_group", init)
        monkeypatch.setattr(dist, "all_reduce", lambda t: self.calls.append(("all_reduce", t.numel())))
        monkeypatch.setattr(dist, "destroy_process_group", lambda: self.calls.append(("destroy",)))


def _no_cpu_ranks(*args, **kwargs):
    raise AssertionError("report --full on one GPU must not start CPU gloo ranks")


def test_full_report_on_one_gpu_checks_nccl_as_a_world_of_one(monkeypatch):
    from gpudoctor.probes import ProbeContext, distributed

    fakes = _OneGpuTorch(monkeypatch)
    monkeypatch.setattr(distributed, "launch_local", _no_cpu_ranks)
    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    result = distributed.run(ProbeContext(gpu=None, level="full"))
    assert result.status.value == "pass", result.findings
    assert [c[0] for c in fakes.calls] == ["init", "ones", "all_reduce", "destroy"]
    assert fakes.calls[0] == ("init", "nccl", 1, "HashStore") and fakes.calls[1] == ("ones", "cuda:0")
    assert {m.name: m.value for m in result.measurements}["nccl_version"] == "2.27.5"
    assert result.summary.startswith("NCCL 2.27.5 starts and all-reduces on the GPU")


def test_full_report_on_one_gpu_fails_when_nccl_cannot_start(monkeypatch):
    from gpudoctor.probes import ProbeContext, distributed

    _OneGpuTorch(monkeypatch, init_error=RuntimeError("NCCL error in: ... unhandled system error (run with NCCL_DEBUG=INFO)"))
    monkeypatch.setattr(distributed, "launch_local", _no_cpu_ranks)
    result = distributed.run(ProbeContext(gpu=None, level="full"))
    assert result.status.value == "fail"
    [finding] = result.findings
    assert finding.code == "nccl_init_failed" and "unhandled system error" in finding.summary
