"""Write the hand-made recordings used by the TUI and watch tests.

These are NOT measurements. They follow the recording format of
gpudoctor/backends/replay.py and exist for two reasons:

* fault scenarios that cannot be produced on demand on real hardware (a GPU falling
  off the bus mid-session, NVML going away, fields the driver does not support);
* a two-GPU stand-in for the normal display tests until a real recording made with
  `gpudoctor record` on a GPU machine is committed (then the tests should switch to it).

Every file says so in its name ("handmade") and in meta.hand_made / meta.scenario.
Run: python tests/data/make_handmade_recordings.py   (rewrites the files next to it)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent
GiB = 2**30


def na(reason: str) -> dict[str, str]:
    return {"__na__": reason}


def meta(scenario: str, names: list[str], driver: str) -> dict:
    return {
        "created": "2026-11-21T05:30:00+00:00",
        "gpudoctor_version": "0.1.0",
        "device_names": names,
        "driver_version": driver,
        "cuda_driver_version": "12.8",
        "host": "handmade",
        "hand_made": True,
        "scenario": scenario,
        "interval_s": 1.0,
    }


def static(index: int, name: str, *, memory_gib: float, power_limit: float, sm_max: int, mem_max: int,
           fans: int | dict, ecc: int | dict, cc: str, arch: int) -> dict:
    return {
        "index": index, "name": name,
        "uuid": f"GPU-0000000{index}-1111-2222-3333-44444444444{index}",
        "serial": f"HANDMADE-{index}",
        "pci_bus_id": f"0000:{0x17 + 0x50 * index:02x}:00.0",
        "memory_total_bytes": int(memory_gib * GiB),
        "compute_capability": cc, "architecture": arch, "vbios_version": "92.00.45.00.01",
        "temperature_slowdown_c": 87, "temperature_shutdown_c": 92, "temperature_gpu_max_c": 85,
        "power_limit_w": power_limit, "power_default_limit_w": power_limit,
        "clock_sm_max_mhz": sm_max, "clock_mem_max_mhz": mem_max,
        "pcie_gen_max": 4, "pcie_gen_gpu_max": 4, "pcie_width_max": 16, "memory_bus_width_bits": 5120,
        "mig_mode": 0 if not fans else na("NotSupported"), "ecc_mode": ecc, "num_fans": fans,
    }


def sample(*, util: float, mem_util: float, used_gib: float, total_gib: float, temp: float, power: float,
           limit: float, sm: int, mem: int, reasons: int, pstate: int, rx_kbps, tx_kbps, fan, ecc) -> dict:
    used = int(used_gib * GiB)
    total = int(total_gib * GiB)
    return {
        "t": 0.0,
        "gpu_util_pct": int(round(util)), "mem_util_pct": int(round(mem_util)),
        "memory_used_bytes": used, "memory_free_bytes": total - used, "memory_total_bytes": total,
        "temperature_c": int(round(temp)), "power_w": round(power, 3), "power_limit_w": limit,
        "clock_sm_mhz": sm, "clock_mem_mhz": mem, "clock_graphics_mhz": sm,
        "throttle_reasons": reasons, "performance_state": pstate,
        "pcie_gen_current": 4, "pcie_width_current": 16,
        "pcie_tx_kbps": tx_kbps, "pcie_rx_kbps": rx_kbps, "fan_pct": fan,
        "ecc_volatile_corrected": ecc, "ecc_volatile_uncorrected": ecc,
        "ecc_aggregate_corrected": ecc, "ecc_aggregate_uncorrected": ecc,
        "retired_pages_sbe": ecc if isinstance(ecc, dict) else 0,
        "retired_pages_dbe": ecc if isinstance(ecc, dict) else 0,
        "retired_pages_pending": ecc if isinstance(ecc, dict) else 0,
        "remapped_rows_correctable": ecc if isinstance(ecc, dict) else 0,
        "remapped_rows_uncorrectable": ecc if isinstance(ecc, dict) else 0,
        "remapped_rows_pending": ecc if isinstance(ecc, dict) else False,
        "remapped_rows_failure": ecc if isinstance(ecc, dict) else False,
        "persistence_mode": 1, "compute_mode": 0,
    }


def all_na(reason: str, template: dict) -> dict:
    return {k: (v if k == "t" else na(reason)) for k, v in template.items()}


def recording(meta_: dict, statics: list[dict], samples: list[dict], status=None, count=None) -> dict:
    return {
        "format": "gpudoctor-recording", "format_version": 1,
        "meta": meta_,
        "nvml": {
            "status": status,
            "driver_version": meta_["driver_version"] if status is None else status,
            "cuda_driver_version": meta_["cuda_driver_version"] if status is None else status,
            "nvml_version": "12.570.86.15" if status is None else status,
            "device_count": len(statics) if count is None else count,
            "static": statics,
            "samples": samples,
        },
        "torch": None,
        "host": {"hostname": "handmade", "os": "Linux 6.8.0", "python": "3.11.9", "cpu_model": "handmade",
                 "cpu_logical": 32, "ram_total_bytes": 256 * GiB, "ram_available_bytes": 200 * GiB},
    }


def two_gpu_training() -> dict:
    """GPU 0 trains (busy, power-capped now and then), GPU 1 sits idle; datacenter GPUs without fans."""
    name = "NVIDIA A100-SXM4-40GB"
    statics = [static(i, name, memory_gib=40, power_limit=400.0, sm_max=1410, mem_max=1215, fans=0, ecc=1,
                      cc="8.0", arch=7) for i in range(2)]
    samples = []
    for k in range(30):
        wave = math.sin(k / 3.0)
        busy = sample(util=88 + 10 * wave, mem_util=41 + 6 * wave, used_gib=31.2 + 0.2 * wave, total_gib=40,
                      temp=58 + k * 0.3, power=330 + 60 * wave, limit=400.0, sm=1410 if wave < 0.6 else 1305,
                      mem=1215, reasons=0x4 if wave >= 0.6 else 0, pstate=0,
                      rx_kbps=int(900_000 + 300_000 * wave), tx_kbps=int(60_000 + 20_000 * wave),
                      fan=na("NotSupported"), ecc=0)
        idle = sample(util=0, mem_util=0, used_gib=0.4, total_gib=40, temp=31, power=52.5, limit=400.0,
                      sm=210, mem=1215, reasons=0x1, pstate=0, rx_kbps=0, tx_kbps=0,
                      fan=na("NotSupported"), ecc=0)
        busy["t"] = idle["t"] = float(k)
        procs0 = [
            {"pid": 424242, "type": "compute", "gpu_memory_bytes": int(30.4 * GiB), "sm_util_pct": int(85 + 10 * wave),
             "user": "alice", "command": "python train.py --batch-size 256", "cpu_pct": 182.0 + 10 * wave,
             "host_memory_bytes": int(11.3 * GiB)},
            {"pid": 424300, "type": "compute", "gpu_memory_bytes": int(0.5 * GiB), "sm_util_pct": 3,
             "user": "bob", "command": "python -m jupyter notebook", "cpu_pct": 2.0,
             "host_memory_bytes": int(0.9 * GiB)},
        ]
        procs1 = [
            {"pid": 515151, "type": "compute", "gpu_memory_bytes": int(0.3 * GiB), "sm_util_pct": 0,
             "user": "carol", "command": "python eval.py", "cpu_pct": 0.5,
             "host_memory_bytes": int(2.1 * GiB)},
        ]
        samples.append({"t": float(k), "devices": [busy, idle], "processes": [procs0, procs1]})
    return recording(meta(
        "STAND-IN, hand-made: two A100-SXM4-40GB-like devices, GPU 0 training (utilisation 78-98 %, "
        "software power cap at times), GPU 1 idle; fans NotSupported as on SXM boards. Process "
        "entries carry user/command/cpu_pct/host_memory_bytes, which real recordings do not (yet) hold. "
        "Replace with a real `gpudoctor record` recording once a GPU machine is available.",
        [name, name], "570.86.15"), statics, samples)


def gpu_lost_midsession() -> dict:
    """One GPU works for 6 samples, then falls off the bus: every reading is GpuIsLost."""
    name = "NVIDIA GeForce RTX 3090"
    statics = [static(0, name, memory_gib=24, power_limit=350.0, sm_max=2100, mem_max=9751, fans=2,
                      ecc=na("NotSupported"), cc="8.6", arch=7)]
    samples = []
    for k in range(12):
        good = sample(util=95, mem_util=60, used_gib=20.5, total_gib=24, temp=74 + k, power=338.0, limit=350.0,
                      sm=1860, mem=9751, reasons=0x4, pstate=2, rx_kbps=1_200_000, tx_kbps=80_000, fan=71,
                      ecc=na("NotSupported"))
        good["t"] = float(k)
        if k < 6:
            procs = [{"pid": 31337, "type": "compute", "gpu_memory_bytes": int(20.1 * GiB), "sm_util_pct": 93,
                      "user": "dave", "command": "python finetune.py", "cpu_pct": 99.0,
                      "host_memory_bytes": int(6 * GiB)}]
            samples.append({"t": float(k), "devices": [good], "processes": [procs]})
        else:
            samples.append({"t": float(k), "devices": [all_na("GpuIsLost", good)],
                            "processes": [na("GpuIsLost")]})
    return recording(meta(
        "FAULT, hand-made: a GeForce RTX 3090 under load falls off the bus after sample 6 (Xid 79); "
        "from then on every NVML reading answers GpuIsLost.", [name], "550.120"), statics, samples)


def notsupported_fields() -> dict:
    """A GPU on which several fields are NotSupported; power goes NotSupported mid-session."""
    name = "NVIDIA GeForce GTX 1080"
    statics = [static(0, name, memory_gib=8, power_limit=na("NotSupported"), sm_max=1911, mem_max=5005,
                      fans=1, ecc=na("NotSupported"), cc="6.1", arch=4)]
    samples = []
    for k in range(10):
        s = sample(util=40 + 3 * k, mem_util=20, used_gib=3.2, total_gib=8, temp=61, power=120.0,
                   limit=na("NotSupported"), sm=1733, mem=5005, reasons=0, pstate=2,
                   rx_kbps=na("NotSupported"), tx_kbps=na("NotSupported"), fan=48, ecc=na("NotSupported"))
        if k >= 4:
            s["power_w"] = na("NotSupported")
        s["throttle_reasons"] = na("NotSupported") if k >= 7 else 0
        s["t"] = float(k)
        procs = [{"pid": 2024, "type": "compute", "gpu_memory_bytes": None, "sm_util_pct": None,
                  "user": "erin", "command": "python train_small.py", "cpu_pct": 45.0,
                  "host_memory_bytes": int(1.5 * GiB)}]
        samples.append({"t": float(k), "devices": [s], "processes": [procs]})
    return recording(meta(
        "FAULT, hand-made: an older GeForce on which PCIe throughput, ECC, the power limit and per-process "
        "memory are NotSupported; the power reading becomes NotSupported after sample 4 and the throttle "
        "reasons after sample 7.", [name], "470.256.02"), statics, samples)


def nvml_gone_midsession() -> dict:
    """Two GPUs; after 5 samples NVML answers Uninitialized for everything (driver reloaded)."""
    name = "NVIDIA L4"
    statics = [static(i, name, memory_gib=22.5, power_limit=72.0, sm_max=2040, mem_max=6251, fans=0, ecc=1,
                      cc="8.9", arch=8) for i in range(2)]
    samples = []
    for k in range(10):
        devs = []
        for i in range(2):
            s = sample(util=60 if i == 0 else 10, mem_util=30, used_gib=10, total_gib=22.5, temp=50, power=55.0,
                       limit=72.0, sm=1800, mem=6251, reasons=0, pstate=0, rx_kbps=10_000, tx_kbps=5_000,
                       fan=na("NotSupported"), ecc=0)
            s["t"] = float(k)
            devs.append(all_na("Uninitialized", s) if k >= 5 else s)
        procs = [na("Uninitialized")] * 2 if k >= 5 else [[], []]
        samples.append({"t": float(k), "devices": devs, "processes": procs})
    return recording(meta(
        "FAULT, hand-made: two L4 GPUs; after sample 5 the driver is reloaded under the session and NVML "
        "answers Uninitialized for every reading.", [name, name], "570.86.15"), statics, samples)


def no_nvml() -> dict:
    """A machine without the NVIDIA driver: NVML itself is LibraryNotFound."""
    m = meta("FAULT, hand-made: no NVIDIA driver on this machine; NVML initialisation answers "
             "LibraryNotFound.", [], "")
    m["driver_version"] = na("LibraryNotFound")
    m["cuda_driver_version"] = na("LibraryNotFound")
    rec = recording(m, [], [], status=na("LibraryNotFound"), count=na("LibraryNotFound"))
    return rec


FILES = {
    "handmade_two_gpu_training_standin.json": two_gpu_training,
    "handmade_gpu_lost_midsession.json": gpu_lost_midsession,
    "handmade_notsupported_fields.json": notsupported_fields,
    "handmade_nvml_gone_midsession.json": nvml_gone_midsession,
    "handmade_no_nvml.json": no_nvml,
}


def main() -> None:
    for name, build in FILES.items():
        (HERE / name).write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {HERE / name}")


if __name__ == "__main__":
    main()
