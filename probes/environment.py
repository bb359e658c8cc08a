"""environment: is the software stack (driver, torch, CUDA, cuDNN, NCCL, torchvision) consistent?

Asks the libraries that are actually loaded (``torch.backends.cudnn.version()``), not
ldconfig. At ``--quick`` (and where torch is not installed) it answers from NVML, host
facts and torch's build read from torch/version.py as text (no torch import); the driver
against CUDA build check is the same code either way (:mod:`gpudoctor.backends.cuda_compat`).

Thresholds and their sources:
- Minimum Linux driver per CUDA major version: see :mod:`gpudoctor.backends.cuda_compat`.
- torchvision pairs: torchvision 0.(N+15) is built for torch 2.N (0.28 <-> 2.13, 0.29 <-> 2.14).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpudoctor.backends import fatbin
from gpudoctor.backends.cuda_driver import SYSTEM_NOT_READY, cause_of_error_text, code_of_error_text
from gpudoctor.core import findings
from gpudoctor.core.findings import fabric_not_completed
from gpudoctor.backends.host import environment_variables
from gpudoctor.backends.na import NA, is_na
from gpudoctor.backends.cuda_compat import cuda_started, driver_build_findings, started_anyway
from gpudoctor.core.model import Finding, ProbeResult, Status

from . import Probe, ProbeContext, _wording

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend
    from gpudoctor.backends.stack import Stack


def _torch_minor(version: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


# torch 1.0-1.3's torchvision (pytorch/vision's compatibility table); from 1.4 on 1.N <-> 0.(N+1).
_TORCHVISION_FOR_TORCH_1 = {0: "0.2", 1: "0.3", 2: "0.4", 3: "0.4"}
TORCHVISION_TABLE_URL = "https://github.com/pytorch/vision#installation"


def expected_torchvision(torch_version: str) -> str | None:
    """The torchvision minor series built for a torch release: 2.N <-> 0.(N+15), 1.N <-> 0.(N+1)
    from 1.4 (1.0-1.3 from the table); None when unknown."""
    tv = _torch_minor(torch_version)
    if tv is None:
        return None
    if tv[0] == 2:
        return f"0.{tv[1] + 15}"
    if tv[0] == 1:
        return f"0.{tv[1] + 1}" if tv[1] >= 4 else _TORCHVISION_FOR_TORCH_1.get(tv[1])
    return None


def torch_for_torchvision(torchvision_version: str) -> str | None:
    m = re.match(r"0\.(\d+)", torchvision_version or "")
    if not m or int(m.group(1)) < 5:
        return None
    minor = int(m.group(1))
    return f"2.{minor - 15}" if minor >= 15 else f"1.{minor - 1}"


def wheel_index(torch_version: str) -> str | None:
    """The download.pytorch.org index a torch with this local version came from ('2.2.1+cpu' ->
    .../whl/cpu, '+cu126' -> .../whl/cu126, '+rocm6.2' -> .../whl/rocm6.2); None for a plain
    (PyPI) version."""
    m = re.search(r"\+((?:cpu|cu\d+|rocm[\d.]+|xpu))(?:[.-]|$)", torch_version or "")
    return f"https://download.pytorch.org/whl/{m.group(1)}" if m else None


# The first CUDA release whose compiler targets each GPU generation (by compute capability major),
# and the PyTorch wheel index and release that first carried it: CUDA 12.8 / cu128 / torch 2.7 for
# Blackwell (sm_100, sm_120), CUDA 11.8 / cu118 / torch 2.0 for Hopper (sm_90), CUDA 11.0 for Ampere
# (sm_80 binaries also run on 8.6 and 8.9).
BUILD_FOR_NEW_GPU = {12: ("12.8", "cu128", "2.7"), 10: ("12.8", "cu128", "2.7"),
                     9: ("11.8", "cu118", "2.0"), 8: ("11.0", "cu126", None)}


def _capability(capability: str) -> tuple[int, int] | None:
    """'8.6' -> (8, 6); None when the text starts with no 'major.minor'."""
    m = re.match(r"(\d+)\.(\d+)", capability or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _targets(arch_list: list[str]) -> list[tuple[str, int, int, str]]:
    """(kind, major, minor, suffix) of each ``sm_XY`` / ``compute_XY`` entry of a torch arch list
    (suffix 'a' or 'f' for an arch-specific target, else ''); other entries are left out."""
    out = []
    for arch in arch_list or []:
        am = re.match(r"(sm|compute)_(\d+?)(\d)([af]?)$", arch)
        if am:
            out.append((am.group(1), int(am.group(2)), int(am.group(3)), am.group(4)))
    return out


def ptx_only(arch_list: list[str], capability: str) -> bool:
    """True when a GPU of ``capability`` runs torch only through PTX: a ``compute_XY`` at or below it
    is in the list, but no ``sm_XY`` binary that runs on it (same major, equal or lower minor; an
    arch-specific sm_XYa only on its own capability)."""
    cap = _capability(capability)
    if cap is None or not kernel_image_available(arch_list, capability):
        return False
    major, minor = cap
    for kind, amaj, amin, suffix in _targets(arch_list):
        if kind != "sm":
            continue
        if (suffix and (amaj, amin) == (major, minor)) or (not suffix and amaj == major and amin <= minor):
            return False
    return True


def kernel_image_fix(arch_list: list[str], capability: str, *, say_newer: bool = True) -> str:
    """What to install when torch has no kernel for ``capability``: a newer build for a GPU newer than
    every target in the list (naming the CUDA release and wheel index it needs; ``say_newer``: opening
    with "This GPU is newer than the build"), an older build for a GPU the build dropped."""
    words = _wording.KERNEL_IMAGE_FIX
    sm = "sm_" + capability.replace(".", "")
    cap = _capability(capability)
    targets = [(amaj, amin) for _kind, amaj, amin, _suffix in _targets(arch_list)]
    if cap and targets and cap > max(targets):
        need = BUILD_FOR_NEW_GPU.get(cap[0])
        if need:
            cuda, index, first = need
            since = words["newer_known_since"].format(first=first) if first else ""
            fix = words["newer_known"].format(cuda=cuda, sm=sm, index=index, since=since)
        else:
            fix = words["newer_unknown"].format(sm=sm)
        return words["newer"] + fix if say_newer else fix
    return words["dropped"].format(sm=sm)


# torch's words when it refuses the cuDNN it loaded (torch.backends.cudnn.version() raises them):
# 1.x/2.x "compiled  against (8, 7, 0) but found runtime version (8, 2, 4)", 1.12 "compiled against
# (8, 3, 2) but linked against (8, 0, 3)", 0.4/1.0 "compiled against 7102 but linked against 7600".
_CUDNN_REFUSED = re.compile(r"compiled\s+against\s+(\([\d,\s]+\)|\d+)\s+but\s+"
                            r"(?:found\s+runtime\s+version|linked\s+against)\s+(\([\d,\s]+\)|\d+)")


def _cudnn_text(raw: str) -> str:
    """'(8, 7, 0)' -> '8.7.0'; '7102' (cuDNN < 9's encoding) -> '7.1.2'."""
    if raw.startswith("("):
        return ".".join(re.findall(r"\d+", raw))
    n = int(raw)
    return f"{n // 1000}.{(n % 1000) // 100}.{n % 100}" if n < 10000 else f"{n // 10000}.{(n % 10000) // 100}.{n % 100}"


def cudnn_versions(facts: dict[str, Any]) -> tuple[str | None, str | None, bool]:
    """(the cuDNN torch was compiled against, the one it loaded, whether torch refused it), from
    torch's facts: the two versions asked from torch._C._cudnn, else read from the error that
    ``torch.backends.cudnn.version()`` raised."""
    compiled, loaded = facts.get("cudnn_compiled_version"), facts.get("cudnn_runtime_version")
    version = facts.get("cudnn_version")
    refused = _CUDNN_REFUSED.search(version.reason) if is_na(version) else None
    if refused:
        compiled = compiled if isinstance(compiled, str) else _cudnn_text(refused.group(1))
        loaded = loaded if isinstance(loaded, str) else _cudnn_text(refused.group(2))
    return (compiled if isinstance(compiled, str) else None, loaded if isinstance(loaded, str) else None,
            refused is not None)


def cudnn_compatible(compiled: str, loaded: str) -> bool | None:
    """torch's own rule: the same major version, and from cuDNN 7 on a loaded minor at or above the
    compiled one (before 7, the same minor). None when either version is unreadable."""
    c, l = [tuple(int(x) for x in re.findall(r"\d+", v)[:2]) for v in (compiled, loaded)]
    if len(c) < 2 or len(l) < 2:
        return None
    if c[0] != l[0]:
        return False
    return l[1] >= c[1] if l[0] >= 7 else l[1] == c[1]


def kernel_image_available(arch_list: list[str], capability: str) -> bool | None:
    """Can a torch built for ``arch_list`` run kernels on a device of ``capability`` ('8.6')?

    Real binaries (sm_XY) run on the same major with an equal or higher minor; PTX
    (compute_XY) JIT-compiles for any equal or newer capability. Arch-specific targets
    (sm_90a) run only on exactly that capability.
    """
    cap = _capability(capability)
    if cap is None or not arch_list:
        return None
    major, minor = cap
    for kind, amaj, amin, suffix in _targets(arch_list):
        if suffix:
            if (amaj, amin) == (major, minor):
                return True
            continue
        if kind == "sm" and amaj == major and amin <= minor:
            return True
        if kind == "compute" and (amaj, amin) <= (major, minor):
            return True
    return False


def run(ctx: ProbeContext) -> ProbeResult:
    r = ProbeResult("environment")
    _host_facts(r, ctx)
    gpu = ctx.gpu
    nvml_na, driver, driver_cuda = _driver(r, ctx)
    facts = ctx.torch_facts()
    if is_na(facts):
        r.details["torch"] = None
        return _without_torch(r, ctx, facts.reason, driver, driver_cuda)
    r.details["torch"] = facts
    if not facts.get("importable"):
        r.findings.append(findings.finding("torch_import_failed", error=facts.get("import_error")))
        return r.settle("torch does not import")
    version, cuda_build = _torch_build(r, facts, nvml_na)
    # driver vs torch's CUDA build (the same check as --quick's)
    driver_findings = driver_build_findings(driver, driver_cuda, version, cuda_build)
    r.findings.extend(started_anyway(driver_findings) if cuda_started(facts) else driver_findings)
    count = gpu.device_count() if nvml_na is None else nvml_na
    _cuda_start(r, facts, cuda_build, count, gpu)
    _cudnn(r, facts, version)
    _kernel_images(r, gpu, facts, version, count)
    _extensions(r, ctx, _capabilities(gpu, facts, count))
    _torchvision(r, facts, version)
    summary = f"torch {version}"
    if cuda_build:
        summary += f" (CUDA {cuda_build})"
    if isinstance(facts.get("cudnn_version"), str):
        summary += f", cuDNN {facts['cudnn_version']}"
    summary += ", driver " + (driver if isinstance(driver, str) else "unavailable")
    if ctx.python:  # report --python: name the environment that was checked
        summary += f"; checked with {ctx.python}"
    return r.settle(summary)


def _host_facts(r: ProbeResult, ctx: ProbeContext) -> None:
    host = ctx.host_facts()
    r.measure("python", host.get("python"))
    r.measure("os", host.get("os"))
    r.measure("cpu", f"{host.get('cpu_model')} ({host.get('cpu_logical')} threads)")
    ram = host.get("ram_total_bytes")
    r.measure("ram_total", None if is_na(ram) else ram, "B")
    env = environment_variables()
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF"):
        r.measure(name, env.get(name) if env.get(name) is not None else "(unset)")
    r.details["environment_variables"] = env


def _driver(r: ProbeResult, ctx: ProbeContext) -> tuple[NA | None, str | NA, str | NA]:
    """The NVIDIA driver as NVML sees it: (why NVML is unavailable or None, driver, its CUDA version);
    where NVML cannot start, the stack's files (ctx.stack()) name the cause."""
    gpu = ctx.gpu
    nvml_na = gpu.status()
    driver = gpu.driver_version() if nvml_na is None else nvml_na
    driver_cuda = gpu.cuda_driver_version() if nvml_na is None else nvml_na
    r.measure("nvidia_driver", None if is_na(driver) else driver,
              note="" if not is_na(driver) else driver.reason)
    r.measure("driver_cuda_version", None if is_na(driver_cuda) else driver_cuda,
              note="highest CUDA version the driver supports" if not is_na(driver_cuda) else driver_cuda.reason)
    if nvml_na is not None:
        r.findings.append(_driver_unavailable(nvml_na.reason, ctx.stack()))
    return nvml_na, driver, driver_cuda


def _driver_unavailable(reason: str, stack: Stack | NA) -> Finding:
    """Why NVML cannot start: the cause the stack's files name (probes/_stack.py), else NVML's reason
    in words, with what the PCI bus says of an NVIDIA device where that matters."""
    from ._stack import nvml_failure  # only where NVML failed: not on a working node's --quick path

    named = nvml_failure(reason, stack)
    if named is not None:
        return named
    code = findings.NVML_UNUSABLE.get(reason, "nvidia_driver_unavailable")
    seen = ""
    if reason in ("LibraryNotFound", "DriverNotLoaded") and not is_na(stack):
        pci = stack.nvidia_pci
        if is_na(pci):
            found = findings.finding(code, reason=reason, pci=findings.PCI_UNREADABLE)
            found.fix = findings.PCI_UNREADABLE_FIX + findings.clause(found.fix)
            return found
        if pci:
            seen = findings.PCI_NVIDIA_SEEN.format(count=len(pci), where=", ".join(pci[:4]))
    return findings.finding(code, reason=reason, pci=seen)


def _torch_build(r: ProbeResult, facts: dict[str, Any], nvml_na: NA | None) -> tuple[str, str | None]:
    """torch's build and libraries; a CPU-only build is a finding. Returns (version, CUDA build)."""
    version = facts.get("version", "")
    cuda_build = facts.get("cuda_build")
    r.measure("torch", version)
    r.measure("torch_cuda_build", cuda_build or "none (CPU-only build)")
    if facts.get("hip_build"):
        r.measure("torch_hip_build", facts["hip_build"])
    cudnn = facts.get("cudnn_version")
    r.measure("cudnn", cudnn if facts.get("cudnn_available") is True and isinstance(cudnn, str) else None,
              note="not available" if facts.get("cudnn_available") is not True
              else (cudnn.reason if is_na(cudnn) else ""))
    r.measure("nccl", facts.get("nccl_version"), note="" if facts.get("nccl_version") else "not built in")
    r.measure("mps_available", facts.get("mps_available") is True)
    r.measure("xpu_available", facts.get("xpu_available") is True)
    r.measure("cuda_available", facts.get("cuda_available") is True)

    if not cuda_build and not facts.get("hip_build"):
        r.findings.append(findings.finding("torch_cpu_only_build", status=Status.FAIL if nvml_na is None else Status.WARN,
                                           version=version))
    return version, cuda_build


def _cuda_start(r: ProbeResult, facts: dict[str, Any], cuda_build: str | None, count: int | NA,
                gpu: GpuBackend | None = None) -> None:
    """CUDA not starting although a driver and devices are there."""
    if (cuda_build and facts.get("cuda_available") is not True and isinstance(count, int) and count > 0
            and not any(f.code == "driver_too_old" for f in r.findings)):
        reason = facts.get("cuda_init_error") or "; ".join(facts.get("cuda_warnings") or []) or "unknown reason"
        known = cause_of_error_text(reason)
        if code_of_error_text(reason) == SYSTEM_NOT_READY and gpu is not None:
            # 802 on an NVSwitch board: NVML's view of the fabric registration names the cause
            known = cause_of_error_text(reason, fabric_not_completed(gpu.static(n) for n in range(count)))
        if known:
            r.findings.append(findings.finding("cuda_init_failed:known", count=count, reason=reason, cause=known[0],
                                               fix=known[1]))
        else:
            r.findings.append(findings.finding("cuda_init_failed", count=count, reason=reason))


def _cudnn(r: ProbeResult, facts: dict[str, Any], version: str) -> None:
    """The cuDNN torch was compiled against vs the one it loaded (torch refuses an incompatible one)."""
    if facts.get("cudnn_available") is not True:
        return
    compiled, loaded, refused = cudnn_versions(facts)
    if compiled:
        r.measure("cudnn_compiled", compiled, note="the cuDNN torch was built against")
    library = facts.get("cudnn_library") if isinstance(facts.get("cudnn_library"), str) else None
    if library:
        r.measure("cudnn_library", library)
    if not (compiled and loaded) or not (refused or cudnn_compatible(compiled, loaded) is False):
        return
    ld_path = environment_variables().get("LD_LIBRARY_PATH") or ""
    entries = [e for e in ld_path.split(":") if e]
    lib_dir = library.rsplit("/", 1)[0] if library else None
    named = [e for e in entries if lib_dir and e.rstrip("/") == lib_dir.rstrip("/")] or \
            [e for e in entries if "cudnn" in e.lower()]
    shown: dict[str, Any] = {"version": version, "compiled": compiled, "loaded": loaded, "major": compiled.split(".")[0],
             "where": _wording.CUDNN_FROM.format(library=library) if library else "",
             "ld_path": _wording.CUDNN_LD_PATH.format(ld_path=ld_path) if ld_path else ""}
    if named:
        kept = ":".join(e for e in entries if e not in named)
        command = f"`export LD_LIBRARY_PATH={kept}`" if kept else "`unset LD_LIBRARY_PATH`"
        r.findings.append(findings.finding("cudnn_mismatch:on_path", named=", ".join(named), command=command, **shown))
    elif entries:
        r.findings.append(findings.finding("cudnn_mismatch:path_other", entries=", ".join(entries[:6]), **shown))
    else:
        r.findings.append(findings.finding("cudnn_mismatch", **shown))


def _capabilities(gpu: GpuBackend, facts: dict[str, Any], count: int | NA) -> list[tuple[int, str, str]]:
    """(index, name, compute capability) of each GPU: torch's devices where it listed them, else NVML's."""
    capabilities: list[tuple[int, str, str]] = []
    for dev in facts.get("devices") or []:
        if "compute_capability" in dev:
            capabilities.append((dev["index"], dev.get("name", "?"), dev["compute_capability"]))
    if not capabilities and isinstance(count, int):
        for i in range(count):
            s = gpu.static(i)
            name, capability = s.get("name"), s.get("compute_capability")
            if isinstance(capability, str):
                capabilities.append((i, name if isinstance(name, str) else "?", capability))
    return capabilities


def _kernel_images(r: ProbeResult, gpu: GpuBackend, facts: dict[str, Any], version: str, count: int | NA) -> None:
    """torch's compiled architectures against each device's compute capability."""
    listed = facts.get("arch_list")
    arch_list: list[str] = listed if isinstance(listed, list) else []
    if arch_list:
        r.measure("torch_arch_list", " ".join(arch_list))
    for index, name, cc in _capabilities(gpu, facts, count):
        ok = kernel_image_available(arch_list, cc)
        if ok is False:
            r.findings.append(findings.finding("no_kernel_image", device=index, index=index, name=name, cc=cc,
                                               version=version, archs=" ".join(arch_list),
                                               fix=kernel_image_fix(arch_list, cc)))
        elif ok and ptx_only(arch_list, cc):
            sm = "sm_" + cc.replace(".", "")
            r.findings.append(findings.finding(
                "ptx_jit_only", device=index, index=index, name=name, cc=cc, version=version, sm=sm,
                ptx=" ".join(a for a in arch_list if a.startswith("compute_")),
                fix=kernel_image_fix(arch_list, cc, say_newer=False)))


def _extensions(r: ProbeResult, ctx: ProbeContext, capabilities: list[tuple[int, str, str]]) -> None:
    """The compiled CUDA extensions beside torch (their fat binaries) against each GPU's compute capability."""
    scan = ctx.extensions()
    if is_na(scan):
        return
    if capabilities:  # without a GPU there is nothing to judge them against: details only
        r.measure("cuda_extensions", len(scan.found), note=f"shared objects with GPU code among {scan.examined} "
                  "read" + (f"; {scan.stopped}" if scan.stopped else ""))
    r.details["cuda_extensions"] = {path: {"archs": archs.describe(), "error": archs.error}
                                    for path, archs in scan.found.items()}
    by_capability: dict[str, list[tuple[int, str]]] = {}
    for index, name, cc in capabilities:
        by_capability.setdefault(cc, []).append((index, name))
    for path, archs in scan.found.items():
        if archs.error:
            continue  # an unreadable fat binary is no evidence either way: its reason is in the details
        for cc, gpus in by_capability.items():
            judged = fatbin.verdict(archs, cc)
            if judged != "sass":
                r.findings.append(extension_finding(path, scan.distribution(path), archs, cc, gpus, judged))


def extension_finding(path: str, package: str, archs: fatbin.FatbinArchs, cc: str, gpus: list[tuple[int, str]],
                      judged: str) -> Finding:
    """FAIL (no kernel runs) or WARN (only PTX, JIT-compiled at start-up) for the extension at ``path``
    (relative to site-packages, installed by ``package``) on the GPUs ``gpus`` of compute capability ``cc``."""
    sm = "sm_" + cc.replace(".", "")
    named = ", ".join(f"GPU {i} ({n})" for i, n in gpus)
    device = gpus[0][0] if len(gpus) == 1 else None
    fields: dict[str, Any] = {"path": path, "named": named, "cc": cc, "sm": sm, "package": package, "cc_digits": cc.replace(".", "")}
    if judged == "none":
        return findings.finding("extension_no_kernel_image", device=device, archs=archs.describe(), **fields)
    ptx = " ".join(sorted(archs.ptx, key=fatbin.arch_order))
    return findings.finding("extension_ptx_jit_only", device=device, ptx=ptx, **fields)


def _torchvision(r: ProbeResult, facts: dict[str, Any], version: str) -> None:
    tv = facts.get("torchvision") or {}
    if tv.get("installed"):
        r.measure("torchvision", tv.get("version"))
        expected = expected_torchvision(version)
        tv_version = tv.get("version") or ""
        if not tv.get("ops_ok"):
            error = tv.get("error") or "unknown error"
            mismatch = "does not exist" in error or "undefined symbol" in error or (
                expected is not None and not tv_version.startswith(expected + "."))
            pair = f"torchvision=={expected}.*" if expected else "torchvision"
            index = wheel_index(version)
            from_index = f" --index-url {index}" if index else ""
            table = "" if expected else _wording.TORCHVISION_TABLE.format(version=version, url=TORCHVISION_TABLE_URL)
            r.findings.append(findings.finding("torchvision_mismatch" if mismatch else "torchvision_ops_broken",
                                               tv_version=tv_version or "?", version=version, error=error,
                                               torch=version.split("+")[0], pair=pair, from_index=from_index,
                                               table=table))
        elif expected is not None and tv_version and not tv_version.startswith(expected + "."):
            index = wheel_index(version)
            from_index = f" --index-url {index}" if index else ""
            tv_torch = torch_for_torchvision(tv_version)
            r.findings.append(findings.finding("torchvision_version_pair:torch_known" if tv_torch else
                                               "torchvision_version_pair", tv_version=tv_version, version=version,
                                               expected=expected, from_index=from_index, tv_torch=tv_torch))
    else:
        r.measure("torchvision", None, note="not installed")


def _without_torch(r: ProbeResult, ctx: ProbeContext, reason: str, driver: str | NA,
                   driver_cuda: str | NA) -> ProbeResult:
    """--quick, or no torch installed: torch's build read as text, and the same driver check."""
    from gpudoctor.backends.torch_build import CHECK_ANOTHER_ENV_HINT, InterpreterError

    driver_text = "driver " + (driver if isinstance(driver, str) else "unavailable")
    not_started = "--quick" if reason == "QuickMode" else "not started"
    try:
        build = ctx.torch_build()
    except InterpreterError as exc:
        r.findings.append(findings.finding("python_unusable", error=str(exc)))
        return r.settle(f"{driver_text}; torch not checked")
    if ctx.replay and not build.installed:
        r.measure("torch", None, note="not recorded")
        r.findings.append(findings.finding("torch_not_recorded"))
        return r.settle(f"{driver_text}; torch not recorded")
    if not ctx.replay:
        r.measure("interpreter", build.python)
    if not build.installed:
        r.measure("torch", None, note="not installed")
        r.findings.append(findings.finding("torch_not_installed", python=build.python, hint=CHECK_ANOTHER_ENV_HINT))
        return r.settle(f"{driver_text}; no torch in {build.python}")
    if build.version is None:
        r.measure("torch", None, note=build.error or "version unreadable")
        return r.settle(f"{driver_text}; torch's build could not be read ({build.error})")
    r.measure("torch", build.version, note="from the recording" if ctx.replay
              else f"read from {build.location}/version.py")
    r.measure("torch_cuda_build", build.cuda or ("none (ROCm build)" if build.hip else "none (CPU-only build)"))
    r.findings.extend(driver_build_findings(driver, driver_cuda, build.version, build.cuda))
    count = ctx.gpu.device_count() if ctx.gpu.status() is None else NA("NvmlUnavailable")
    _extensions(r, ctx, _capabilities(ctx.gpu, {}, count))
    where = f" in {build.python}" if ctx.python else ""
    return r.settle(f"{driver_text}; {build.describe()}{where}, CUDA not started ({not_started})")


PROBE = Probe.define(__name__, run, "Driver, torch, CUDA, cuDNN, NCCL and torchvision versions agree",
                     level="quick", uses_torch=True, timeout_s=90, order=10)
