"""The NCCL path on real GPUs (marked ``gpu``; skips cleanly without CUDA).

On a machine with >= 2 GPUs: NCCL all-reduce, DDP agreement, the peer-access matrix,
NVLink state and the DataParallel smoke test. With one GPU: auto falls back to gloo on
CPU and says why NCCL and the multi-GPU checks were skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def run_cli(tmp_path, *argv):
    run = subprocess.run([sys.executable, "-m", "gpudoctor", "distributed", "--json", *argv],
                         capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert run.returncode in (0, 3), run.stderr[-3000:]
    return json.loads(run.stdout)["results"][0]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least 2 GPUs")
def test_nccl_on_every_gpu(tmp_path):
    result = run_cli(tmp_path, "--backend", "nccl", "--sizes", "1M,64M,256M", "--timeout", "300")
    assert result["status"] in ("pass", "warn"), result["findings"]
    assert result["details"]["backend"] == "nccl"
    assert result["details"]["world_size"] == torch.cuda.device_count()
    rows = result["details"]["allreduce"]
    assert len(rows) == 3 and all(row["busbw_GBps"] > 0 for row in rows)
    node = result["details"]["nodes"][0]
    n = torch.cuda.device_count()
    assert len(node["peer_access"]) == n and all(len(row) == n for row in node["peer_access"])
    modes = _compute_modes(n)
    if any(m not in (0, None) for m in modes):  # exclusive or prohibited: skipped with the reason
        assert "compute mode" in node["dataparallel"]["skipped"], (modes, node["dataparallel"])
        assert "dataparallel_failed" not in {f["code"] for f in result["findings"]}
    else:
        assert node["dataparallel"]["ok"], node["dataparallel"]
    assert not any(f["code"] in ("ranks_disagree", "ddp_gradients_wrong", "allreduce_wrong_result")
                   for f in result["findings"])


@pytest.mark.skipif(torch.cuda.device_count() != 1, reason="the one-GPU case")
def test_one_gpu_falls_back_to_gloo_and_says_why(tmp_path):
    result = run_cli(tmp_path, "--sizes", "64K,1M")
    codes = {f["code"]: f for f in result["findings"]}
    assert result["details"]["backend"] == "gloo"
    assert "only 1 CUDA device visible" in codes["nccl_skipped"]["summary"]
    assert codes["multi_gpu_skipped"]["status"] == "skip"


def _compute_modes(count: int) -> list:
    from gpudoctor.backends import NvmlBackend, is_na
    from gpudoctor.backends.visibility import visible_nvml_indices

    gpu = NvmlBackend()
    try:
        visible = visible_nvml_indices(gpu)
        if is_na(visible):
            return [None] * count
        return [None if is_na(m) else int(m) for m in (gpu.compute_mode(i) for i in visible[:count])]
    finally:
        gpu.close()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least 2 GPUs")
def test_node_checks_run_dataparallel_in_default_mode_and_skip_it_otherwise():
    from gpudoctor.probes._distributed_worker import node_checks

    n = torch.cuda.device_count()
    modes = _compute_modes(n)
    alone = node_checks(torch, local_ranks=1)  # no other rank holds a GPU: always attempted
    assert "skipped" not in alone["dataparallel"]
    shared = node_checks(torch, local_ranks=n)
    if all(m in (0, None) for m in modes):
        assert shared["dataparallel"]["ok"], shared["dataparallel"]
    else:
        assert "compute mode" in shared["dataparallel"]["skipped"]
