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
