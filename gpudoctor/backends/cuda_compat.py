"""Does the NVIDIA driver support the CUDA version torch was built for? (no torch import)

One table and one finding builder, shared by the environment probe (which asks the
loaded torch) and the quick check (which reads torch's CUDA build from its
``version.py`` as text), so ``report``, ``report --quick``, the exporter and the TUI
header give the same verdict for the same driver and torch.

Sources:
- Minimum Linux driver per CUDA major version: CUDA Toolkit release notes, "CUDA Toolkit
  and Corresponding Driver Versions" (CUDA 11.x >= 450.80.02, 12.x >= 525.60.13,
  13.x >= 580.65.06). Within one major version, CUDA's minor-version compatibility lets a
  newer toolkit build run on an older driver of the same major, except for features that
  need the newer driver (PTX JIT of newer PTX among them): a warning, not a failure.
- Minor-version compatibility exists from CUDA 11 on. Before it each minor release had its own
  minimum driver (same table: 9.0 >= 384.81, 9.1 >= 390.46, 9.2 >= 396.26, 10.0 >= 410.48,
  10.1 >= 418.39, 10.2 >= 440.33), so a 10.1 build on a 10.0 driver does not start: a failure
  (pytorch/pytorch#31243: torch 1.3.0 for CUDA 10.1 on driver 410.48).
"""

from __future__ import annotations

import re

from gpudoctor.core.findings import STARTED_ANYWAY, finding
from gpudoctor.core.model import Finding

MIN_DRIVER_FOR_CUDA_MAJOR = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
# A PyTorch wheel index per CUDA major version (download.pytorch.org/whl/<tag>).
WHEEL_INDEX_FOR_CUDA_MAJOR = {11: "cu118", 12: "cu126", 13: "cu130"}
# Before CUDA 11 there is no minor-version compatibility: each minor release has its own minimum.
MIN_DRIVER_FOR_CUDA_BEFORE_11: dict[tuple[int, ...], str] = {(9, 0): "384.81", (9, 1): "390.46", (9, 2): "396.26",
                                                     (10, 0): "410.48", (10, 1): "418.39", (10, 2): "440.33"}
FIRST_MINOR_COMPATIBLE_CUDA = 11


def version_tuple(text: object) -> tuple[int, ...]:
    """'12.4' -> (12, 4); anything that is not text -> ()."""
    if not isinstance(text, str):
        return ()
    return tuple(int(x) for x in re.findall(r"\d+", text)[:3])


def driver_build_findings(driver: object, driver_cuda: object, torch_version: str,
                          cuda_build: object) -> list[Finding]:
    """Findings for a driver that supports CUDA up to ``driver_cuda`` against a torch built for
    ``cuda_build``: FAIL when the major version is too new for the driver, or a newer minor of
    a CUDA before 11 (no minor-version compatibility there); WARN for a newer minor of the same
    major from CUDA 11 on. Nothing when either side is unknown."""
    build = version_tuple(cuda_build)
    supported = version_tuple(driver_cuda)
    if not build or not supported:
        return []
    if supported[0] < build[0]:
        need = MIN_DRIVER_FOR_CUDA_MAJOR.get(build[0], "a newer driver")
        index = WHEEL_INDEX_FOR_CUDA_MAJOR.get(supported[0], "cu126")
        return [finding("driver_too_old", driver=driver, driver_cuda=driver_cuda, torch=torch_version,
                        cuda_build=cuda_build, need=need, major=supported[0], index=index)]
    if supported[:2] < build[:2] and build[0] < FIRST_MINOR_COMPATIBLE_CUDA:
        need = MIN_DRIVER_FOR_CUDA_BEFORE_11.get(build[:2], "a newer driver")
        return [finding("driver_too_old:before_11", driver=driver, driver_cuda=driver_cuda, torch=torch_version,
                        cuda_build=cuda_build, need=need)]
    if supported[:2] < build[:2]:
        return [finding("driver_older_than_build", driver_cuda=driver_cuda, cuda_build=cuda_build)]
    return []


def cuda_started(facts: object) -> bool:
    """torch's facts show CUDA running: is_available() True, at least one device, and not every
    device's properties failed."""
    if not isinstance(facts, dict) or facts.get("cuda_available") is not True:
        return False
    count = facts.get("device_count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return False
    devices = [d for d in facts.get("devices") or [] if isinstance(d, dict)]
    return not devices or not all(d.get("error") for d in devices)


def started_anyway(findings: list[Finding]) -> list[Finding]:
    """The driver-vs-build findings for a torch whose CUDA did start: the NVML-reported driver is not
    what CUDA ran on (a forward-compatibility libcuda in a container, or NVML from another driver
    install), so a driver too old becomes a warning and an older minor a pass, each saying so."""
    out = []
    for f in findings:
        if f.code in ("driver_too_old", "driver_older_than_build"):
            out.append(finding(f"{f.code}:started_anyway", device=f.device, summary=f.summary, why=f.why, fix=f.fix))
        else:
            out.append(f)
    return out


__all__ = ["STARTED_ANYWAY", "cuda_started", "started_anyway", "MIN_DRIVER_FOR_CUDA_MAJOR", "WHEEL_INDEX_FOR_CUDA_MAJOR", "MIN_DRIVER_FOR_CUDA_BEFORE_11", "version_tuple", "driver_build_findings"]
