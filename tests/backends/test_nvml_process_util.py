"""Per-process SM utilisation from NVML: the newest sample per PID, the host/container PID
namespace split of R535+ drivers, and the v1 info call with its fallback (fake NVML)."""

from __future__ import annotations

import os
import tempfile
from types import SimpleNamespace

from gpudoctor.backends import NvmlBackend, NvmlGate
from gpudoctor.backends.na import NA
from gpudoctor.backends.nvml import HOST_PID_NAMESPACE
from support.nvml_fake import FakePynvml, nvml_error

CONTAINER_PID_NAMESPACE = "pid:[4026532771]"


def laid_out_proc(namespace: str) -> str:
    """A /proc whose ``self/ns/pid`` names ``namespace`` (a symbolic link, as the kernel shows it)."""
    root = tempfile.mkdtemp(prefix="gpudoctor-proc-")
    os.makedirs(os.path.join(root, "self", "ns"))
    os.symlink(namespace, os.path.join(root, "self", "ns", "pid"))
    return root


def on_host(backend: NvmlBackend) -> NvmlBackend:
    """The backend as run on the host (the initial PID namespace), wherever the test runs."""
    backend.proc_root = laid_out_proc(HOST_PID_NAMESPACE)
    return backend


def in_container(backend: NvmlBackend) -> NvmlBackend:
    backend.proc_root = laid_out_proc(CONTAINER_PID_NAMESPACE)
    return backend


def running(*pids: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(pid=pid, usedGpuMemory=1 << 30) for pid in pids]


def sample(pid: int, stamp: int, sm: int) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, timeStamp=stamp, smUtil=sm, memUtil=0)


def backend_with(**readings) -> tuple[NvmlBackend, FakePynvml]:
    nvml = FakePynvml(readings=readings)
    return on_host(NvmlBackend(NvmlGate(nvml))), nvml


def test_the_newest_sample_of_a_pid_wins_whatever_the_order():
    backend, _ = backend_with(nvmlDeviceGetComputeRunningProcesses=running(10, 11),
                              nvmlDeviceGetProcessUtilization=lambda last: [
                                  sample(10, 300, 90), sample(11, 250, 40), sample(10, 100, 5)])
    by_pid = {p["pid"]: p["sm_util_pct"] for p in backend.processes(0)}
    assert by_pid == {10: 90, 11: 40}


def test_host_pids_in_the_samples_and_container_pids_in_the_list_say_so():
    """In a container on an R535+ driver the running list holds the container's PIDs and the
    samples the host's: no sample can be joined, and that is said, not left blank."""
    backend, _ = backend_with(nvmlDeviceGetComputeRunningProcesses=running(12),
                              nvmlDeviceGetProcessUtilization=lambda last: [sample(981234, 300, 77)])
    [proc] = in_container(backend).processes(0)
    assert proc["sm_util_pct"] == NA("PidNamespaceMismatch")
    # no samples at all (none newer than the last seen) is only missing, not a mismatch
    quiet, _ = backend_with(nvmlDeviceGetComputeRunningProcesses=running(12),
                            nvmlDeviceGetProcessUtilization=nvml_error("NotFound"))
    assert in_container(quiet).processes(0)[0]["sm_util_pct"] is None


def test_the_v1_info_call_is_used_where_the_driver_has_it():
    backend, nvml = backend_with(nvmlDeviceGetComputeRunningProcesses=running(10),
                                 nvmlDeviceGetProcessesUtilizationInfo=lambda last: [sample(10, 5, 61)],
                                 nvmlDeviceGetProcessUtilization=lambda last: [sample(10, 5, 1)])
    [proc] = backend.processes(0)
    assert proc["sm_util_pct"] == 61
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 0


def test_a_driver_without_the_v1_call_falls_back_once_and_for_good():
    backend, nvml = backend_with(nvmlDeviceGetComputeRunningProcesses=running(10),
                                 nvmlDeviceGetProcessesUtilizationInfo=nvml_error("NotSupported"),
                                 nvmlDeviceGetProcessUtilization=lambda last: [sample(10, 5, 33)])
    assert backend.processes(0)[0]["sm_util_pct"] == 33
    assert backend.processes(0)[0]["sm_util_pct"] == 33
    assert nvml.calls["nvmlDeviceGetProcessesUtilizationInfo"] == 1
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 2


def test_a_mig_gpu_without_the_v1_call_leaves_the_other_gpus_on_it():
    """Issue #40 item 5: the fallback to the older call is per device. A GPU in MIG mode answers
    NotSupported for nvmlDeviceGetProcessesUtilizationInfo; its neighbour on the same driver has
    the call and must keep using it (one flag per backend switched every GPU to the old call)."""
    nvml = FakePynvml(count=2, readings={"nvmlDeviceGetComputeRunningProcesses": running(10)})
    nvml.devices[0].update(nvmlDeviceGetMigMode=(1, 1),
                           nvmlDeviceGetProcessesUtilizationInfo=nvml_error("NotSupported"),
                           nvmlDeviceGetProcessUtilization=nvml_error("NotSupported"))
    nvml.devices[1].update(nvmlDeviceGetProcessesUtilizationInfo=lambda last: [sample(10, 5, 61)],
                           nvmlDeviceGetProcessUtilization=lambda last: [sample(10, 5, 1)])
    backend = on_host(NvmlBackend(NvmlGate(nvml)))
    for _ in range(2):
        assert backend.processes(0)[0]["sm_util_pct"] is None  # the MIG GPU: no per-process figure
        assert backend.processes(1)[0]["sm_util_pct"] == 61    # the other: the v1 call's answer
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 2  # only the MIG GPU fell back


def test_a_container_pid_equal_to_a_host_pid_is_not_credited_with_its_sm():
    """Issue #40 item 4: in a container the list's PID 12 and the samples' host PID 12 are two
    processes; the SM % of host PID 12 (another job) must not be credited to the container's 12.
    The old rule saw a mismatch only when the two sets shared no PID."""
    samples = lambda last: [sample(12, 300, 77), sample(981234, 300, 95)]  # noqa: E731
    listed = running(12, 40)
    contained = in_container(NvmlBackend(NvmlGate(FakePynvml(readings={
        "nvmlDeviceGetComputeRunningProcesses": listed, "nvmlDeviceGetProcessUtilization": samples}))))
    assert {p["pid"]: p["sm_util_pct"] for p in contained.processes(0)} == {
        12: NA("PidNamespaceMismatch"), 40: NA("PidNamespaceMismatch")}
    # on the host both are host PIDs: the same answers join
    hosted, _ = backend_with(nvmlDeviceGetComputeRunningProcesses=listed, nvmlDeviceGetProcessUtilization=samples)
    assert {p["pid"]: p["sm_util_pct"] for p in hosted.processes(0)} == {12: 77, 40: None}
    # no /proc to tell (no PID namespaces): the old rule, sets that share no PID say so
    bare = NvmlBackend(NvmlGate(FakePynvml(readings={"nvmlDeviceGetComputeRunningProcesses": running(5),
                                                     "nvmlDeviceGetProcessUtilization": samples})))
    bare.proc_root = os.path.join(laid_out_proc(HOST_PID_NAMESPACE), "missing")
    assert bare.processes(0)[0]["sm_util_pct"] == NA("PidNamespaceMismatch")
