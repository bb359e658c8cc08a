"""Per-process SM utilisation from NVML: the newest sample per PID, the host/container PID
namespace split of R535+ drivers, and the v1 info call with its fallback (fake NVML)."""

from __future__ import annotations

from types import SimpleNamespace

from gpudoctor.backends import NvmlBackend, NvmlGate
from gpudoctor.backends.na import NA
from nvml_fake import FakePynvml, nvml_error


def running(*pids: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(pid=pid, usedGpuMemory=1 << 30) for pid in pids]


def sample(pid: int, stamp: int, sm: int) -> SimpleNamespace:
    return SimpleNamespace(pid=pid, timeStamp=stamp, smUtil=sm, memUtil=0)


def backend_with(**readings) -> tuple[NvmlBackend, FakePynvml]:
    nvml = FakePynvml(readings=readings)
    return NvmlBackend(NvmlGate(nvml)), nvml


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
    [proc] = backend.processes(0)
    assert proc["sm_util_pct"] == NA("PidNamespaceMismatch")
    # no samples at all (none newer than the last seen) is only missing, not a mismatch
    quiet, _ = backend_with(nvmlDeviceGetComputeRunningProcesses=running(12),
                            nvmlDeviceGetProcessUtilization=nvml_error("NotFound"))
    assert quiet.processes(0)[0]["sm_util_pct"] is None


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
