"""Datasheet figures of common GPUs, matched by the name NVML and torch report.

Dense (non-sparse) peaks at boost clock, and memory bandwidth, with the source of each
row. The names each row must match are the exact strings the driver reports
(``nvidia-smi --query-gpu=name``, ``torch.cuda.get_device_name``); a test holds every
row to them. A name that matches no row gets no figure: an unknown variant must not
borrow a neighbour's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU model: dense (non-sparse) peaks at boost clock.

    ``fp16``/``bf16`` are tensor-core rates with FP32 accumulation (what torch uses);
    ``tf32`` is the TF32 tensor-core rate; ``fp32`` is the plain CUDA-core rate; ``fp8`` the
    dense FP8 tensor-core rate (Hopper and Ada data-centre parts: the datasheets give it with
    sparsity, halved here). None: the model has no such unit or the datasheet gives no figure.
    """

    model: str
    memory_bandwidth_gbs: float
    fp32: float | None
    tf32: float | None
    fp16: float | None
    bf16: float | None
    source: str
    fp8: float | None = None

    def peak_tflops(self, dtype: str) -> float | None:
        return getattr(self, dtype, None)


_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (sparse figures halved)"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (sparse figures halved)"
_GH200_DS = "NVIDIA GH200 Grace Hopper Superchip datasheet (sparse figures halved)"
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (sparse figures halved)"
_GA102 = "NVIDIA Ampere GA102 GPU architecture whitepaper, GeForce RTX 30 table (FP32-accumulate rates)"
_AD102 = "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 40 table (FP32-accumulate rates)"
_GEFORCE_SPEC = ("NVIDIA GeForce product specifications: FP32 = CUDA cores x boost clock x 2, memory = "
                 "data rate x bus width; tensor rates by the whitepapers' GeForce ratios")


def _geforce(model: str, fp32: float, bandwidth: float, source: str) -> GpuSpec:
    # GeForce Ampere/Ada: TF32 tensor = FP32 rate; FP16/BF16 tensor with FP32 accumulate = 2x FP32
    # (both whitepapers' tables; FP16-accumulate is twice that again, torch does not use it).
    return GpuSpec(model, bandwidth, fp32, fp32, 2 * fp32, 2 * fp32, source)


