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


# ------------------------------------------------- the advice a new user got from a full sweep (#"Is the GPU really busy?")
def test_a_full_sweep_is_not_told_to_run_without_quick():
    runs = [run("cpu", "resident", 1000, None, 50000, acc=0.2), run("cpu", "dataloader", 64, 0, 8000, acc=0.3)]
    full = " ".join(rec.recommend(runs, quick=False)["reasons"])
    assert "throughput only" in full and "--quick" not in full and "--epochs" in full
    assert "run without --quick" in " ".join(rec.recommend(runs, quick=True)["reasons"])


def test_only_runs_that_learned_are_recommended():
    """Resident at batch 1000 reached 20.1 % (near chance) and was recommended over batch 64 at 98.5 %."""
    runs = [run("cpu", "resident", 1000, None, 50000, acc=0.201), run("cpu", "dataloader", 64, 0, 8000, acc=0.985)]
    advice = rec.recommend(runs)
    assert (advice["best"]["mode"], advice["best"]["batch_size"]) == ("dataloader", 64)
    assert advice["best"]["recommended"] and advice["summary"].startswith("use dataloader at batch 64")
    text = " ".join(advice["reasons"])
    assert "below the 50% accuracy floor" in text and "resident at batch 1000 (20.1%)" in text
    nobody = rec.recommend([run("cpu", "resident", 1000, None, 50000, acc=0.201)])
    assert not nobody["best"]["recommended"] and nobody["summary"].startswith("nothing to recommend")


def test_one_starvation_threshold_for_starved_and_keeps_up():
    """Called "starved" at 12 % wait (slow against resident) while "keeps up" at 17 %: one
    threshold, STARVED_WAIT_SHARE, now decides both."""
    runs = [run("cuda", "dataloader", 64, 0, 9000, wait=0.12), run("cuda", "tuned", 1000, 2, 60000, wait=0.17),
            run("cuda", "resident", 64, None, 90000, wait=0.0), run("cuda", "resident", 1000, None, 95000, wait=0.0),
            run("cuda", "tuned", 64, 2, 30000, wait=0.04)]
    advice = rec.recommend(runs)
    reasons = advice["starved_reasons"]
    assert advice["starved"] is True and set(advice["starved_runs"]) == {"dataloader batch 64", "tuned batch 1000"}
    assert "17% of the loop's time" in reasons[0] and "(starved: 10% or more)" in reasons[0]
    assert any("tuned at batch 64 with 2 workers keeps up (waits 4% of the time, below 10%)" in r for r in reasons)
    assert not any("keeps up" in r and ("12%" in r or "17%" in r) for r in reasons)
    # below the threshold, however slow against resident: slower, not starved
    fed = rec.recommend([run("cuda", "dataloader", 64, 0, 9000, wait=0.09), run("cuda", "resident", 64, None, 90000)])
    assert fed["starved"] is False and "10.0x slower" in " ".join(fed["starved_reasons"])


def test_repeats_that_disagree_more_than_the_lead_are_not_told_apart():
    """Two quick runs of one configuration differed 7x in samples/s: a 1.2x lead between two
    configurations means nothing then, and nothing is recommended."""
    noisy = [run("cpu", "tuned", 64, 0, 7000), run("cpu", "tuned", 64, 0, 1000),
             run("cpu", "resident", 64, None, 5000), run("cpu", "resident", 64, None, 4500)]
    advice = rec.recommend(noisy)
    assert not advice["best"]["recommended"] and "not told apart" in advice["summary"]
    assert "differed by up to 7.00x" in " ".join(advice["reasons"])
    assert advice["variation"] == {"ratio": 7.0, "source": "repeated runs of one configuration"}
    steady = [run("cpu", "tuned", 64, 0, 1000), run("cpu", "tuned", 64, 0, 1050),
              run("cpu", "resident", 64, None, 5000), run("cpu", "resident", 64, None, 5100)]
    calm = rec.recommend(steady)
    assert calm["best"]["recommended"] and calm["summary"].startswith("use resident at batch 64")
    once = rec.recommend([run("cpu", "tuned", 64, 0, 1000), run("cpu", "resident", 64, None, 5000)])
    assert "run-to-run variation is unknown" in " ".join(once["reasons"])


def test_the_epochs_of_one_run_count_as_variation_when_nothing_was_repeated():
    runs = [dict(run("cpu", "tuned", 64, 0, 1000), epoch_times_s=[9.0, 1.0, 3.0]),
            run("cpu", "resident", 64, None, 1500)]
    advice = rec.recommend(runs)
    assert "not told apart" in advice["summary"] and "the epochs of one run differed by up to 3.00x" in " ".join(
        advice["reasons"])


def test_a_repeated_configuration_gets_one_starvation_verdict():
    """With --repeat, one repeat of tuned batch 64 waited 12 % and the other 3 %: it was listed
    as starved and as keeping up in the same advice. Its median (7.5 %) decides, once."""
    runs = [run("cpu", "tuned", 64, 0, 3000, wait=0.12), run("cpu", "tuned", 64, 0, 700, wait=0.03),
            run("cpu", "tuned", 1000, 0, 10000, wait=0.34), run("cpu", "tuned", 1000, 0, 8000, wait=0.20),
            run("cpu", "resident", 1000, None, 11000, wait=0.04)]
    advice = rec.recommend(runs)
    assert advice["starved_runs"] == ["tuned batch 1000"]
    text = " ".join(advice["starved_reasons"])
    assert "tuned at batch 64 with 0 workers keeps up (waits 8% of the time" in text
    assert "27% of the loop's time" in text  # tuned batch 1000: the median of 34 % and 20 %
