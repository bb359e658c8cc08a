"""fleet reads dcgm-exporter's windowed clock events (DCGM_EXP_CLOCK_EVENTS_COUNT), as it reads its
windowed Xid counts: a slowdown between two scrapes, which the reasons bit mask never shows, is a finding.

The series are written as dcgm-exporter's /metrics prints them (its clock-events collector, enabled by
the DCGM_EXP_CLOCK_EVENTS_COUNT row of its collectors file: one series per GPU and reason seen in the
window, labels ``clock_event`` and ``window_size_in_ms``, reason names gpu_idle, clocks_setting,
power_cap, hw_slowdown, sync_boost, sw_thermal, hw_thermal, hw_power_brake, display_clocks), then
given Prometheus's target labels, as a scrape does.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from support.fleet_doubles import FakeProm, vec, view_of

EXPOSITION = """\
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-5d2a6b0e-1c1f-4f0e-9d53-0b3c1f2a7e11",pci_bus_id="00000000:19:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-07"} 71
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-8e41c7d2-6a0b-4b8e-a1f4-3c9d2e5b6f70",pci_bus_id="00000000:3B:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-07"} 58
# HELP DCGM_FI_DEV_CLOCKS_EVENT_REASONS Current clock event reasons (bit mask of nvmlClocksEventReason*).
# TYPE DCGM_FI_DEV_CLOCKS_EVENT_REASONS gauge
DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="0",UUID="GPU-5d2a6b0e-1c1f-4f0e-9d53-0b3c1f2a7e11",pci_bus_id="00000000:19:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-07"} 4
DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="1",UUID="GPU-8e41c7d2-6a0b-4b8e-a1f4-3c9d2e5b6f70",pci_bus_id="00000000:3B:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-07"} 4
# HELP DCGM_EXP_CLOCK_EVENTS_COUNT Count of clock events within the user-specified time window (see clock-events-count-window-size param).
# TYPE DCGM_EXP_CLOCK_EVENTS_COUNT gauge
DCGM_EXP_CLOCK_EVENTS_COUNT{gpu="0",UUID="GPU-5d2a6b0e-1c1f-4f0e-9d53-0b3c1f2a7e11",pci_bus_id="00000000:19:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-07",clock_event="power_cap",window_size_in_ms="300000"} 5
DCGM_EXP_CLOCK_EVENTS_COUNT{gpu="0",UUID="GPU-5d2a6b0e-1c1f-4f0e-9d53-0b3c1f2a7e11",pci_bus_id="00000000:19:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-07",clock_event="hw_thermal",window_size_in_ms="300000"} 3
DCGM_EXP_CLOCK_EVENTS_COUNT{gpu="0",UUID="GPU-5d2a6b0e-1c1f-4f0e-9d53-0b3c1f2a7e11",pci_bus_id="00000000:19:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-07",clock_event="gpu_idle",window_size_in_ms="300000"} 1
DCGM_EXP_CLOCK_EVENTS_COUNT{gpu="1",UUID="GPU-8e41c7d2-6a0b-4b8e-a1f4-3c9d2e5b6f70",pci_bus_id="00000000:3B:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-07",clock_event="power_cap",window_size_in_ms="300000"} 12
"""


def scraped(text, instance, job="dcgm"):
    """The exposition's samples as Prometheus holds them after a scrape: with instance and job."""
    return [(dict(sample.labels, __name__=sample.name, instance=instance, job=job), sample.value)
            for family in text_string_to_metric_families(text) for sample in family.samples]


def fake_for(series):
    temps = [(labels, value) for labels, value in series if labels["__name__"] == "DCGM_FI_DEV_GPU_TEMP"]
    instances = sorted({labels["instance"] for labels, _ in series})
    return FakeProm([
        ("up", vec(*[({"instance": i, "job": "dcgm"}, 1) for i in instances])),
        ("{__name__=~", vec(*series)),
        ("last_over_time({__name__=~\"DCGM_FI_DEV_GPU_TEMP", vec(*temps)),
    ])


def test_a_slowdown_counted_in_the_window_warns_though_the_mask_shows_only_the_power_cap():
    rows = {r.gpu: r for r in view_of(fake_for(scraped(EXPOSITION, "gpu-node-07:9400"))).rows}
    hot, capped = rows["0"], rows["1"]
    # the mask says power cap only (4) at the scrape; the window saw 3 hardware thermal slowdowns
    assert hot.status == "warn"
    assert hot.reason == ("clocks held down in the last 5 min: power cap (5 time(s)), "
                          "thermal slowdown (hardware) (3 time(s))")
    assert "idle" not in hot.reason
    # the power cap alone, however often, is a loaded board's normal state
    assert capped.status == "pass" and capped.reason == "no problem seen"


def test_a_node_without_the_window_is_judged_by_the_mask_as_before():
    """The window is per node: a node that does not export it keeps the bit mask's judgement."""
    windowed = scraped(EXPOSITION, "gpu-node-07:9400")
    plain = [(dict(labels, instance="gpu-node-08:9400"), 0x8 if "CLOCKS_EVENT" in labels["__name__"] else value)
             for labels, value in windowed if labels["__name__"] != "DCGM_EXP_CLOCK_EVENTS_COUNT"]
    rows = {(r.instance, r.gpu): r for r in view_of(fake_for(windowed + plain)).rows}
    assert rows[("gpu-node-08:9400", "0")].reason == "clocks held down: hardware slowdown"
    assert rows[("gpu-node-08:9400", "1")].status == "warn"
    assert rows[("gpu-node-07:9400", "1")].status == "pass"  # its window has the power cap only


def test_a_clock_event_series_without_its_reason_is_left_out_with_why():
    """A series that lacks the ``clock_event`` label cannot be judged: left out, the reason kept."""
    broken = [(labels if labels["__name__"] != "DCGM_EXP_CLOCK_EVENTS_COUNT" or labels["clock_event"] != "hw_thermal"
               else {k: v for k, v in labels.items() if k != "clock_event"}, value)
              for labels, value in scraped(EXPOSITION, "gpu-node-07:9400")]
    import json

    from gpudoctor import fleet

    series, unreadable = fleet.parse_answer(json.dumps(vec(*broken)).encode())
    assert len(series) == len(broken) - 1
    assert any("DCGM_EXP_CLOCK_EVENTS_COUNT" in why and "'clock_event'" in why for why in unreadable), unreadable
    view = view_of(fake_for(broken))
    assert {r.gpu: r.status for r in view.rows} == {"0": "pass", "1": "pass"}
