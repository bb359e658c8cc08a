"""Write the hand-made FAULT-SCENARIO recordings used by the tests.

These are not readings of real hardware: each sets ``meta.hand_made = true``, names its
scenario, and has "handmade" in its file name. They exist only for faults that cannot be
provoked on demand (GPU lost, unsupported fields, ECC errors, a driver too old). Real
recordings come from ``gpudoctor record`` on a GPU machine and are named after the device.

Run: python tests/data/make_handmade.py   (rewrites the files next to this script)
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOST = {"__na__": "GpuIsLost"}
NS = {"__na__": "NotSupported"}


def _static(index: int = 0, **over):
    s = {
        "index": index, "name": "NVIDIA H100 80GB HBM3 (hand-made stand-in)",
        "uuid": f"GPU-0000000{index}-1111-2222-3333-444444444444", "serial": "HANDMADE-SERIAL",
        "pci_bus_id": f"0000:{0x18 + index * 0x20:02x}:00.0", "memory_total_bytes": 85520809984,
        "compute_capability": "9.0", "architecture": 9, "vbios_version": "handmade",
        "temperature_slowdown_c": 87, "temperature_shutdown_c": 92, "temperature_gpu_max_c": 85,
        "power_limit_w": 700.0, "power_default_limit_w": 700.0, "clock_sm_max_mhz": 1980,
        "clock_mem_max_mhz": 2619, "pcie_gen_max": 5, "pcie_gen_gpu_max": 5, "pcie_width_max": 16,
        "memory_bus_width_bits": 5120, "mig_mode": 0, "ecc_mode": 1, "num_fans": NS,
    }
    s.update(over)
    return s


def _sample(t: float = 0.0, **over):
    x = {
        "t": t, "gpu_util_pct": 0, "mem_util_pct": 0, "memory_used_bytes": 553648128,
        "memory_free_bytes": 84967161856, "memory_total_bytes": 85520809984, "temperature_c": 31,
        "power_w": 71.5, "power_limit_w": 700.0, "clock_sm_mhz": 345, "clock_mem_mhz": 2619,
        "clock_graphics_mhz": 345, "throttle_reasons": 1, "performance_state": 0,
        "pcie_gen_current": 1, "pcie_width_current": 16, "pcie_tx_kbps": 0, "pcie_rx_kbps": 0,
        "fan_pct": NS, "ecc_volatile_corrected": 0, "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_corrected": 0, "ecc_aggregate_uncorrected": 0, "retired_pages_sbe": NS,
        "retired_pages_dbe": NS, "retired_pages_pending": NS, "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0, "remapped_rows_pending": False, "remapped_rows_failure": False,
        "persistence_mode": 1, "compute_mode": 0,
    }
    x.update(over)
    return x


def _torch(**over):
    facts = {
        "importable": True, "version": "2.15.0+cu132", "cuda_build": "13.2", "hip_build": None,
        "git_version": "handmade", "debug_build": False, "python": "3.12.3",
        "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
        "cudnn_available": True, "cudnn_version": "9.26.0", "nccl_version": "2.30.7",
        "distributed_available": True, "mps_available": False, "xpu_available": False,
        "cuda_available": True, "device_count": 1, "cuda_warnings": [], "cuda_init_error": None,
        "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3 (hand-made stand-in)",
                     "compute_capability": "9.0", "sm_count": 132, "total_memory_bytes": 85520809984,
                     "l2_cache_bytes": 52428800, "uuid": "GPU-00000000-1111-2222-3333-444444444444",
                     "pci_bus_id": "0000:18:00.0", "is_integrated": False}],
        "torchvision": {"installed": True, "version": "0.30.0", "ops_ok": True, "error": None},
    }
    facts.update(over)
    return facts


def recording(scenario: str, note: str, *, static, samples, torch=None, status=None,
              driver="580.95.05", cuda="13.0"):
    return {
        "format": "gpudoctor-recording", "format_version": 1,
        "meta": {"created": "2026-11-21T00:00:00+00:00", "gpudoctor_version": "0.1.0",
                 "device_names": [s["name"] for s in static], "driver_version": driver,
                 "cuda_driver_version": cuda, "host": "handmade-host", "hand_made": True,
                 "scenario": scenario, "note": "HAND-MADE fault scenario, not a reading of real hardware. " + note,
                 "interval_s": 0.5},
        "nvml": {"status": status, "driver_version": driver if status is None else status,
                 "cuda_driver_version": cuda if status is None else status,
                 "nvml_version": "13.580.95.05" if status is None else status,
                 "device_count": len(static) if status is None else status,
                 "static": static, "samples": samples},
        "torch": torch,
        "host": {"hostname": "handmade-host", "os": "Linux 6.8.0", "python": "3.12.3", "cpu_model": "handmade",
                 "cpu_logical": 16, "cpu_physical": 8, "ram_total_bytes": 137438953472,
                 "ram_available_bytes": 120000000000},
    }


def scenarios():
    out = {}
    lost_sample = {k: (v if k == "t" else LOST) for k, v in _sample().items()}
    out["handmade_gpu_lost.json"] = recording(
        "gpu_lost", "The GPU's static facts were read (device listing works), then every reading answers NVML GpuIsLost, as after an Xid 79 mid-report.",
        static=[_static()],
        samples=[{"t": 0.0, "devices": [lost_sample], "processes": [LOST]}],
        torch=_torch())
    out["handmade_consumer_notsupported.json"] = recording(
        "notsupported_fields", "A consumer-style board: ECC, retirement, remapping, power limits and PCIe "
        "throughput answer NotSupported; fan speed is present. None of this is a fault.",
        static=[_static(name="NVIDIA GeForce RTX 4090 (hand-made stand-in)", compute_capability="8.9",
                        ecc_mode=NS, power_default_limit_w=NS, memory_total_bytes=25757220864, mig_mode=NS)],
        samples=[{"t": 0.0, "devices": [_sample(0.0, ecc_volatile_corrected=NS, ecc_volatile_uncorrected=NS,
                                                ecc_aggregate_corrected=NS, ecc_aggregate_uncorrected=NS,
                                                remapped_rows_correctable=NS, remapped_rows_uncorrectable=NS,
                                                remapped_rows_pending=NS, remapped_rows_failure=NS,
                                                pcie_tx_kbps=NS, pcie_rx_kbps=NS, fan_pct=30,
                                                memory_total_bytes=25757220864)],
                  "processes": [[]]}],
        torch=None)
    out["handmade_hardware_faults.json"] = recording(
        "hardware_faults", "One GPU hot and throttled by hardware slowdown under load, with uncorrectable ECC "
        "errors, a pending row remap and a x8 PCIe link on a x16 slot.",
        static=[_static()],
        samples=[{"t": 0.0, "devices": [_sample(0.0, gpu_util_pct=97, temperature_c=90, power_w=690.0,
                                                clock_sm_mhz=990, throttle_reasons=0x8 | 0x4, pcie_gen_current=5,
                                                pcie_width_current=8, ecc_volatile_uncorrected=2,
                                                ecc_aggregate_uncorrected=2, remapped_rows_pending=True,
                                                remapped_rows_uncorrectable=1)],
                  "processes": [[{"pid": 4242, "type": "compute", "gpu_memory_bytes": 70000000000,
                                  "sm_util_pct": 97}]]}],
        torch=_torch())
    out["handmade_driver_too_old.json"] = recording(
        "driver_too_old", "A driver that supports CUDA 12.4 with a torch built for CUDA 13.2, on a V100 "
        "(compute capability 7.0) that this torch has no kernels for.",
        static=[_static(name="Tesla V100-SXM2-32GB (hand-made stand-in)", compute_capability="7.0",
                        memory_total_bytes=34359738368)],
        samples=[{"t": 0.0, "devices": [_sample(0.0)], "processes": [[]]}],
        torch=_torch(cuda_available=False, device_count=0, devices=[],
                     cuda_init_error="RuntimeError: The NVIDIA driver on your system is too old (found version 12040)."),
        driver="550.54.15", cuda="12.4")
    out["handmade_torchvision_mismatch.json"] = recording(
        "torchvision_mismatch", "torch 2.13.0+cpu (the local CPU wheel) with torchvision 0.28.0 from PyPI: "
        "torchvision's operators fail to register.",
        static=[], samples=[], status={"__na__": "LibraryNotFound"},
        torch=_torch(version="2.13.0+cpu", cuda_build=None, arch_list=[], cudnn_available=False,
                     cudnn_version=None, nccl_version=None, cuda_available=False, device_count=0, devices=[],
                     torchvision={"installed": True, "version": "0.28.0", "ops_ok": False,
                                  "error": "RuntimeError: operator torchvision::nms does not exist"}))
    return out


def main() -> None:
    for name, data in scenarios().items():
        (HERE / name).write_text(json.dumps(copy.deepcopy(data), indent=1) + "\n", encoding="utf-8")
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
