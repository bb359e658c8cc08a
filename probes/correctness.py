"""correctness: the device's arithmetic against a float64 CPU reference (silent data corruption).

Fresh random inputs each run (the seed is in the report, so a failure can be replayed).
Inputs are rounded to the tested format first, so the reference sees exactly what the
device sees and only the device's own arithmetic is judged:

- matmul in fp32, tf32, fp16 and bf16 (2048 x 512 @ 512 x 2048 by default: more output
  tiles than any GPU has SMs, so every SM computes part of it);
- element-wise fp32 ``a * b + c`` over 4 Mi elements.

Two limits per format (values and reasoning in :mod:`gpudoctor.probes._precision`): a rounding-error
bound per element that correct hardware cannot exceed, and a norm-wise relative error far
above what correct hardware shows. NaN or Inf never passes; any excess is a ``fail``. The
same matmul is also run twice: identical inputs must give bit-identical results (cuBLAS is
deterministic on one device), else ``fail``.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpudoctor.core import findings
from gpudoctor.core.model import ProbeResult

from . import Probe, ProbeContext, _gpu, _wording
from ._measuring import measure_each_device
from ._precision import Fp32Precision, Tf32Environment, judge_elementwise, judge_errors, tf32_environment

if TYPE_CHECKING:  # torch is an optional extra: imported for its types only
    import torch as _torch

MODES = ("fp32", "tf32", "fp16", "bf16")
MATMUL_SHAPE = (2048, 2048, 512)  # m, n, k
ELEMENTS = 4 << 20


def _dtype(torch: ModuleType, mode: str) -> _torch.dtype:
    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[mode]


class _MatmulPrecision:
    """Set torch's TF32 and reduced-precision-reduction switches for one mode; restore them
    exactly as found.

    Each reduced-precision-reduction setting is two flags (reduced precision, split-K);
    reading the attribute gives only the first, and writing a bool resets the second to
    True, so both are saved and written back as a pair. TF32 goes through
    :class:`Fp32Precision` (``fp32_precision`` where torch has it, else ``allow_tf32``), so
    the legacy and new APIs are never mixed.
    """

    _REDUCTIONS = ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")

    def __init__(self, torch: ModuleType, mode: str) -> None:
        self.torch = torch
        self.m = torch.backends.cuda.matmul
        self.mode = mode
        self.saved: dict[str, Any] = {}

    def _read(self, name: str) -> Any:
        value = getattr(self.m, name)
        if name in self._REDUCTIONS:
            try:
                return (value, getattr(self.m, f"{name}_split_k"))
            except AttributeError:  # torch without the split-K flag: a bool is the whole setting
                return value
        return value

    def __enter__(self) -> None:
        self.tf32 = Fp32Precision(self.torch, self.mode == "tf32")
        self.tf32.__enter__()
        for name in self._REDUCTIONS:
            try:
                self.saved[name] = self._read(name)
            except (AttributeError, RuntimeError):
                continue
        for name in self._REDUCTIONS:  # split-K partial sums in fp16/bf16 would void the fp32-accumulation bound
            if name in self.saved:
                setattr(self.m, name, False)

    def __exit__(self, *exc: object) -> None:
        for name in self._REDUCTIONS:
            if name in self.saved and self._read(name) != self.saved[name]:
                setattr(self.m, name, self.saved[name])
        self.tf32.__exit__(*exc)


def check_matmul(torch: ModuleType, device: _torch.device | str, mode: str, m: int, n: int, k: int,
                 generator: _torch.Generator, environment: Tf32Environment | None = None) -> dict[str, Any]:
    """One matmul on ``device`` against float64 on the CPU. ``device`` may be "cpu" (tests).

    ``environment``: the TF32 overrides in force for cuBLAS (:func:`tf32_environment`),
    which decide the format a CUDA matmul really runs and so the limits it is held to.
    """
    dtype = _dtype(torch, mode)
    a = torch.randn(m, k, dtype=torch.float64, generator=generator).to(dtype)
    b = torch.randn(k, n, dtype=torch.float64, generator=generator).to(dtype)
    a64, b64 = a.double(), b.double()
    reference = a64 @ b64
    # |a_i| . |b_j| <= ||a_i|| ||b_j||: a rigorous per-element scale, cheaper than |A| @ |B|
    scale = torch.outer(a64.norm(dim=1), b64.norm(dim=0))
    with _MatmulPrecision(torch, mode):
        a_dev, b_dev = a.to(device), b.to(device)
        first = a_dev @ b_dev
        second = a_dev @ b_dev
        repeat_identical = bool(torch.equal(first, second))
        result = first.double().cpu()
    judged_as = mode
    environment = environment or Tf32Environment(False, False)
    if mode == "fp32" and environment.fp32_runs_as_tf32:
        judged_as = "tf32"  # cuBLAS really ran TF32: hold it to TF32's rounding limits
    elif mode == "tf32" and environment.tf32_disabled:
        judged_as = "fp32"  # cuBLAS really ran fp32: the tighter limits apply
    out = _judge(torch, judged_as, k, result, reference, scale, repeat_identical)
    out["mode"] = mode
    if judged_as != mode:
        out["judged_as"] = judged_as
        out["judged_as_why"] = environment.note
    return out


def check_elementwise(torch: ModuleType, device: _torch.device | str, count: int,
                      generator: _torch.Generator) -> dict[str, Any]:
    """fp32 a * b + c on ``device`` against float64 computed from the same fp32 inputs."""
    a, b, c = (torch.randn(count, dtype=torch.float64, generator=generator).float() for _ in range(3))
    a64, b64, c64 = a.double(), b.double(), c.double()
    reference = a64 * b64 + c64
    scale = (a64 * b64).abs() + c64.abs()
    result = (a.to(device) * b.to(device) + c.to(device)).double().cpu()
    return _judge(torch, "fp32_elementwise", 1, result, reference, scale, True)


def _judge(torch: ModuleType, mode: str, k: int, result: _torch.Tensor, reference: _torch.Tensor,
           scale: _torch.Tensor, repeat_identical: bool) -> dict[str, Any]:
    nonfinite = int((~torch.isfinite(result)).sum().item())
    if nonfinite:
        normwise = componentwise = float("inf")
    else:
        diff = result - reference
        normwise = float(diff.norm() / reference.norm())
        componentwise = float((diff.abs() / scale.clamp_min(1e-300)).max())
    if mode == "fp32_elementwise":
        check = judge_elementwise(normwise=normwise, componentwise=componentwise, nonfinite=nonfinite)
    else:
        check = judge_errors(mode, k, normwise=normwise, componentwise=componentwise, nonfinite=nonfinite)
    out = check.to_dict()
    out["repeat_identical"] = repeat_identical
    out["ok"] = check.ok and repeat_identical
    return out


def run_checks(torch: ModuleType, device: _torch.device | str, *, seed: int, m: int | None = None, n: int | None = None,
               k: int | None = None, elements: int | None = None,
               modes: tuple[str, ...] = MODES,
               environment: Tf32Environment | None = None) -> list[dict[str, Any]]:
    m = m or MATMUL_SHAPE[0]
    n = n or MATMUL_SHAPE[1]
    k = k or MATMUL_SHAPE[2]
    elements = elements or ELEMENTS
    generator = torch.Generator().manual_seed(seed)
    rows = [check_matmul(torch, device, mode, m, n, k, generator, environment) for mode in modes]
    rows.append(check_elementwise(torch, device, elements, generator))
    for row in rows:
        row["shape"] = [m, n, k] if row["mode"] != "fp32_elementwise" else [elements]
    return rows


def _probe_device(ctx: ProbeContext, r: ProbeResult, torch: ModuleType, dev: _gpu.Device, budget_s: float) -> None:
    # one random seed per report (in it, so a failure can be replayed), offset per device
    seed = r.details.setdefault("seed", int.from_bytes(os.urandom(6), "little")) + dev.index
    modes = tuple(m for m in MODES if m != "bf16" or dev.compute_capability >= (8, 0))
    rows = run_checks(torch, _gpu.torch_device(torch, dev), seed=seed, modes=modes, environment=tf32_environment())
    r.details.setdefault("checks", {})[str(dev.index)] = rows
    for row in rows:
        r.measure(f"{row['mode']}_max_error", row["componentwise"], "", device=dev.index,
                  reference=row["componentwise_limit"],
                  note=f"norm-wise {row['normwise']:.2e} (limit {row['normwise_limit']:.0e})"
                  if row["normwise"] is not None else "result has NaN/Inf")
        if not row["ok"]:
            _wrong_results(r, dev, row, seed)
    _override_finding(r, dev, rows)
    if all(row["ok"] for row in rows):
        r.findings.append(findings.finding("results_correct", device=dev.index, gpu=dev.label,
                                           modes=", ".join(row["mode"] for row in rows)))


def _wrong_results(r: ProbeResult, dev: _gpu.Device, row: dict[str, Any], seed: int) -> None:
    if row["nonfinite"]:
        what = _wording.WRONG_NONFINITE.format(count=row["nonfinite"])
    elif not row["repeat_identical"] and row["componentwise"] is not None \
            and row["componentwise"] <= row["componentwise_limit"]:
        what = _wording.WRONG_NOT_REPEATABLE
    else:
        what = _wording.WRONG_ERROR.format(error=row["componentwise"], limit=row["componentwise_limit"],
                                           normwise=row["normwise"], normwise_limit=row["normwise_limit"])
    r.findings.append(findings.finding("wrong_results", device=dev.index, mode=row["mode"], gpu=dev.label, what=what,
                                       seed=seed))


def _override_finding(r: ProbeResult, dev: _gpu.Device, rows: list[dict[str, Any]]) -> None:
    overridden = [row for row in rows if row.get("judged_as")]
    if overridden:
        judged = ", ".join(_wording.JUDGED_AS.format(mode=row["mode"], judged_as=row["judged_as"]) for row in overridden)
        r.findings.append(findings.finding("tf32_override:correctness", device=dev.index,
                                           why=overridden[0]["judged_as_why"], judged=judged))


def _summary(r: ProbeResult) -> str:
    rows = [row for checks in r.details["checks"].values() for row in checks]
    return f"{sum(1 for row in rows if row['ok'])} of {len(rows)} checks correct"


def run(ctx: ProbeContext) -> ProbeResult:
    return measure_each_device(ctx, "correctness", _probe_device, _summary, target_s=0.0)


PROBE = Probe.define(__name__, run, "Device arithmetic against a float64 CPU reference (silent data corruption)",
                     level="full", uses_torch=True, timeout_s=20, order=45)
