"""The environment probe's stack judgements over torch's facts as torch reports them (no GPU needed):
cuDNN compiled vs loaded, PTX-only coverage, a driver check against a CUDA that started anyway,
and the fix texts (the build a new GPU needs, the index a torchvision fix keeps)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from gpudoctor.backends.base import DeviceIdentity
from gpudoctor.backends.na import NA
from gpudoctor.core.model import Status
from gpudoctor.probes import ProbeContext

HOST = {"python": "3.12", "os": "Linux", "cpu_model": "x", "cpu_logical": 8, "ram_total_bytes": 2 ** 30}


class _Gpu:
    def __init__(self, driver: str = "580.65.06", driver_cuda: str = "13.0", capability: str = "8.6") -> None:
        self._driver, self._cuda, self._cc = driver, driver_cuda, capability

    def status(self) -> Any:
        return None

    def driver_version(self) -> str:
        return self._driver

    def cuda_driver_version(self) -> str:
        return self._cuda

    def device_count(self) -> int:
        return 1

    def static(self, index: int) -> dict[str, Any]:
        return {"index": 0, "name": "GPU", "compute_capability": self._cc, "uuid": "GPU-1",
                "pci_bus_id": "00000000:01:00.0", "mig_mode": 0}

    def identity(self, index: int) -> DeviceIdentity:
        """What the torch-to-NVML resolver reads: the device's bus id and UUID."""
        return DeviceIdentity(self.static(index).get("pci_bus_id"), self.static(index).get("uuid"))


def _facts(**over: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "importable": True, "version": "2.14.1+cu130", "cuda_build": "13.0", "hip_build": None,
        "arch_list": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], "cudnn_available": True,
        "cudnn_version": "9.24.0", "cudnn_compiled_version": "9.24.0", "cudnn_runtime_version": "9.24.0",
        "cudnn_library": None, "nccl_version": None, "cuda_available": True, "device_count": 1,
        "cuda_warnings": [], "cuda_init_error": None, "devices": [],
        "torchvision": {"installed": False, "version": None, "ops_ok": False, "error": None},
    }
    facts.update(over)
    return facts


def _run(monkeypatch: pytest.MonkeyPatch, gpu: Any = None, env: dict[str, str] | None = None, **facts: Any):
    from gpudoctor.probes import environment

    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    ctx = ProbeContext(gpu or _Gpu(), _torch_facts=_facts(**facts), _host_facts=dict(HOST),
                       _cuda_start=NA("NotRecorded"))
    return environment.run(ctx)


def _finding(result: Any, code: str) -> Any:
    found = [f for f in result.findings if f.code == code]
    assert found, [(f.status, f.code) for f in result.findings]
    return found[0]


# ---------------------------------------------------------------- cuDNN compiled vs loaded
def _fake_torch(binding: Any, version: Any, compiled_int: Any = None) -> Any:
    def version_fn() -> Any:
        if isinstance(version, Exception):
            raise version
        return version

    c = types.SimpleNamespace(_cudnn=binding)
    if compiled_int is not None:
        c._cudnn_version = lambda: compiled_int
    return types.SimpleNamespace(_C=c, backends=types.SimpleNamespace(
        cudnn=types.SimpleNamespace(is_available=lambda: True, version=version_fn)))


def test_cudnn_facts_ask_both_versions_even_when_torch_refuses_the_loaded_one(tmp_path):
    from gpudoctor.backends import torch_cuda

    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /opt/cudnn/lib/libcudnn_ops.so.8\n"
                    "7f02-7f03 r-xp 0 08:01 2 /opt/cudnn/lib/libcudnn.so.8.2.4\n"
                    "7f04-7f05 r-xp 0 08:01 3 /usr/lib/libc.so.6\n")
    binding = types.SimpleNamespace(getCompileVersion=lambda: (8, 7, 0), getRuntimeVersion=lambda: (8, 2, 4))
    error = RuntimeError("cuDNN version incompatibility: PyTorch was compiled  against (8, 7, 0) but found "
                         "runtime version (8, 2, 4).")
    facts = torch_cuda.cudnn_facts(_fake_torch(binding, error), maps_file=str(maps))
    assert facts["cudnn_compiled_version"] == "8.7.0" and facts["cudnn_runtime_version"] == "8.2.4"
    assert facts["cudnn_library"] == "/opt/cudnn/lib/libcudnn.so.8.2.4"
    assert "incompatibility" in facts["cudnn_version"].reason


def test_cudnn_facts_on_an_old_torch_and_on_a_torch_without_the_binding():
    from gpudoctor.backends import torch_cuda

    old = torch_cuda.cudnn_facts(_fake_torch(types.SimpleNamespace(), 7600, compiled_int=7102))
    assert old["cudnn_compiled_version"] == "7.1.2" and old["cudnn_version"] == "7.6.0"
    assert old["cudnn_runtime_version"] is None
    bare = torch_cuda.cudnn_facts(_fake_torch(None, 90100))
    assert bare["cudnn_compiled_version"] is None and bare["cudnn_version"] == "9.1.0"


