"""The stack below NVML (issue 34): the kernel module's and the libraries' versions, the container,
the PCI bus, each read from files laid out as the kernel and the distribution lay them out
(tests/support/stack_layout.py), and judged where NVML fails; the compute mode's one-process rule; one MIG
device per CUDA process in the count check. End to end, the same verdict in ``report --quick``, the
full report, the exporter's report status and the TUI header (benchmarks/fake_nvml answers nvmlInit
with the failure; GPUDOCTOR_ROOTFS points the readers at the laid-out files), and once in a real
namespace laid out as a container (``unshare --user --mount --pid``, no root needed) where the kernel allows
user namespaces.

No GPU here; not yet measured on a GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpudoctor.core import exitcodes
from gpudoctor.backends import NvmlBackend, NvmlGate, stack
from gpudoctor.backends.na import NA, is_na
from gpudoctor.backends.visibility import cuda_enumerated
from gpudoctor.core.model import ProbeResult, Status
from gpudoctor.probes import ProbeContext
from support.nvml_fake import FakePynvml
from support.prom_support import assert_exporter_report_fails
from support.stack_layout import driver_library, lay_out, module_version_file, pci_device
from support.tui_support import assert_tui_header_fails

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVML = ROOT / "benchmarks" / "fake_nvml"
LIB = "usr/lib/x86_64-linux-gnu"
NVIDIA_BUS = pci_device("0000:65:00.0", "0x10de")


# --------------------------------------------------------------------------- the readers
@pytest.mark.parametrize("files, expected", [
    (module_version_file("550.90.07"), "550.90.07"),
    (module_version_file("570.124.06", open_module=True), "570.124.06"),
    ({"sys/module/nvidia/version": "535.161.08\n"}, "535.161.08"),
    ({"proc/driver/nvidia/version": "NVRM version: something else\n"}, NA("Unparsed")),
    ({}, NA("ModuleNotLoaded")),
])
def test_the_kernel_modules_version_is_read_as_the_kernel_writes_it(tmp_path, files, expected):
    assert stack.module_version(str(lay_out(tmp_path, files))) == expected


def test_a_library_is_found_in_the_loaders_order_and_named_by_its_real_file(tmp_path):
    lay_out(tmp_path, {**driver_library(LIB, "libnvidia-ml", "550.107.02"),
                       **driver_library("opt/nvidia/lib", "libcuda", "560.35.03"),
                       **driver_library("usr/local/cuda/compat", "libcuda", "575.51.03"),
                       "etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n",
                       "etc/ld.so.conf.d/nvidia.conf": "# the driver\n/opt/nvidia/lib\n"})
    root = str(tmp_path)
    nvml = stack.find_library("libnvidia-ml.so.1", root, {})
    assert (nvml.path, nvml.version) == (f"/{LIB}/libnvidia-ml.so.1", "550.107.02")
    assert nvml.real == f"/{LIB}/libnvidia-ml.so.550.107.02"
    assert stack.find_library("libcuda.so.1", root, {}).version == "560.35.03"  # from ld.so.conf.d
    # LD_LIBRARY_PATH comes first, as the loader takes it (a forward-compatibility folder)
    assert stack.find_library("libcuda.so.1", root, {"LD_LIBRARY_PATH": "/usr/local/cuda/compat"}).version == "575.51.03"


def test_a_missing_a_broken_and_an_unversioned_library_say_why(tmp_path):
    lay_out(tmp_path, {f"{LIB}/libnvidia-ml.so.1": {"link": "libnvidia-ml.so.470.00.01"},
                       f"{LIB}/libcuda.so.1": {"file": True}})
    root = str(tmp_path)
    assert stack.find_library("libnvidia-ml.so.1", root, {}).version == NA("BrokenLink")
    assert stack.find_library("libcuda.so.1", root, {}).version == NA("NoVersionInName")
    assert stack.find_library("libnvidia-cfg.so.1", root, {}).path == NA("NotFound")


@pytest.mark.parametrize("files, env, kind", [
    ({".dockerenv": {"file": True}}, {}, "docker"),
    ({"run/.containerenv": {"file": True}}, {}, "podman"),
    ({"proc/1/cgroup": "12:devices:/kubepods/besteffort/pod1234/abcd\n0::/\n"}, {}, "kubernetes"),
    ({"proc/1/cgroup": "0::/system.slice/docker-80155e39bfcf.scope\n"}, {}, "docker"),
    ({}, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, "kubernetes"),
    ({}, {"container": "systemd-nspawn"}, "systemd-nspawn"),
    ({"proc/1/cgroup": "0::/init.scope\n"}, {}, None),
])
def test_a_container_is_told_from_its_markers_cgroup_and_environment(tmp_path, files, env, kind):
    assert stack.container(str(lay_out(tmp_path, files)), env).kind == kind


def test_what_the_nvidia_runtime_gave_a_container_is_read(tmp_path):
    lay_out(tmp_path, {".dockerenv": {"file": True}, "dev/nvidia0": {"file": True}, "dev/nvidiactl": {"file": True},
                       "sys/fs/cgroup/devices/devices.list": "c 1:3 rwm\nc 195:* m\nc 136:* rwm\n"})
    box = stack.container(str(tmp_path), {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"})
    assert box.device_nodes == ("nvidia0", "nvidiactl")
    assert box.device_rules == ("c 195:* m",)
    assert box.may_use_compute() is False and box.visible_devices == "all"


def test_the_pci_bus_says_whether_an_nvidia_device_is_there(tmp_path):
    assert is_na(stack.nvidia_pci_devices(str(tmp_path)))  # nothing to read: cannot be told
    lay_out(tmp_path, {**pci_device("0000:00:00.0", "0x8086"), **pci_device("0000:00:02.0", "0x1234")})
    assert stack.nvidia_pci_devices(str(tmp_path)) == []
    lay_out(tmp_path, NVIDIA_BUS)
    assert stack.nvidia_pci_devices(str(tmp_path)) == ["0000:65:00.0"]


# --------------------------------------------------------------------------- the judgement
class NoNvml:
    """A GPU backend whose NVML failed to start with ``reason``."""

    kind = "nvml"

    def __init__(self, reason: str) -> None:
        self.na = NA(reason)

    def status(self) -> NA:
        return self.na

    def driver_version(self) -> NA:
        return self.na

    def cuda_driver_version(self) -> NA:
        return self.na

    def device_count(self) -> NA:
        return self.na


def judge(reason: str, files: dict[str, Any], env: dict[str, str], tmp_path: Path) -> ProbeResult:
    """The environment probe (at --quick) where NVML failed with ``reason`` on the laid-out machine."""
    from gpudoctor.probes import environment

    facts = stack.read_stack(str(lay_out(tmp_path, files)), env)
    ctx = ProbeContext(NoNvml(reason), level="quick", _stack=facts, _host_facts={"python": "3.12"})  # type: ignore[arg-type]
    return environment.run(ctx)


def lead(result: ProbeResult) -> Any:
    return next(f for f in result.findings if f.status == Status.FAIL)


def test_an_upgrade_without_a_reboot_names_both_versions_and_says_reboot(tmp_path):
    files = {**module_version_file("550.90.07"), **driver_library(LIB, "libnvidia-ml", "550.107.02")}
    f = lead(judge("LibRmVersionMismatch", files, {}, tmp_path))
    assert f.code == "driver_library_mismatch" and "550.90.07" in f.summary and "550.107.02" in f.summary
    assert f.fix.startswith("Reboot") and "rmmod" in f.fix and "hold" in f.fix
    assert "install the nvidia driver" not in f.fix.lower()


def test_a_module_from_another_release_names_which_one_to_install(tmp_path):
    files = {**module_version_file("570.124.06", open_module=True), **driver_library(LIB, "libnvidia-ml", "570.124.04")}
    f = lead(judge("LibRmVersionMismatch", files, {}, tmp_path))
    assert "module is version 570.124.06" in f.summary and "install the user-space driver of version 570.124.06" in f.fix


def test_a_mismatch_in_a_container_says_restart_the_container(tmp_path):
    files = {".dockerenv": {"file": True}, **module_version_file("535.183.01"),
             **driver_library(LIB, "libnvidia-ml", "535.161.08")}
    f = lead(judge("LibRmVersionMismatch", files, {}, tmp_path))
    assert "docker container" in f.summary and f.fix.startswith("Restart the container")


def test_unknown_error_in_a_container_is_the_lost_device_cgroup(tmp_path):
    files = {".dockerenv": {"file": True}, "dev/nvidia0": {"file": True},
             "sys/fs/cgroup/devices/devices.list": "c 195:* m\n", **driver_library(LIB, "libnvidia-ml", "570.133.20")}
    f = lead(judge("Unknown", files, {"NVIDIA_VISIBLE_DEVICES": "all"}, tmp_path))
    assert f.code == "container_gpu_access_lost" and "c 195:* m" in f.summary
    assert "daemon-reload" in f.why and "Restart" in f.fix and "install" not in f.fix.lower()


@pytest.mark.parametrize("files, env, code", [
    ({}, {}, "container_without_gpus"),
    ({}, {"NVIDIA_VISIBLE_DEVICES": "all"}, "container_runtime_not_used"),
    ({"dev/nvidia0": {"file": True}, "dev/nvidiactl": {"file": True}},
     {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute"}, "container_without_utility"),
])
def test_a_container_without_its_gpus_says_what_the_host_or_pod_must_change(tmp_path, files, env, code):
    files = {".dockerenv": {"file": True}, **NVIDIA_BUS, **files}
    f = lead(judge("LibraryNotFound", files, env, tmp_path))
    assert f.code == code, f
    assert "install the nvidia driver" not in f.fix.lower() and ("--gpus" in f.fix or "CAPABILITIES" in f.fix)


@pytest.mark.parametrize("env", [{}, {"NVIDIA_VISIBLE_DEVICES": "all"}])
def test_device_nodes_without_driver_libraries_name_the_libraries_not_a_container_without_gpus(tmp_path, env):
    """CDI injection (`--device nvidia.com/gpu=all`) gives a container its /dev/nvidia* nodes and no NVIDIA_*
    variable; a CDI spec that lists no driver library (written before the driver's install) leaves NVML
    without its library. That container has its GPUs: the libraries are what is missing."""
    files = {".dockerenv": {"file": True}, **NVIDIA_BUS, "dev/nvidia0": {"file": True}, "dev/nvidiactl": {"file": True},
             "dev/nvidia-uvm": {"file": True}}
    f = lead(judge("LibraryNotFound", files, env, tmp_path))
    assert f.code == "container_libraries_missing", f
    assert "started without GPUs" not in f.summary and "nvidia0" in f.summary and "libnvidia-ml" in f.summary
    assert "nvidia-ctk cdi generate" in f.fix and "install the nvidia driver" not in f.fix.lower()
    assert ("no NVIDIA_* variable" in f.summary) == (not env)


def test_no_nvidia_device_on_the_bus_is_said_and_nothing_is_to_install(tmp_path):
    files = {**pci_device("0000:00:00.0", "0x8086"), **pci_device("0000:00:01.0", "0x1af4")}
    f = lead(judge("LibraryNotFound", files, {}, tmp_path))
    assert f.code == "no_nvidia_gpu" and "2 devices" in f.summary and "Install" not in f.fix


def test_an_unreadable_bus_says_that_it_cannot_be_told(tmp_path):
    f = lead(judge("LibraryNotFound", {}, {}, tmp_path))
    assert f.code == "nvidia_driver_unavailable" and "cannot be told" in f.summary
    assert f.fix.startswith("First check that this machine has an NVIDIA GPU")


def test_a_host_with_an_nvidia_device_and_no_driver_is_told_to_install_it(tmp_path):
    f = lead(judge("LibraryNotFound", NVIDIA_BUS, {}, tmp_path))
    assert f.code == "nvidia_driver_unavailable" and "0000:65:00.0" in f.summary and f.fix.startswith("Install")


def test_utility_only_names_the_containers_capabilities(tmp_path):
    from gpudoctor.backends.cuda_driver import CudaStart, cuda_start_findings

    lay_out(tmp_path, {".dockerenv": {"file": True}})
    box = stack.container(str(tmp_path), {"NVIDIA_DRIVER_CAPABILITIES": "utility"})
    [f] = cuda_start_findings(CudaStart(loaded=False, error="libcuda.so.1: cannot open"), 1, box=box)
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in f.summary and "compute,utility" in f.fix


def test_a_32_bit_driver_library_first_in_the_loaders_order_is_passed_over(tmp_path):
    """Ubuntu's ld.so.conf.d/i386-linux-gnu.conf sorts before x86_64-linux-gnu.conf: with
    libnvidia-compute-XXX:i386 installed, a 32-bit libnvidia-ml.so.1 comes first in the search. The
    loader skips a library of the other ELF class (byte 4 of its header), and so does the lookup."""
    lay_out(tmp_path, {**driver_library("usr/lib/i386-linux-gnu", "libnvidia-ml", "535.183.01", bits=32),
                       **driver_library(LIB, "libnvidia-ml", "550.107.02", bits=64),
                       **driver_library("usr/lib/i386-linux-gnu", "libcuda", "535.183.01", bits=32),
                       "etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n",
                       "etc/ld.so.conf.d/i386-linux-gnu.conf": "/lib/i386-linux-gnu\n/usr/lib/i386-linux-gnu\n",
                       "etc/ld.so.conf.d/x86_64-linux-gnu.conf": f"/lib/x86_64-linux-gnu\n/{LIB}\n"})
    root = str(tmp_path)
    ours = 64 if sys.maxsize > 2**32 else 32
    assert stack.library_dirs(root, {})[:2] == ["/lib/i386-linux-gnu", "/usr/lib/i386-linux-gnu"]
    nvml = stack.find_library("libnvidia-ml.so.1", root, {})
    if ours == 64:
        assert nvml.path == f"/{LIB}/libnvidia-ml.so.1" and nvml.version == "550.107.02"
        assert stack.find_library("libcuda.so.1", root, {}).path == NA("NotFound")  # only the 32-bit one
    else:
        assert nvml.version == "535.183.01"


@pytest.mark.parametrize("caps", ["all", "compute,utility", "utility, COMPUTE"])
def test_no_libcuda_where_compute_was_asked_names_the_missing_mount_not_the_capability(tmp_path, caps):
    """Where the container asked for compute (or `all`), the runtime should have mounted libcuda: the finding
    says it was not (a CDI spec without it, a broken mount), never "without compute"."""
    from gpudoctor.backends.cuda_driver import CudaStart, cuda_start_findings

    lay_out(tmp_path, {".dockerenv": {"file": True}})
    box = stack.container(str(tmp_path), {"NVIDIA_DRIVER_CAPABILITIES": caps})
    [f] = cuda_start_findings(CudaStart(loaded=False, error="libcuda.so.1: cannot open"), 1, box=box)
    assert f.code == "cuda_cannot_start" and "without `compute`" not in f.summary, f.summary
    assert "libcuda was not mounted" in f.summary and "nvidia-ctk cdi generate" in f.fix
    assert f.summary.endswith(".") and "libcuda.so.1: cannot open" in f.summary


@pytest.mark.parametrize("caps", ["", " ", None])
def test_no_libcuda_with_the_default_capabilities_says_the_default_may_lack_compute(tmp_path, caps):
    """Unset or empty: the runtime's default applies: utility,compute as the toolkit documents it, `utility`
    alone in older toolkits and enroot (the corpus's cases: a plain base image, a pod without the variable).
    Not "without compute", not an unexplained missing mount: set it explicitly."""
    from gpudoctor.backends.cuda_driver import CudaStart, cuda_start_findings

    lay_out(tmp_path, {".dockerenv": {"file": True}})
    box = stack.container(str(tmp_path), {} if caps is None else {"NVIDIA_DRIVER_CAPABILITIES": caps})
    [f] = cuda_start_findings(CudaStart(loaded=False, error="libcuda.so.1: cannot open"), 1, box=box)
    assert "without `compute`" not in f.summary and "unset or empty" in f.summary, f.summary
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility set explicitly" in f.fix


@pytest.mark.parametrize("value", ["", "  ", ","])
def test_an_empty_capability_list_is_the_toolkits_default(tmp_path, value):
    """The NVIDIA container toolkit: NVIDIA_DRIVER_CAPABILITIES "empty or unset: use default driver
    capability" (utility, compute), so an empty value neither lacks compute nor lacks utility."""
    lay_out(tmp_path, {".dockerenv": {"file": True}})
    box = stack.container(str(tmp_path), {"NVIDIA_DRIVER_CAPABILITIES": value})
    assert box.capabilities == value and box.capability_list() is None and box.may_use_compute() is None
    files = {".dockerenv": {"file": True}, **NVIDIA_BUS, "dev/nvidia0": {"file": True}, "dev/nvidiactl": {"file": True}}
    f = lead(judge("LibraryNotFound", files, {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": value},
                   tmp_path / "judged"))
    assert f.code != "container_without_utility", f


# --------------------------------------------------------------------------- compute mode and MIG
def test_an_exclusive_gpu_held_by_another_process_fails_before_any_context():
    from gpudoctor.probes import health

    nvml = FakePynvml(1, readings={"nvmlDeviceGetComputeMode": 3})
    gpu = NvmlBackend(NvmlGate(nvml))
    held = [{"pid": 4242, "type": "compute", "gpu_memory_bytes": 2 << 30, "sm_util_pct": None}]
    for procs, code, status in ((held, "compute_exclusive_busy", Status.FAIL), ([], "compute_exclusive", Status.PASS),
                                (NA("NoPermission"), "compute_exclusive", Status.PASS)):
        r = ProbeResult("health")
        health.check_device(r, 0, gpu.static(0), gpu.sample(0), procs)
        [f] = [f for f in r.findings if f.code.startswith("compute_")]
        assert (f.code, f.status) == (code, status)
    assert "4242" in health.findings.finding("compute_exclusive_busy", label="GPU 0", pids="4242", index=0).fix


def test_gpus_in_mig_mode_give_cuda_one_device_between_them():
    assert cuda_enumerated([0, 1], {0: 1, 1: 1}) == 1
    # NVIDIA's MIG user guide: once CUDA enumerates a MIG device it enumerates no GPU out of MIG mode
    # (XuehaiPan/nvitop#8: GPU 0 out of MIG mode, GPUs 1-3 in it, a CUDA count of 1)
    assert cuda_enumerated([0, 1, 2], {0: 1, 1: 0, 2: 1}) == 1
    assert cuda_enumerated([0, 1, 2, 3], {0: 0, 1: 1, 2: 1, 3: 1}) == 1
    assert cuda_enumerated([0], {0: 0, 1: 1}) == 1  # the GPU in MIG mode is hidden: GPU 0 alone counts
    assert cuda_enumerated([0, 1], {0: 0, 1: NA("NotSupported")}) == 2


# --------------------------------------------------------------------------- every front end
def _env(tmp_path: Path, files: dict[str, Any], **fake: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "PYTEST", "NVIDIA_", "KUBERNETES_"))}
    env.pop("container", None)
    env.update(PYTHONPATH=str(FAKE_NVML), GPUDOCTOR_ROOTFS=str(lay_out(tmp_path, files)), **fake)
    return env


MISMATCH = {**module_version_file("550.90.07"), **driver_library(LIB, "libnvidia-ml", "550.107.02"), **NVIDIA_BUS}
DOCKER = {".dockerenv": {"file": True}}
# Each class's machine (laid-out files), how the fake NVML and libcuda answer there, and the probe and
# finding that must lead. NVML return codes: 18 LIB_RM_VERSION_MISMATCH, 999 UNKNOWN, 12 LIBRARY_NOT_FOUND.
CASES = {
    "mismatch": (MISMATCH, {"FAKE_NVML_INIT": "18"}, "environment", "driver_library_mismatch"),
    "container-lost": ({**DOCKER, "dev/nvidia0": {"file": True}, **NVIDIA_BUS},
                       {"FAKE_NVML_INIT": "999"}, "environment", "container_gpu_access_lost"),
    "container-without-gpus": ({**DOCKER, **NVIDIA_BUS}, {"FAKE_NVML_INIT": "12"}, "environment",
                               "container_without_gpus"),
    "utility-only": ({**DOCKER, "dev/nvidia0": {"file": True}, **NVIDIA_BUS},
                     {"FAKE_CUDA": "missing", "NVIDIA_DRIVER_CAPABILITIES": "utility"}, "devices", "cuda_cannot_start"),
    "exclusive": ({}, {"FAKE_NVML_COMPUTE_MODE": "3", "FAKE_NVML_PROCESS": "4242"}, "health", "compute_exclusive_busy"),
    "no-nvidia-device": (pci_device("0000:00:00.0", "0x8086"), {"FAKE_NVML_INIT": "12"}, "environment", "no_nvidia_gpu"),
}

#: What the leading finding must say of the cause, for each case.
WORDS = {"mismatch": "still 550.90.07", "container-lost": "daemon-reload", "container-without-gpus": "--gpus all",
         "utility-only": "NVIDIA_DRIVER_CAPABILITIES=utility", "exclusive": "process 4242",
         "no-nvidia-device": "no NVIDIA GPU"}


def _report(env: dict[str, str], *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--json", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=240)
    assert proc.returncode == exitcodes.FAIL, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("case", list(CASES))
def test_quick_and_full_report_lead_with_the_cause(tmp_path, case):
    files, fake, probe, code = CASES[case]
    env = _env(tmp_path, files, **fake)
    for document in (_report(env, "--quick"),
                     _report(env, "--probe", "environment", "--probe", "devices", "--probe", "health")):
        result = next(r for r in document["results"] if r["probe"] == probe)
        fails = [f for f in result["findings"] if f["status"] == "fail"]
        assert [f["code"] for f in fails][:1] == [code], fails
        assert "install the nvidia driver" not in fails[0]["fix"].lower()
        text = " ".join(fails[0][k] for k in ("summary", "why", "fix"))
        assert WORDS[case] in text, text


@pytest.mark.parametrize("case", list(CASES))
def test_the_exporter_publishes_the_verdict(tmp_path, case):
    files, fake, _, _ = CASES[case]
    assert_exporter_report_fails(_env(tmp_path, files, **fake), ROOT)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", list(CASES))
def test_the_tui_header_fails(tmp_path, case):
    files, fake, _, _ = CASES[case]
    assert_tui_header_fails(_env(tmp_path, files, **fake))


# --------------------------------------------------------------------------- a real namespace
#: unshare as any user can run it where the kernel allows user namespaces: the user namespace maps this
#: user to root inside, which may then mount in its own mount namespace (and its own /proc, pid 1 being
#: the report), nothing of it seen outside.
UNSHARE = ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc"]


def _unshare_refusal() -> str:
    """Why this machine cannot run a command in a user+mount+pid namespace ("" where it can)."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return "needs Linux and unshare (util-linux)"
    try:
        probe = subprocess.run([*UNSHARE, "sh", "-c", "mount --make-rprivate / && mount -t tmpfs t /run"],
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare did not run: {exc}"
    return "" if probe.returncode == 0 else f"user namespaces not permitted here: {probe.stderr.strip()[:200]}"


UNSHARE_REFUSED = _unshare_refusal()
#: A Docker container's PID 1 under cgroup v1 and the cgroupfs driver, as /proc/1/cgroup lists it.
DOCKER_CGROUP = "12:devices:/docker/8d4c2f0b1a6e" + "0" * 52 + "\n0::/\n"


def _in_namespace(tmp_path: Path, layout: dict[str, str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``report --quick --json`` on the live root (no GPUDOCTOR_ROOTFS) in a namespace laid out as a
    container is: ``layout`` maps a live path to what is mounted there ("cgroup": /proc/1/cgroup's
    lines, bound over the file; "containerenv": /run a tmpfs holding Podman's /run/.containerenv;
    "dev": /dev a tmpfs with the usual nodes and these NVIDIA ones (bound from /dev/null: character
    devices, as the runtime's are); "module": /proc/driver a tmpfs holding nvidia/version; "devices.list":
    cgroup v1's devices controller at /sys/fs/cgroup/devices; "pci": a bus bound over
    /sys/bus/pci/devices). The fake NVML answers as ``env`` says; libcuda is asked of the real loader."""
    files = tmp_path / "files"
    files.mkdir()
    steps = ["set -e", "mount --make-rprivate /"]
    if "cgroup" in layout:
        (files / "cgroup").write_text(layout["cgroup"])
        steps.append(f"mount --bind {files}/cgroup /proc/1/cgroup")
    if "containerenv" in layout:
        steps += ["mount -t tmpfs run /run", "touch /run/.containerenv"]
    if "dev" in layout:
        (files / "hostdev").mkdir()
        steps += [f"mount --rbind /dev {files}/hostdev", "mount -t tmpfs dev /dev"]
        for node in ["null", "zero", "full", "random", "urandom", *layout["dev"].split()]:
            source = node if node in ("null", "zero", "full", "random", "urandom") else "null"
            steps += [f"touch /dev/{node}", f"mount --bind {files}/hostdev/{source} /dev/{node}"]
        steps.append("ln -s /proc/self/fd /dev/fd")
    if "module" in layout:
        (files / "version").write_text(layout["module"])
        steps += ["mount -t tmpfs driver /proc/driver", "mkdir /proc/driver/nvidia",
                  f"cp {files}/version /proc/driver/nvidia/version"]
    if "devices.list" in layout:
        (files / "devices.list").write_text(layout["devices.list"])
        steps += ["mount -t tmpfs cgroup /sys/fs/cgroup", "mkdir /sys/fs/cgroup/devices",
                  f"cp {files}/devices.list /sys/fs/cgroup/devices/devices.list"]
    if "pci" in layout:
        bus = lay_out(files / "bus", {"0000:65:00.0/vendor": layout["pci"]})
        steps.append(f"mount --bind {bus} /sys/bus/pci/devices")
    steps.append(f"exec {sys.executable} -m gpudoctor report --quick --json")
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("FAKE_", "PYTEST", "NVIDIA_", "GPUDOCTOR_", "KUBERNETES_", "LD_LIBRARY_PATH"))}
    clean.pop("container", None)
    clean.update(env)
    return subprocess.run([*UNSHARE, "sh", "-c", "; ".join(steps)], capture_output=True, text=True,
                          env=clean, cwd=ROOT, timeout=240)