#: (regular expression on the normalised device name, spec). First match wins, so more
#: specific names come first. Names as NVML / torch report them, e.g. "NVIDIA H100 80GB HBM3"
#: (SXM), "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA GeForce RTX 4090";
#: tests/probes/test_measure_timing.py lists the exact strings every row must match. Data-centre names
#: (and device ids) as the driver reports them: the compatible-GPU table in the README of NVIDIA's
#: open-gpu-kernel-modules; figures from each row's datasheet, named in its ``source``.
DATASHEET: list[tuple[str, GpuSpec]] = [
    # Grace Hopper superchips: "NVIDIA GH200 480GB" and "NVIDIA GH200 120GB" (device 2342, 96 GB HBM3),
    # "NVIDIA GH200 144G HBM3e" (device 2348)
    (r"\bgh200\b.*\b(144gb?|hbm3e)\b", GpuSpec("GH200 144GB HBM3e", 4900, 67, 494.5, 989.5, 989.5, _GH200_DS, fp8=1979)),
    (r"\bgh200\b", GpuSpec("GH200 96GB HBM3", 4000, 67, 494.5, 989.5, 989.5, _GH200_DS, fp8=1979)),
    (r"\bh200 nvl\b", GpuSpec("H200 NVL", 4800, 60, 417.5, 835.5, 835.5, _H200_DS, fp8=1670.5)),
    (r"\bh200\b", GpuSpec("H200 SXM", 4800, 67, 494.5, 989.5, 989.5, _H200_DS, fp8=1979)),
    (r"\bh100 nvl\b", GpuSpec("H100 NVL", 3900, 60, 417.5, 835.5, 835.5, _H100_DS, fp8=1670.5)),
    (r"\bh100\b.*\bpcie\b", GpuSpec("H100 PCIe", 2000, 51, 378, 756.5, 756.5, _H100_DS, fp8=1513)),
    # SXM5 boards: "NVIDIA H100 80GB HBM3" (device 2330), "... SXM5 ...", "... HBM3e", and the bare
    # "NVIDIA H100" (device 2339, an SXM5 board: the PCIe and NVL boards name their form factor),
    # held to the 80 GB SXM5 figures.
    (r"\bh100\b.*\b(sxm\d*|hbm3e?)\b|^h100$", GpuSpec("H100 SXM", 3350, 67, 494.5, 989.5, 989.5, _H100_DS, fp8=1979)),
    (r"\ba100\b.*\bsxm4?\b.*\b80gb\b", GpuSpec("A100 SXM4 80GB", 2039, 19.5, 156, 312, 312, _A100_DS)),
    (r"\ba100\b.*\b80gb\b.*\bpcie\b", GpuSpec("A100 PCIe 80GB", 1935, 19.5, 156, 312, 312, _A100_DS)),
    (r"\ba100\b.*\b40gb\b", GpuSpec("A100 40GB", 1555, 19.5, 156, 312, 312, _A100_DS)),
    (r"\ba10\b", GpuSpec("A10", 600, 31.2, 62.5, 125, 125, "NVIDIA A10 Tensor Core GPU datasheet")),
    (r"\bl4\b", GpuSpec("L4", 300, 30.3, 60, 121, 121, "NVIDIA L4 Tensor Core GPU datasheet (sparse figures halved)")),
    # T4: Turing has no TF32 or BF16 tensor cores; 65 TFLOP/s is its FP16/FP32 mixed-precision rate.
    (r"\bt4\b", GpuSpec("T4", 320, 8.1, None, 65, None, "NVIDIA T4 Tensor Core GPU datasheet")),
    (r"\bv100\b.*\bsxm2\b", GpuSpec("V100 SXM2", 900, 15.7, None, 125, None, "NVIDIA V100 Tensor Core GPU datasheet")),
    (r"\bv100\b.*\bpcie\b", GpuSpec("V100 PCIe", 900, 14, None, 112, None, "NVIDIA V100 Tensor Core GPU datasheet")),
    (r"\brtx 4090\b", _geforce("GeForce RTX 4090", 82.6, 1008, _AD102)),
    (r"\brtx 4080 super\b", _geforce("GeForce RTX 4080 SUPER", 52.2, 736, _GEFORCE_SPEC)),
    (r"\brtx 4080\b", _geforce("GeForce RTX 4080", 48.7, 716.8, _AD102)),
    (r"\brtx 4070 ti\b(?! super)", _geforce("GeForce RTX 4070 Ti", 40.1, 504, _GEFORCE_SPEC)),
    (r"\brtx 4070\b(?! ti| super)", _geforce("GeForce RTX 4070", 29.1, 504, _GEFORCE_SPEC)),
    (r"\brtx 3090 ti\b", _geforce("GeForce RTX 3090 Ti", 40.0, 1008, _GEFORCE_SPEC)),
    (r"\brtx 3090\b", _geforce("GeForce RTX 3090", 35.6, 936, _GA102)),
    (r"\brtx 3080 ti\b", _geforce("GeForce RTX 3080 Ti", 34.1, 912, _GEFORCE_SPEC)),
    (r"\brtx 3080\b(?! ti)", _geforce("GeForce RTX 3080", 29.8, 760, _GA102)),
    (r"\brtx 3070\b(?! ti)", _geforce("GeForce RTX 3070", 20.3, 448, _GEFORCE_SPEC)),
    (r"\brtx 3060\b(?! ti)", _geforce("GeForce RTX 3060", 12.7, 360, _GEFORCE_SPEC)),
]


def normalise_gpu_name(name: str) -> str:
    """'NVIDIA GeForce RTX 4090' -> 'geforce rtx 4090'; 'NVIDIA A100-SXM4-80GB' -> 'a100 sxm4 80gb'."""
    text = name.lower().replace("-", " ").replace("_", " ")
    text = re.sub(r"^(nvidia|tesla)\s+", "", text.strip())
    return re.sub(r"\s+", " ", text)


def lookup_gpu_spec(name: object) -> GpuSpec | None:
    """Datasheet figures for a device name as NVML or torch reports it, or None if unknown."""
    if not isinstance(name, str) or not name.strip():
        return None
    text = normalise_gpu_name(name)
    if re.search(r"\b(laptop|mobile|max q)\b", text):
        return None  # notebook parts share desktop names but run at a fraction of the power
    if re.search(r"\bmig\b", text):
        return None  # a MIG slice ("... MIG 1g.10gb") has a fraction of the SMs and bandwidth
    for pattern, spec in DATASHEET:
        if re.search(pattern, text):
            return spec
    return None


