"""Number formats: which one cuBLAS really runs (TF32 overrides), and each format's error limits.

The correctness probe holds every result to two limits per format; the compute probe
drops the datasheet comparison when the environment changed the format a row names.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Mapping


@dataclass(frozen=True)
class Tf32Environment:
    """Environment variables that change what an "fp32" or "tf32" matmul really runs.

    - ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (set in NVIDIA's NGC PyTorch containers) makes
      cuBLAS use TF32 for fp32 matmuls whatever ``torch.backends.cuda.matmul.allow_tf32`` says.
    - ``NVIDIA_TF32_OVERRIDE=0`` stops cuBLAS/cuDNN from using TF32 at all.
    """

    fp32_runs_as_tf32: bool
    tf32_disabled: bool

    @property
    def note(self) -> str:
        parts = []
        if self.fp32_runs_as_tf32:
            parts.append("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1: fp32 matmuls run in TF32 (NGC containers set this)")
        if self.tf32_disabled:
            parts.append("NVIDIA_TF32_OVERRIDE=0: TF32 is disabled, 'tf32' matmuls run in plain fp32")
        return "; ".join(parts)


def tf32_environment(environ: Mapping[str, str] | None = None) -> Tf32Environment:
    env = os.environ if environ is None else environ
    forced = env.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "").strip() not in ("", "0")
    disabled = env.get("NVIDIA_TF32_OVERRIDE", "").strip() == "0"
    # NVIDIA_TF32_OVERRIDE=0 wins: cuBLAS will not use TF32 even when torch asks for it.
    return Tf32Environment(fp32_runs_as_tf32=forced and not disabled, tf32_disabled=disabled)



# --------------------------------------------------------------------------- error limits
# Unit roundoff (half the spacing of numbers near 1) of each format.
UNIT_ROUNDOFF: dict[str, float] = {
    "float64": 2.0 ** -53,
    "float32": 2.0 ** -24,
    "tf32": 2.0 ** -11,      # 10 explicit mantissa bits
    "float16": 2.0 ** -11,
    "bfloat16": 2.0 ** -8,
}

#: For each checked mode: (input format, accumulation format, output format).
MATMUL_FORMATS: dict[str, tuple[str, str, str]] = {
    "fp32": ("float32", "float32", "float32"),
    "tf32": ("tf32", "float32", "float32"),
    "fp16": ("float16", "float32", "float16"),
    "bf16": ("bfloat16", "float32", "bfloat16"),
}

#: Norm-wise relative error above which a result is wrong (||C - C_ref||_F / ||C_ref||_F).
#: Correct hardware lands near sqrt(k)*u_acc + u_in + u_out, orders of magnitude below these.
NORMWISE_LIMIT: dict[str, float] = {
    "fp32": 1e-5,
    "tf32": 5e-3,
    "fp16": 5e-3,
    "bf16": 3e-2,
}


def componentwise_tolerance(mode: str, k: int, safety: float = 2.0) -> float:
    """Bound on |C - C_ref| / (|A| @ |B|) for a length-``k`` dot product in ``mode``.

    Rounding-error analysis (Higham, *Accuracy and Stability of Numerical Algorithms*,
    section 3.1) bounds a computed dot product by gamma_k * (|a| . |b|) with
    gamma_k ~ k*u. We allow 2u per step for truncating accumulators, the rounding of the
    inputs to ``tf32`` inside the tensor cores (2u_in: both factors), and the final
    rounding of the output; ``safety`` doubles it. Correct hardware cannot exceed it;
    a flipped high bit or a wrong kernel does by orders of magnitude.
    """
    fmt_in, fmt_acc, fmt_out = MATMUL_FORMATS[mode]
    u_acc = UNIT_ROUNDOFF[fmt_acc]
    u_in = UNIT_ROUNDOFF[fmt_in] if fmt_in == "tf32" else 0.0  # fp16/bf16 inputs are rounded by us
    u_out = UNIT_ROUNDOFF[fmt_out]
    return safety * (2 * k * u_acc + 2 * u_in + u_out)


@dataclass
class ErrorCheck:
    mode: str
    normwise: float | None
    componentwise: float | None
    normwise_limit: float
    componentwise_limit: float
    nonfinite: int

    @property
    def ok(self) -> bool:
        return (self.nonfinite == 0 and self.normwise is not None and self.componentwise is not None
                and math.isfinite(self.normwise) and math.isfinite(self.componentwise)
                and self.normwise <= self.normwise_limit and self.componentwise <= self.componentwise_limit)

    def to_dict(self) -> dict[str, Any]:
        def clean(v: float | None) -> float | None:
            return v if v is not None and math.isfinite(v) else None
        return {"mode": self.mode, "normwise": clean(self.normwise), "componentwise": clean(self.componentwise),
                "normwise_limit": self.normwise_limit, "componentwise_limit": self.componentwise_limit,
                "nonfinite": self.nonfinite, "ok": self.ok}


#: Element-wise fp32 a*b + c against float64: at most two roundings, each <= u relative to
#: |a*b| + |c|; twice that is the limit (norm-wise and per element).
ELEMENTWISE_NORMWISE_LIMIT = 1e-6
ELEMENTWISE_COMPONENTWISE_LIMIT = 4 * UNIT_ROUNDOFF["float32"]


def judge_elementwise(*, normwise: float, componentwise: float, nonfinite: int) -> ErrorCheck:
    return ErrorCheck("fp32_elementwise", float(normwise), float(componentwise), ELEMENTWISE_NORMWISE_LIMIT,
                      ELEMENTWISE_COMPONENTWISE_LIMIT, int(nonfinite))


def judge_errors(mode: str, k: int, *, normwise: float, componentwise: float, nonfinite: int) -> ErrorCheck:
    """Compare measured errors with the limits for ``mode``; NaN/Inf never pass."""
    return ErrorCheck(mode, float(normwise), float(componentwise), NORMWISE_LIMIT[mode],
                      componentwise_tolerance(mode, k), int(nonfinite))



# --------------------------------------------------------------------------- TF32 switches
def uses_fp32_precision_api(torch: ModuleType) -> bool:
    """torch 2.9+ has ``fp32_precision`` ("tf32"/"ieee"/"none") per backend; there the legacy
    ``allow_tf32`` and ``set_float32_matmul_precision`` print a deprecation warning, and once a
    process mixed the two APIs, reading the legacy ones raises."""
    try:
        torch.backends.cuda.matmul.fp32_precision  # noqa: B018 - reading it is the test (it may raise)
        return True
    except (AttributeError, RuntimeError):
        return False


class Fp32Precision:
    """Run fp32 matmuls (and, with ``conv=True``, cuDNN convolutions) in TF32 or in IEEE fp32,
    and put the switch back as found: ``fp32_precision`` where torch has it, the legacy
    ``allow_tf32`` only on older torch."""

    def __init__(self, torch: ModuleType, tf32: bool, *, conv: bool = False) -> None:
        self.torch = torch
        self.tf32 = tf32
        self.new_api = uses_fp32_precision_api(torch)
        self.owners = [torch.backends.cuda.matmul] + ([torch.backends.cudnn.conv if self.new_api
                                                      else torch.backends.cudnn] if conv else [])
        self.saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> "Fp32Precision":
        name = "fp32_precision" if self.new_api else "allow_tf32"
        value: Any = ("tf32" if self.tf32 else "ieee") if self.new_api else self.tf32
        for owner in self.owners:
            self.saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, value)
        return self

    def __exit__(self, *exc: object) -> None:
        while self.saved:
            owner, name, value = self.saved.pop()
            setattr(owner, name, value)


def matmul_tf32_on(torch: ModuleType) -> bool:
    """Whether fp32 matmuls run in TF32 as the program set torch (nothing set: no)."""
    if uses_fp32_precision_api(torch):
        value = torch.backends.cuda.matmul.fp32_precision
        if value == "none":  # the backend follows the generic setting
            value = getattr(torch.backends, "fp32_precision", "none")
        return value == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32) or torch.get_float32_matmul_precision() != "highest"