def _lead(proc: subprocess.CompletedProcess, probe: str) -> dict[str, Any]:
    assert proc.returncode == exitcodes.FAIL, proc.stderr[-2000:]
    result = next(r for r in json.loads(proc.stdout)["results"] if r["probe"] == probe)
    fails = [f for f in result["findings"] if f["status"] == "fail"]
    assert fails, result["findings"]
    return fails[0]


def _no_driver_here() -> str:
    live = stack.read_stack("/", {})
    if not is_na(live.cuda_library.path) or not is_na(live.nvml_library.path) or live.container.device_nodes:
        return "this machine has an NVIDIA library or device: the namespace would not lack them"
    return ""


#: The namespace's container: a Docker container's cgroup line and Podman's marker, each read by the
#: live reader from where the engine puts it.
CONTAINER = {"cgroup": DOCKER_CGROUP, "containerenv": ""}
NAMESPACE_CASES = {
    # NVML answers (the runtime mounted libnvidia-ml) but libcuda is on no library path: the driver's
    # compute capability was not asked for, or was asked for and not mounted
    "without-compute": ({**CONTAINER, "dev": "nvidia0 nvidiactl nvidia-uvm"},
                        {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"},
                        "devices", "cuda_cannot_start", ["NVIDIA_DRIVER_CAPABILITIES=utility, without `compute`"]),
    "libcuda-not-mounted": ({**CONTAINER, "dev": "nvidia0 nvidiactl nvidia-uvm"},
                            {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"},
                            "devices", "cuda_cannot_start", ["libcuda was not mounted"]),
    # the host's module (/proc/driver/nvidia/version) against the libnvidia-ml mounted into the container
    "mismatch": ({**CONTAINER, "dev": "nvidia0 nvidiactl", "module": module_version_file("550.90.07")[
                  "proc/driver/nvidia/version"]}, {"FAKE_NVML_INIT": "18"}, "environment",
                 "driver_library_mismatch", ["libnvidia-ml is version 550.107.02", "host's kernel module is 550.90.07"]),
    # a host `systemctl daemon-reload` took the NVIDIA major out of the container's device cgroup
    "access-lost": ({**CONTAINER, "dev": "nvidia0 nvidiactl", "devices.list": "c 1:3 rwm\nc 195:* m\nc 136:* rwm\n"},
                    {"FAKE_NVML_INIT": "999", "NVIDIA_VISIBLE_DEVICES": "all"}, "environment",
                    "container_gpu_access_lost", ["devices.list for major 195: c 195:* m", "daemon-reload"]),
}


@pytest.mark.skipif(bool(UNSHARE_REFUSED), reason=UNSHARE_REFUSED or "-")
@pytest.mark.parametrize("case", list(NAMESPACE_CASES))
def test_the_container_findings_in_a_namespace_laid_out_as_a_container(tmp_path, case):
    """The live readers on the live root: in a user, mount and pid namespace, PID 1's cgroup file, /run,
    /dev, /proc/driver and the device cgroup are mounted as a container engine lays them out, and
    gpudoctor's quick report (the fake NVML answering, libcuda asked of the real loader) names the
    container's fault. A library the runtime mounts is a file on LD_LIBRARY_PATH, named as the driver
    package names it."""
    if _no_driver_here():
        pytest.skip(_no_driver_here())
    layout, env, probe, code, words = NAMESPACE_CASES[case]
    libs = lay_out(tmp_path / "libs", driver_library("lib", "libnvidia-ml", "550.107.02"))
    env = {**env, "PYTHONPATH": str(FAKE_NVML), "FAKE_CUDA": "loader", "LD_LIBRARY_PATH": str(libs / "lib")}
    found = _lead(_in_namespace(tmp_path, layout, env), probe)
    assert found["code"] == code, found
    text = " ".join(found[k] for k in ("summary", "why", "fix"))
    assert all(w in text for w in words), text
    assert "install the nvidia driver" not in found["fix"].lower()
    if code == "container_gpu_access_lost":  # the namespace's own files told the container apart
        said = found["evidence"]["container"]
        assert "/run/.containerenv exists" in said and "/proc/1/cgroup: 12:devices:/docker/8d4c2f0b1a6e" in said, said
    if code == "driver_library_mismatch":  # the library's version came from its real name on the path
        assert found["evidence"]["library_real"] == f"{libs}/lib/libnvidia-ml.so.550.107.02", found


@pytest.mark.skipif(bool(UNSHARE_REFUSED), reason=UNSHARE_REFUSED or "-")
def test_a_container_started_without_gpus_in_a_namespace(tmp_path):
    """No driver library and no /dev/nvidia* in a namespace whose PCI bus (bound over
    /sys/bus/pci/devices; sysfs is the host's in a container) holds an NVIDIA device, and a process
    told it runs in a container as Podman and systemd-nspawn tell it (container=...): the real NVML
    cannot start (no libnvidia-ml), and the quick report says the container was started without GPUs."""
    if _no_driver_here():
        pytest.skip(_no_driver_here())
    proc = _in_namespace(tmp_path, {"pci": "0x10de\n", "dev": ""}, {"container": "podman", "PYTHONPATH": ""})
    found = _lead(proc, "environment")
    assert found["code"] == "container_without_gpus", found
    assert "--gpus" in found["fix"] and "nvidia.com/gpu" in found["fix"]
    assert "0x10de" not in proc.stderr  # the namespace's bus was read, not reported as an error


def test_two_gpus_in_mig_mode_and_torch_seeing_one_is_no_count_mismatch(monkeypatch, tmp_path):
    """The issue's case: NVML lists two GPUs in MIG mode, torch (CUDA) sees one device: that is CUDA's
    rule, not a hidden GPU (device_count_mismatch said "torch sees 1, NVML says 2")."""
    from support.realworld import run_devices

    inputs = {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "mig_mode": 1}, {"name": "NVIDIA H100 80GB HBM3", "mig_mode": 1}],
              "torch": {"version": "2.14.0", "cuda_build": "13.0", "cuda_available": True, "device_count": 1}}
    result = run_devices(inputs, monkeypatch, tmp_path)
    assert "device_count_mismatch" not in {f.code for f in result.findings}
    assert [m.value for m in result.measurements if m.name == "cuda_enumerates"] == [1]
    # a GPU out of MIG mode beside one in it: CUDA enumerates the MIG device only (NVIDIA's MIG user guide)
    mixed = dict(inputs, gpus=[{"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA H100 80GB HBM3", "mig_mode": 1}])
    counted_one = run_devices(mixed, monkeypatch, tmp_path)
    assert "device_count_mismatch" not in {f.code for f in counted_one.findings}
    assert [m.value for m in counted_one.measurements if m.name == "cuda_enumerates"] == [1]
    counted_two = run_devices(dict(mixed, torch=dict(inputs["torch"], device_count=2)), monkeypatch, tmp_path)
    [warned] = [f for f in counted_two.findings if f.code == "mig_one_device_per_process"]
    assert "on 1 GPUs in MIG mode" in warned.summary  # the GPU out of MIG mode is not counted as one in it


def test_hostile_files_and_variables_become_bounded_plain_text(tmp_path):
    """What the readers hand to findings comes from files and the environment: no escape sequence,
    no unbounded text, and a binary module file is unparsed, not an exception."""
    lay_out(tmp_path, {"proc/driver/nvidia/version": "\x00\xff" * 50000,
                       "proc/1/cgroup": "0::/docker-\x1b]0;owned\x07" + "x" * 5000 + "\n",
                       "sys/fs/cgroup/devices/devices.list": "c 195:* m\x1b[2J\n" * 5000})
    env = {"container": "\x1b[31mred" * 100, "NVIDIA_DRIVER_CAPABILITIES": "utility\x1b[2J" * 1000}
    facts = stack.read_stack(str(tmp_path), env)
    assert facts.module == NA("Unparsed")
    box = facts.container
    shown = [box.kind or "", *box.evidence, box.capabilities or "", *box.device_rules]
    assert all("\x1b" not in text and "\x07" not in text and len(text) <= 200 for text in shown), shown
    assert len(box.device_rules) <= 16
