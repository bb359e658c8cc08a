"""The measuring probes on a real GPU (marked ``gpu``; they skip cleanly without CUDA).

They check that each probe completes on the device, that its figures are physically
plausible and that the largest-allocation search leaves nothing allocated. They do not
assert the issue's targets (D2D >= 85 %, pinned H2D >= 80 %, bf16 >= 75 %): those are
benchmark figures, recorded by benchmarks/full_report.py, not pass/fail conditions here.
"""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _ctx(**kw):
    from gpudoctor.backends import NvmlBackend
    from gpudoctor.probes import ProbeContext

    return ProbeContext(gpu=NvmlBackend(), level="full", device=0, **kw)


def _call(name):
    from gpudoctor.probes import registry
    from gpudoctor.report.runner import call_probe

    result = call_probe(registry()[name], _ctx())
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["status"] in ("pass", "warn"), data
    return result, {m["name"]: m for m in data["measurements"]}


def _clear_cublas_workspaces():
    # cuBLAS keeps a workspace per handle and stream (32 MiB on sm_90) in the caching allocator
    # for the life of the process; it is not the probe's to free.
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    return clear is not None


def test_memory_probe_on_gpu():
    torch.cuda.init()
    _clear_cublas_workspaces()
    before = torch.cuda.memory_allocated(0)
    result, m = _call("memory")
    total = torch.cuda.get_device_properties(0).total_memory
    assert 0 < m["largest_allocation"]["value"] <= total
    assert result.details["largest_allocation"]["0"]["leftover_allocated"] == 0
    if _clear_cublas_workspaces():
        assert torch.cuda.memory_allocated(0) == before  # the probe ran in this process and freed everything
    else:
        assert torch.cuda.memory_allocated(0) - before <= 64 << 20  # at most cuBLAS workspaces remain
    walk = result.details["allocator_walk"]["0"]
    steps = {s["label"]: s for s in walk["steps"]}
    assert steps["freed_all"]["allocated"] <= steps["baseline"]["allocated"]
    assert steps["freed_all"]["reserved"] > steps["freed_all"]["allocated"]  # the cache holds on
    assert steps["empty_cache"]["reserved"] < steps["freed_all"]["reserved"]
    assert m["cuda_context"]["value"] is None or m["cuda_context"]["value"] > 0


def test_transfer_probe_on_gpu():
    result, m = _call("transfer")
    for name in ("pinned_h2d_bandwidth", "pinned_d2h_bandwidth", "pageable_h2d_bandwidth", "d2d_bandwidth"):
        assert m[name]["value"] > 0.1
        if m[name].get("reference"):
            # no copy beats its ceiling by more than measurement noise, unless the probe said why: a
            # C2C host link, or a link NVML misreports (a VM's virtual root port), both legitimate
            assert m[name]["value"] < 1.1 * m[name]["reference"] or {"host_link_not_pcie", "pcie_link_misreported"} & {
                f.code for f in result.findings}
    sizes = {r["bytes"] for r in result.details["rows"]["0"] if r["kind"] == "pinned_h2d"}
    assert min(sizes) == 1 << 20 and max(sizes) >= 256 << 20


def test_compute_probe_on_gpu():
    result, m = _call("compute")
    assert m["cpu_fp32_matmul"]["value"] > 0
    assert m["fp16_matmul"]["value"] > m["cpu_fp32_matmul"]["value"]
    if m["fp16_matmul"].get("reference"):
        assert m["fp16_matmul"]["value"] < 1.05 * m["fp16_matmul"]["reference"]


def test_correctness_probe_on_gpu():
    result, m = _call("correctness")
    assert result.status.value == "pass"
    assert m["fp32_max_error"]["value"] < m["fp32_max_error"]["reference"]


def test_full_report_on_gpu_is_valid_and_timed():
    from gpudoctor.report import runner

    probes = runner.select_probes(["memory", "correctness", "transfer", "compute"], "full")
    started = time.monotonic()
    report = runner.run_probes(probes, runner.RunSpec(level="full", device=0))
    elapsed = time.monotonic() - started
    assert all(r.status.value in ("pass", "warn") for r in report.results), [
        (r.probe, r.status, r.summary) for r in report.results]
    json.dumps(report.to_dict(), allow_nan=False)
    assert elapsed < 60, f"the four measuring probes took {elapsed:.1f} s"
