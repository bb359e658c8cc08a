"""Write every hand-made file in tests/data: the one generator for them (tests check it).

These are not readings of real hardware. Each says so in its file name ("handmade") and inside
(``meta.hand_made = true`` and ``meta.scenario`` for recordings, ``hand_made`` at the top for
the other fixtures). They exist only for what cannot be provoked on demand on real hardware
(a GPU falling off the bus, NVML going away, fields the driver does not support, ECC errors, a
driver too old, allocator pressure), plus one stand-in, ``handmade_two_gpu_training_standin.json``
(two busy and idle A100-like GPUs for the display tests), kept until a real ``gpudoctor record``
recording from a GPU machine replaces it. Real recordings are named after the device and are
never written here.

The output is deterministic (fixed values, no clock, no randomness): a test regenerates every
file into a temporary directory and compares it byte for byte with the committed one.

Run: python tests/data/make_handmade.py [--out DIR]   (default: the directory of this script)
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
GiB = 2**30
MiB = 2**20


# --------------------------------------------------------------------------- single-sample fault scenarios
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


def _scenario_recording(scenario: str, note: str, *, static, samples, torch=None, status=None,
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


def single_sample_scenarios() -> dict:
    out = {}
    lost_sample = {k: (v if k == "t" else LOST) for k, v in _sample().items()}
    out["handmade_gpu_lost.json"] = _scenario_recording(
        "gpu_lost", "The GPU's static facts were read (device listing works), then every reading answers NVML GpuIsLost, as after an Xid 79 mid-report.",
        static=[_static()],
        samples=[{"t": 0.0, "devices": [lost_sample], "processes": [LOST]}],
        torch=_torch())
    out["handmade_consumer_notsupported.json"] = _scenario_recording(
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
    out["handmade_hardware_faults.json"] = _scenario_recording(
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
    out["handmade_driver_too_old.json"] = _scenario_recording(
        "driver_too_old", "A driver that supports CUDA 12.4 with a torch built for CUDA 13.2, on a V100 "
        "(compute capability 7.0) that this torch has no kernels for.",
        static=[_static(name="Tesla V100-SXM2-32GB (hand-made stand-in)", compute_capability="7.0",
                        memory_total_bytes=34359738368)],
        samples=[{"t": 0.0, "devices": [_sample(0.0)], "processes": [[]]}],
        torch=_torch(cuda_available=False, device_count=0, devices=[],
                     cuda_init_error="RuntimeError: The NVIDIA driver on your system is too old (found version 12040)."),
        driver="550.54.15", cuda="12.4")
    out["handmade_torchvision_mismatch.json"] = _scenario_recording(
        "torchvision_mismatch", "torch 2.13.0+cpu (the local CPU wheel) with torchvision 0.28.0 from PyPI: "
        "torchvision's operators fail to register.",
        static=[], samples=[], status={"__na__": "LibraryNotFound"},
        torch=_torch(version="2.13.0+cpu", cuda_build=None, arch_list=[], cudnn_available=False,
                     cudnn_version=None, nccl_version=None, cuda_available=False, device_count=0, devices=[],
                     torchvision={"installed": True, "version": "0.28.0", "ops_ok": False,
                                  "error": "RuntimeError: operator torchvision::nms does not exist"}))
    return out


# --------------------------------------------------------------------------- sessions over time


def _na(reason: str) -> dict[str, str]:
    return {"__na__": reason}


def _session_meta(scenario: str, names: list[str], driver: str) -> dict:
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


def _session_static(index: int, name: str, *, memory_gib: float, power_limit: float, sm_max: int, mem_max: int,
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
        "mig_mode": 0 if not fans else _na("NotSupported"), "ecc_mode": ecc, "num_fans": fans,
    }


def _session_sample(*, util: float, mem_util: float, used_gib: float, total_gib: float, temp: float, power: float,
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


def _gpus(count: int, name: str, **facts) -> list[dict]:
    """The static facts of ``count`` GPUs of one model (indices 0..count-1)."""
    return [_session_static(i, name, **facts) for i in range(count)]


def _tick(k: int, devices: list[dict], processes: list, **more) -> dict:
    """Sample ``k`` of a session, one second apart: every device reading and the sample carry t = k."""
    for device in devices:
        device["t"] = float(k)
    return {"t": float(k), "devices": devices, "processes": processes, **more}


def _all_na(reason: str, template: dict) -> dict:
    return {k: (v if k == "t" else _na(reason)) for k, v in template.items()}


def _session_recording(meta_: dict, statics: list[dict], samples: list[dict], status=None, count=None) -> dict:
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
    statics = _gpus(2, name, memory_gib=40, power_limit=400.0, sm_max=1410, mem_max=1215, fans=0, ecc=1,
                    cc="8.0", arch=7)
    samples = []
    for k in range(30):
        wave = math.sin(k / 3.0)
        busy = _session_sample(util=88 + 10 * wave, mem_util=41 + 6 * wave, used_gib=31.2 + 0.2 * wave, total_gib=40,
                               temp=58 + k * 0.3, power=330 + 60 * wave, limit=400.0, sm=1410 if wave < 0.6 else 1305,
                               mem=1215, reasons=0x4 if wave >= 0.6 else 0, pstate=0,
                               rx_kbps=int(900_000 + 300_000 * wave), tx_kbps=int(60_000 + 20_000 * wave),
                               fan=_na("NotSupported"), ecc=0)
        idle = _session_sample(util=0, mem_util=0, used_gib=0.4, total_gib=40, temp=31, power=52.5, limit=400.0,
                               sm=210, mem=1215, reasons=0x1, pstate=0, rx_kbps=0, tx_kbps=0,
                               fan=_na("NotSupported"), ecc=0)
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
        samples.append(_tick(k, [busy, idle], [procs0, procs1]))
    return _session_recording(_session_meta(
        "STAND-IN, hand-made: two A100-SXM4-40GB-like devices, GPU 0 training (utilisation 78-98 %, "
        "software power cap at times), GPU 1 idle; fans NotSupported as on SXM boards. Process "
        "entries carry user/command/cpu_pct/host_memory_bytes, which real recordings do not (yet) hold. "
        "Replace with a real `gpudoctor record` recording once a GPU machine is available.",
        [name, name], "570.86.15"), statics, samples)


def _gpm(*, sm, occupancy, tensor, dram, fp32, pcie_tx, pcie_rx) -> dict:
    """The GPM readings of one sample (percent, MiB/s; NVLink NotSupported: PCIe boards)."""
    return {"sm_active_pct": sm, "sm_occupancy_pct": occupancy, "tensor_active_pct": tensor,
            "tensor_hmma_active_pct": tensor, "dram_active_pct": dram, "fp64_active_pct": 0.0,
            "fp32_active_pct": fp32, "fp16_active_pct": 0.0, "gpm_pcie_tx_mibps": pcie_tx,
            "gpm_pcie_rx_mibps": pcie_rx, "nvlink_rx_mibps": _na("NotSupported"),
            "nvlink_tx_mibps": _na("NotSupported")}


def h100_gpm_small_kernels() -> dict:
    """Two H100 PCIe boards with GPM: GPU 0 busy 100 % of the time but with small fp32 kernels (SMs about
    10 % active, no tensor work) for 10 samples, then bf16 matrix math on the tensor cores; GPU 1 idle.
    The first sample has no previous GPM sample: its GPM readings are Warming."""
    name = "NVIDIA H100 PCIe"
    statics = _gpus(2, name, memory_gib=80, power_limit=350.0, sm_max=1755, mem_max=1593, fans=0, ecc=1,
                    cc="9.0", arch=9)
    warming = {key: _na("Warming") for key in _gpm(sm=0, occupancy=0, tensor=0, dram=0, fp32=0, pcie_tx=0,
                                                   pcie_rx=0)}
    samples = []
    for k in range(20):
        small = k < 10
        busy = _session_sample(util=100 if small else 97, mem_util=6 if small else 38, used_gib=12.5, total_gib=80,
                               temp=45 + k * 0.5, power=120.0 if small else 310.0, limit=350.0,
                               sm=1755, mem=1593, reasons=0, pstate=0, rx_kbps=850_000, tx_kbps=120_000,
                               fan=_na("NotSupported"), ecc=0)
        busy.update(_gpm(sm=9.0 + (k % 3), occupancy=5.0, tensor=0.0, dram=4.0, fp32=3.0, pcie_tx=117.2,
                         pcie_rx=830.1) if small else
                    _gpm(sm=86.0, occupancy=31.0, tensor=68.0, dram=41.0, fp32=9.0, pcie_tx=60.0, pcie_rx=410.0))
        idle = _session_sample(util=0, mem_util=0, used_gib=0.5, total_gib=80, temp=31, power=48.5, limit=350.0,
                               sm=345, mem=1593, reasons=0x1, pstate=0, rx_kbps=0, tx_kbps=0,
                               fan=_na("NotSupported"), ecc=0)
        idle.update(_gpm(sm=0.0, occupancy=0.0, tensor=0.0, dram=0.0, fp32=0.0, pcie_tx=0.0, pcie_rx=0.0))
        if k == 0:
            busy.update(warming)
            idle.update(warming)
        samples.append(_tick(k, [busy, idle], [[], []]))
    return _session_recording(_session_meta(
        "HAND-MADE GPM scenario, not a reading of real hardware: two H100 PCIe boards; GPU 0 busy 100 % with "
        "small fp32 kernels (SM activity 9-11 %, no tensor work) for 10 samples, then tensor-bound (SM 86 %, "
        "tensor 68 %); GPU 1 idle; the first sample's GPM readings are Warming; NVLink NotSupported.",
        [name, name], "580.95.05"), statics, samples)


def _mig_device(slot: int, gi: int, *, used_gib: float, sm_active, processes) -> dict:
    """One 3g.40gb MIG device of an H100 80GB as NVML gives it on its MIG handle: utilisation
    and energy NotSupported (energy is the whole GPU's only; no utilisation rates in MIG mode)."""
    return {"parent": 0, "slot": slot, "gpu_instance_id": gi, "compute_instance_id": 0,
            "uuid": f"MIG-{gi:08x}-5c1e-5b0e-9a39-012345678900", "name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
            "profile": "3g.40gb", "sm_count": 60, "memory_size_bytes": 40448 * 2**20,
            "memory_used_bytes": int(used_gib * GiB), "memory_total_bytes": 40448 * 2**20,
            "gpu_util_pct": _na("NotSupported"), "energy_mj": _na("NotSupported"), "sm_active_pct": sm_active,
            "processes": processes}


def h100_mig_two_slices() -> dict:
    """An H100 80GB in MIG mode with two 3g.40gb slices (GPU instances 1 and 2): two processes train on
    the first, the second is empty. In MIG mode NVML gives no utilisation rates (per slice or whole)
    and no whole-GPU GPM (read per GPU instance), and energy for the whole GPU only; the first sample's
    GPM readings are Warming."""
    name = "NVIDIA H100 80GB HBM3"
    static = _session_static(0, name, memory_gib=80, power_limit=700.0, sm_max=1980, mem_max=2619, fans=0, ecc=1,
                             cc="9.0", arch=9)
    static["mig_mode"] = 1
    samples = []
    for k in range(6):
        sample = _session_sample(util=100, mem_util=30, used_gib=12.5, total_gib=79.6, temp=44 + k, power=310.0,
                                 limit=700.0, sm=1980, mem=2619, reasons=0, pstate=0, rx_kbps=400_000,
                                 tx_kbps=60_000, fan=_na("NotSupported"), ecc=0)
        sample.update({key: _na("MIG mode: GPM is read per GPU instance") for key in _gpm(
            sm=0, occupancy=0, tensor=0, dram=0, fp32=0, pcie_tx=0, pcie_rx=0)})
        sample["gpu_util_pct"] = sample["mem_util_pct"] = _na("NotSupported")
        first_sm = _na("Warming") if k == 0 else 41.0 + k
        second_sm = _na("Warming") if k == 0 else 0.0
        procs = [{"pid": 4242, "type": "compute", "gpu_memory_bytes": 8 * GiB, "sm_util_pct": None},
                 {"pid": 4243, "type": "compute", "gpu_memory_bytes": 4 * GiB, "sm_util_pct": None}]
        mig = [_mig_device(0, 1, used_gib=12.0, sm_active=first_sm, processes=procs),
               _mig_device(2, 2, used_gib=0.0, sm_active=second_sm, processes=[])]
        samples.append(_tick(k, [sample], [_na("NoPermission")], mig=[mig]))
    return _session_recording(_session_meta(
        "HAND-MADE MIG scenario, not a reading of real hardware: one H100 80GB HBM3 in MIG mode with two "
        "3g.40gb slices (GPU instances 1 and 2, compute instance 0 each); two processes (8 and 4 GiB) on the "
        "first, which is 42-46 % SM-active, none on the second; whole-GPU process list NoPermission (not root); "
        "utilisation NotSupported for the GPU and per slice, energy NotSupported per slice; the first sample's "
        "GPM readings are Warming.",
        [name], "580.95.05"), [static], samples)


def gpu_lost_midsession() -> dict:
    """One GPU works for 6 samples, then falls off the bus: every reading is GpuIsLost."""
    name = "NVIDIA GeForce RTX 3090"
    statics = _gpus(1, name, memory_gib=24, power_limit=350.0, sm_max=2100, mem_max=9751, fans=2,
                    ecc=_na("NotSupported"), cc="8.6", arch=7)
    samples = []
    for k in range(12):
        good = _session_sample(util=95, mem_util=60, used_gib=20.5, total_gib=24, temp=74 + k, power=338.0, limit=350.0,
                               sm=1860, mem=9751, reasons=0x4, pstate=2, rx_kbps=1_200_000, tx_kbps=80_000, fan=71,
                               ecc=_na("NotSupported"))
        if k < 6:
            procs = [{"pid": 31337, "type": "compute", "gpu_memory_bytes": int(20.1 * GiB), "sm_util_pct": 93,
                      "user": "dave", "command": "python finetune.py", "cpu_pct": 99.0,
                      "host_memory_bytes": int(6 * GiB)}]
            samples.append(_tick(k, [good], [procs]))
        else:
            samples.append(_tick(k, [_all_na("GpuIsLost", good)], [_na("GpuIsLost")]))
    return _session_recording(_session_meta(
        "FAULT, hand-made: a GeForce RTX 3090 under load falls off the bus after sample 6 (Xid 79); "
        "from then on every NVML reading answers GpuIsLost.", [name], "550.120"), statics, samples)


def notsupported_fields() -> dict:
    """A GPU on which several fields are NotSupported; power goes NotSupported mid-session."""
    name = "NVIDIA GeForce GTX 1080"
    statics = _gpus(1, name, memory_gib=8, power_limit=_na("NotSupported"), sm_max=1911, mem_max=5005,
                    fans=1, ecc=_na("NotSupported"), cc="6.1", arch=4)
    samples = []
    for k in range(10):
        s = _session_sample(util=40 + 3 * k, mem_util=20, used_gib=3.2, total_gib=8, temp=61, power=120.0,
                            limit=_na("NotSupported"), sm=1733, mem=5005, reasons=0, pstate=2,
                            rx_kbps=_na("NotSupported"), tx_kbps=_na("NotSupported"), fan=48, ecc=_na("NotSupported"))
        if k >= 4:
            s["power_w"] = _na("NotSupported")
        s["throttle_reasons"] = _na("NotSupported") if k >= 7 else 0
        procs = [{"pid": 2024, "type": "compute", "gpu_memory_bytes": None, "sm_util_pct": None,
                  "user": "erin", "command": "python train_small.py", "cpu_pct": 45.0,
                  "host_memory_bytes": int(1.5 * GiB)}]
        samples.append(_tick(k, [s], [procs]))
    return _session_recording(_session_meta(
        "FAULT, hand-made: an older GeForce on which PCIe throughput, ECC, the power limit and per-process "
        "memory are NotSupported; the power reading becomes NotSupported after sample 4 and the throttle "
        "reasons after sample 7.", [name], "470.256.02"), statics, samples)


def nvml_gone_midsession() -> dict:
    """Two GPUs; after 5 samples NVML answers Uninitialized for everything (driver reloaded)."""
    name = "NVIDIA L4"
    statics = _gpus(2, name, memory_gib=22.5, power_limit=72.0, sm_max=2040, mem_max=6251, fans=0, ecc=1,
                    cc="8.9", arch=8)
    samples = []
    for k in range(10):
        devs = []
        for i in range(2):
            s = _session_sample(util=60 if i == 0 else 10, mem_util=30, used_gib=10, total_gib=22.5, temp=50, power=55.0,
                                limit=72.0, sm=1800, mem=6251, reasons=0, pstate=0, rx_kbps=10_000, tx_kbps=5_000,
                                fan=_na("NotSupported"), ecc=0)
            devs.append(_all_na("Uninitialized", s) if k >= 5 else s)
        samples.append(_tick(k, devs, [_na("Uninitialized")] * 2 if k >= 5 else [[], []]))
    return _session_recording(_session_meta(
        "FAULT, hand-made: two L4 GPUs; after sample 5 the driver is reloaded under the session and NVML "
        "answers Uninitialized for every reading.", [name, name], "570.86.15"), statics, samples)


def no_nvml() -> dict:
    """A machine without the NVIDIA driver: NVML itself is LibraryNotFound."""
    m = _session_meta("FAULT, hand-made: no NVIDIA driver on this machine; NVML initialisation answers "
             "LibraryNotFound.", [], "")
    m["driver_version"] = _na("LibraryNotFound")
    m["cuda_driver_version"] = _na("LibraryNotFound")
    rec = _session_recording(m, [], [], status=_na("LibraryNotFound"), count=_na("LibraryNotFound"))
    return rec


# --------------------------------------------------------------------------- exporter scenarios
def _exporter_static(index: int) -> dict:
    return {
        "index": index, "name": "NVIDIA A100-SXM4-40GB",
        "uuid": f"GPU-0000000{index}-1111-2222-3333-44444444444{index}", "serial": _na("NotSupported"),
        "pci_bus_id": f"0000:{0x07 + 8 * index:02x}:00.0", "memory_total_bytes": 40 * GiB,
        "compute_capability": "8.0", "architecture": 7, "vbios_version": "92.00.00.00.00",
        "temperature_slowdown_c": 92, "temperature_shutdown_c": 95, "temperature_gpu_max_c": 87,
        "power_limit_w": 400.0, "power_default_limit_w": 400.0, "clock_sm_max_mhz": 1410, "clock_mem_max_mhz": 1215,
        "pcie_gen_max": 4, "pcie_gen_gpu_max": 4, "pcie_width_max": 16, "memory_bus_width_bits": 5120,
        "mig_mode": 0, "ecc_mode": 1, "num_fans": _na("NotSupported"),
    }


def _exporter_sample(*, t: float, util: int, mem_util: int, used_gib: int, temp: int, power: float, reasons: int,
                     ecc_volatile: int, ecc_aggregate: int) -> dict:
    return {
        "t": t, "gpu_util_pct": util, "mem_util_pct": mem_util, "memory_used_bytes": used_gib * GiB,
        "memory_free_bytes": (40 - used_gib) * GiB, "memory_total_bytes": 40 * GiB, "temperature_c": temp,
        "power_w": power, "power_limit_w": 400.0, "clock_sm_mhz": 1410, "clock_mem_mhz": 1215,
        "clock_graphics_mhz": 1410, "throttle_reasons": reasons, "performance_state": 0, "pcie_gen_current": 4,
        "pcie_width_current": 16, "pcie_tx_kbps": 2048, "pcie_rx_kbps": 4096, "fan_pct": _na("NotSupported"),
        "ecc_volatile_corrected": ecc_volatile, "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_corrected": ecc_aggregate, "ecc_aggregate_uncorrected": 0, "retired_pages_sbe": 0,
        "retired_pages_dbe": 0, "retired_pages_pending": 0, "remapped_rows_correctable": 1,
        "remapped_rows_uncorrectable": 0, "remapped_rows_pending": False, "remapped_rows_failure": False,
        "persistence_mode": 1, "compute_mode": 0,
    }


def exporter_gpu_lost() -> dict:
    """Two A100s; GPU 1 is lost in the second sample; NVLink between them, one link down."""
    name = "NVIDIA A100-SXM4-40GB"
    first = [_exporter_sample(t=0.0, util=87, mem_util=43, used_gib=30, temp=64, power=312.5, reasons=0,
                              ecc_volatile=0, ecc_aggregate=5),
             _exporter_sample(t=0.0, util=85, mem_util=42, used_gib=29, temp=66, power=305.0, reasons=0x4,
                              ecc_volatile=3, ecc_aggregate=8)]
    second = [_exporter_sample(t=0.0, util=91, mem_util=45, used_gib=31, temp=65, power=330.0, reasons=0x4 | 0x20,
                               ecc_volatile=0, ecc_aggregate=5),
              _all_na("GpuIsLost", first[1])]
    second[1]["t"] = 1.0
    link = {"link": 0, "active": True, "version": 3, "remote_pci_bus_id": "0000:0f:00.0", "remote_type": "gpu"}
    return {
        "format": "gpudoctor-recording", "format_version": 1,
        "meta": {"created": "2026-11-21T05:40:00+00:00", "gpudoctor_version": "0.1.0", "device_names": [name, name],
                 "driver_version": "550.54.15", "cuda_driver_version": "12.4", "host": "handmade", "hand_made": True,
                 "scenario": "HAND-MADE fault scenario, not a real recording: two GPUs; GPU 1 falls off the bus "
                             "(every reading GpuIsLost) in the second sample; fan speed NotSupported (datacenter "
                             "board). Values are illustrative, not measured.",
                 "interval_s": 1.0, "duration_s": 1.0},
        "nvml": {"status": None, "driver_version": "550.54.15", "cuda_driver_version": "12.4",
                 "nvml_version": "12.550.54.15", "device_count": 2,
                 "static": [_exporter_static(0), _exporter_static(1)],
                 "samples": [{"t": 0.0, "devices": first, "processes": [[], []]},
                             {"t": 1.0, "devices": second, "processes": [[], _na("GpuIsLost")]}],
                 "nvlink": [[link, dict(link, link=1, active=False)], _na("GpuIsLost")]},
        "torch": None,
        "host": {"hostname": "handmade", "os": "Linux 6.1", "cpu_logical": 32},
    }


def exporter_nvml_missing() -> dict:
    """No NVIDIA driver: NVML is LibraryNotFound; the smallest recording the exporter serves."""
    missing = _na("LibraryNotFound")
    return {
        "format": "gpudoctor-recording", "format_version": 1,
        "meta": {"created": "2026-11-21T05:40:00+00:00", "hand_made": True, "host": "handmade",
                 "scenario": "HAND-MADE fault scenario: NVML library not found (driver not installed)",
                 "device_names": [], "driver_version": missing},
        "nvml": {"status": missing, "driver_version": missing, "cuda_driver_version": missing,
                 "nvml_version": missing, "device_count": missing, "static": [], "samples": []},
        "torch": None,
        "host": {"hostname": "handmade"},
    }


# --------------------------------------------------------------------------- other fixtures (not recordings)
def memory_walk() -> dict:
    """The memory probe's allocator walk, as the caching allocator's rounding rules give it (MiB)."""
    steps = [("baseline", 0, 0, 520), ("small_alloc", 18, 20, 540), ("small_free_alternate", 9, 20, 540),
             ("fragment_alloc", 17, 40, 560), ("big_alloc", 1041, 1064, 1584), ("big_free_half", 529, 1064, 1584),
             ("freed_all", 0, 1064, 1584), ("empty_cache", 0, 0, 520)]
    return {
        "hand_made": True,
        "scenario": "Hand-made: the memory probe's allocator walk as torch's caching allocator would report it "
                    "with 256 MiB big blocks (3 MiB tensors share one 20 MiB segment; the 8 MiB tensor needs a "
                    "new 20 MiB segment). Numbers follow the allocator's rounding rules, not a recording; replace "
                    "with a real report's details.allocator_walk when one exists.",
        "steps": [{"label": label, "allocated": allocated * MiB, "reserved": reserved * MiB,
                   "nvml_used": nvml_used * MiB} for label, allocated, reserved, nvml_used in steps],
    }


# --------------------------------------------------------------------------- writing
def builders() -> dict[str, Callable[[], Any]]:
    """Every hand-made file, by name."""
    single = single_sample_scenarios()
    files: dict[str, Callable[[], Any]] = {name: (lambda data=data: data) for name, data in single.items()}
    files.update({
        "handmade_two_gpu_training_standin.json": two_gpu_training,
        "handmade_gpu_lost_midsession.json": gpu_lost_midsession,
        "handmade_h100_gpm_small_kernels.json": h100_gpm_small_kernels,
        "handmade_h100_mig_two_slices.json": h100_mig_two_slices,
        "handmade_notsupported_fields.json": notsupported_fields,
        "handmade_nvml_gone_midsession.json": nvml_gone_midsession,
        "handmade_no_nvml.json": no_nvml,
        "exporter_gpu_lost_handmade.json": exporter_gpu_lost,
        "exporter_nvml_missing_handmade.json": exporter_nvml_missing,
        "memory_walk_handmade.json": memory_walk,
    })
    return files


def render(data: Any) -> str:
    return json.dumps(data, indent=1) + "\n"


def write_all(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in builders().items():
        path = directory / name
        path.write_text(render(build()), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="write every hand-made file of tests/data")
    parser.add_argument("--out", type=Path, default=HERE, help="directory to write to (default: next to this script)")
    args = parser.parse_args(argv)
    for path in write_all(args.out):
        print("wrote", path)


if __name__ == "__main__":
    main()
