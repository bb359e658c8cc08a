"""bench mnist advice in words that match its numbers (#12 item 4): accuracies compared only
between runs that learned, "starved" only above a stated wait share, speed-ups never "0.1x faster"."""

from __future__ import annotations

import io

from gpudoctor.workload import recommend as rec
from gpudoctor.workload.output import render_table


def run(device, mode, batch, workers, sps, wait=0.02, acc=0.95, util=None):
    return {"device": device, "mode": mode, "batch_size": batch, "workers": workers, "status": "ok",
            "samples_per_s": sps, "epoch_s": 5000 / sps, "data_wait_share": wait, "test_accuracy": acc,
            "gpu_util_mean_pct": util, "gpu_util_max_pct": util, "step_p50_ms": 1.0, "step_p95_ms": 2.0,
            "peak_allocated_bytes": None, "peak_reserved_bytes": None, "final_loss": 2.3,
            "device_memory_total_bytes": None}


def test_speed_phrase_never_says_a_fraction_faster():
    assert rec.speed_phrase(2.5) == "2.5x faster"
    assert rec.speed_phrase(0.1) == "10.0x slower"


def test_runs_at_chance_are_throughput_only_and_never_compared():
    runs = [run("cpu", "resident", 1000, None, 50000, acc=0.116), run("cpu", "dataloader", 64, 0, 8000, acc=0.176)]
    advice = rec.recommend(runs)
    text = " ".join(advice["reasons"])
    assert "throughput only" in text and "11.6%" in text
    assert "17.6%" not in text  # chance against chance is not weighed


def test_accuracy_gap_only_between_runs_that_learned():
    runs = [run("cpu", "resident", 20000, None, 90000, acc=0.62), run("cpu", "dataloader", 64, 0, 8000, acc=0.97),
            run("cpu", "tuned", 64, 2, 9000, acc=0.12)]
    text = " ".join(rec.recommend(runs)["reasons"])
    assert "62.0% held-out accuracy against 97.0%" in text


def test_slow_pipeline_that_hardly_waits_is_not_called_starved():
    runs = [run("cuda", "dataloader", 64, 0, 9000, wait=0.02), run("cuda", "resident", 64, None, 90000, wait=0.0)]
    advice = rec.recommend(runs)
    assert advice["starved"] is False
    assert "10.0x slower" in " ".join(advice["starved_reasons"])
    assert "0.1x" not in " ".join(advice["starved_reasons"])
    starved = rec.recommend([run("cuda", "dataloader", 64, 0, 9000, wait=0.15),
                             run("cuda", "resident", 64, None, 90000, wait=0.0)])
    assert starved["starved"] is True and "15% of the loop's time" in starved["starved_reasons"][0]


def test_quick_sweep_table_is_labelled_throughput_only_and_speedups_read_right():
    runs = [run("cpu", "resident", 1000, None, 50000, acc=0.11), run("cuda", "resident", 1000, None, 5000, acc=0.11)]
    doc = {"config": {"quick": True, "epochs": 1}, "dataset": {"train_samples": 5000, "source": "synthetic"},
           "runs": runs, "speedups": rec.speedups(runs), "recommendation": rec.recommend(runs), "notes": []}
    out = io.StringIO()
    render_table(doc, out, width=200)
    text = out.getvalue()
    assert "quick sweep: throughput only" in text
    assert "CUDA is 10.0x slower" in text and "0.1x" not in text