def test_cudnn_rules_are_torchs():
    from gpudoctor.probes.environment import cudnn_compatible, cudnn_versions

    assert cudnn_compatible("8.7.0", "8.9.2") is True       # a newer minor is accepted
    assert cudnn_compatible("8.7.0", "8.2.4") is False      # an older minor is refused
    assert cudnn_compatible("9.1.0", "8.9.7") is False      # another major always
    assert cudnn_compatible("6.0.21", "6.1.0") is False     # before 7 the minor must match
    old_words = NA("RuntimeError: cuDNN version mismatch: PyTorch was compiled against 7102 but linked against 7600")
    assert cudnn_versions({"cudnn_version": old_words}) == ("7.1.2", "7.6.0", True)


def test_cudnn_mismatch_names_both_versions_the_library_and_the_directory_to_remove(monkeypatch):
    result = _run(monkeypatch, env={"LD_LIBRARY_PATH": "/opt/cudnn/lib:/usr/local/nccl/lib"},
                  version="2.0.1+cu118", cuda_build="11.8", arch_list=["sm_86"],
                  cudnn_version=NA("RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against "
                                   "(8, 7, 0) but found runtime version (8, 2, 4)."),
                  cudnn_compiled_version="8.7.0", cudnn_runtime_version="8.2.4",
                  cudnn_library="/opt/cudnn/lib/libcudnn.so.8.2.4")
    f = _finding(result, "cudnn_mismatch")
    assert f.status == Status.FAIL and result.status == Status.FAIL
    assert "8.7.0" in f.summary and "8.2.4" in f.summary and "/opt/cudnn/lib/libcudnn.so.8.2.4" in f.summary
    assert "Remove /opt/cudnn/lib from LD_LIBRARY_PATH" in f.fix
    assert "export LD_LIBRARY_PATH=/usr/local/nccl/lib" in f.fix
    # a newer minor of the same major is what torch accepts: no finding
    newer = _run(monkeypatch, cudnn_version="9.26.0", cudnn_compiled_version="9.24.0",
                 cudnn_runtime_version="9.26.0")
    assert "cudnn_mismatch" not in {f.code for f in newer.findings} and newer.status == Status.PASS


# ---------------------------------------------------------------- CUDA_VISIBLE_DEVICES changed after CUDA read it
def _devices(monkeypatch: pytest.MonkeyPatch, cvd: str | None, **facts: Any):
    from gpudoctor.probes import devices

    class FourGpus(_Gpu):
        def device_count(self) -> int:
            return 4

        def static(self, index: int) -> dict[str, Any]:
            return {"index": index, "name": "GPU", "uuid": f"GPU-{index}", "pci_bus_id": f"00000000:0{index + 1}:00.0",
                    "mig_mode": 0}

    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    if cvd is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    ctx = ProbeContext(FourGpus(), _torch_facts=_facts(**facts), _host_facts=dict(HOST),
                       _cuda_start=NA("NotRecorded"))
    return devices.run(ctx)


def test_cuda_visible_devices_changed_after_torch_started_cuda_is_a_warning(monkeypatch):
    # torch's process started CUDA with CUDA_VISIBLE_DEVICES=1; the variable now says ''
    result = _devices(monkeypatch, "", device_count=1, cuda_visible_devices="1")
    codes = {f.code: f for f in result.findings}
    assert "cuda_visible_devices_hides_all" not in codes and result.status == Status.WARN
    f = codes["device_count_mismatch"]
    assert "changed after CUDA read it" in f.summary and "before" in f.fix
    # the same value torch started with: the variable is judged as it stands
    same = _devices(monkeypatch, "", device_count=0, cuda_available=False, cuda_visible_devices="")
    assert "cuda_visible_devices_hides_all" in {f.code for f in same.findings}


# ---------------------------------------------------------------- the driver check when CUDA started anyway
def test_a_driver_too_old_by_nvml_is_a_warning_when_cuda_started(monkeypatch):
    # a cu130 torch in a forward-compatibility container on a 550 host driver (NVML says CUDA 12.4)
    result = _run(monkeypatch, gpu=_Gpu(driver="550.54.15", driver_cuda="12.4"), device_count=1,
                  devices=[{"index": 0, "name": "H100", "compute_capability": "9.0"}])
    f = _finding(result, "driver_too_old")
    assert f.status == Status.WARN and result.status == Status.WARN
    assert "CUDA started anyway: forward compatibility or a newer driver than NVML reports" in f.summary
    # an older minor of the same major: a pass saying so
    older = _run(monkeypatch, gpu=_Gpu(driver="560.35.03", driver_cuda="12.6"), version="2.9.0+cu128",
                 cuda_build="12.8")
    g = _finding(older, "driver_older_than_build")
    assert g.status == Status.PASS and "CUDA started anyway" in g.summary and older.status == Status.PASS
    # CUDA did not start: still a failure
    down = _run(monkeypatch, gpu=_Gpu(driver="550.54.15", driver_cuda="12.4"), cuda_available=False, device_count=0)
    assert _finding(down, "driver_too_old").status == Status.FAIL


# ---------------------------------------------------------------- fix texts
BUILD_BEFORE_BLACKWELL = ["sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def test_a_blackwell_gpu_on_an_old_build_is_told_the_cu128_build_it_needs(monkeypatch):
    result = _run(monkeypatch, version="2.5.1+cu124", cuda_build="12.4", arch_list=BUILD_BEFORE_BLACKWELL,
                  devices=[{"index": 0, "name": "NVIDIA GeForce RTX 5090", "compute_capability": "12.0"}])
    f = _finding(result, "no_kernel_image")
    assert "cu128" in f.fix and "12.8" in f.fix and "sm_120" in f.fix
    assert "older GPUs" not in f.fix and "cu126" not in f.fix
    # a GPU the build dropped still gets the older-build advice
    old = _run(monkeypatch, arch_list=["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"],
               devices=[{"index": 0, "name": "Tesla V100", "compute_capability": "7.0"}])
    assert "older CUDA build" in _finding(old, "no_kernel_image").fix


def _tv(version: str, torchvision: str, error: str | None = "RuntimeError: operator torchvision::nms does not exist"):
    return {"installed": True, "version": torchvision, "ops_ok": error is None, "error": error}


@pytest.mark.parametrize("torch_version, index", [
    ("2.2.1+cpu", "--index-url https://download.pytorch.org/whl/cpu"),
    ("2.6.0+cu126", "--index-url https://download.pytorch.org/whl/cu126"),
    ("2.6.0", None),
])
def test_the_torchvision_fix_keeps_the_index_torch_came_from(monkeypatch, torch_version, index):
    result = _run(monkeypatch, version=torch_version, torchvision=_tv(torch_version, "0.23.0"))
    fix = _finding(result, "torchvision_mismatch").fix
    if index:
        assert fix.count(index) == 2, fix  # the pinned pair and the let-pip-choose command
    else:
        assert "--index-url" not in fix and "torchvision==0.21.*" in fix
    pair = _run(monkeypatch, version=torch_version, torchvision=_tv(torch_version, "0.22.0", error=None))
    pair_fix = _finding(pair, "torchvision_version_pair").fix
    assert (index in pair_fix) if index else ("--index-url" not in pair_fix)


def test_a_torch_1_torchvision_fix_names_the_version(monkeypatch):
    result = _run(monkeypatch, version="1.12.0+cu113", cuda_build="11.3",
                  torchvision=_tv("1.12.0+cu113", "0.15.2", "RuntimeError: operator torchvision::nms does not exist"))
    fix = _finding(result, "torchvision_mismatch").fix
    assert "the matching torchvision" not in fix
    assert "torchvision==0.13.*" in fix and "--index-url https://download.pytorch.org/whl/cu113" in fix
    # before 1.4 the table says which
    from gpudoctor.probes.environment import expected_torchvision, torch_for_torchvision

    assert expected_torchvision("1.2.0") == "0.4" and expected_torchvision("1.7.1") == "0.8"
    assert torch_for_torchvision("0.8.2") == "1.7" and torch_for_torchvision("0.4.2") is None


# ---------------------------------------------------------------- a GPU covered only by PTX
def test_a_gpu_covered_only_by_ptx_is_a_warning_naming_the_sm_build(monkeypatch):
    from gpudoctor.probes.environment import ptx_only

    assert ptx_only(["sm_80", "sm_90", "compute_90"], "12.0") is True
    assert ptx_only(["sm_80", "sm_86", "compute_86"], "8.9") is False   # sm_86 binary runs on 8.9
    assert ptx_only(["sm_90a", "compute_80"], "9.0") is False           # arch-specific binary on its own GPU
    assert ptx_only(["sm_80", "compute_80"], "9.0") is True
    result = _run(monkeypatch, version="2.6.0+cu126", cuda_build="12.6",
                  arch_list=["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "compute_90"],
                  devices=[{"index": 0, "name": "NVIDIA GeForce RTX 5090", "compute_capability": "12.0"}])
    f = _finding(result, "ptx_jit_only")
    assert f.status == Status.WARN and result.status == Status.WARN
    assert "compute_90" in f.summary and "sm_120" in f.fix and "cu128" in f.fix
    assert "no_kernel_image" not in {g.code for g in result.findings}
