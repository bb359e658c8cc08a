"""``record`` keeps, beside NVML's readings of each GPU process, the host's facts about it (user,
command line, CPU %, resident memory), so that a replay shows who ran what; a process the host
cannot see keeps NVML's readings alone, and ``--anonymize`` redacts the user."""

from __future__ import annotations

import getpass
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

GiB = 2**30
UNSEEN = 4_194_305  # past Linux's largest pid_max: never a process of this machine


@pytest.fixture
def child() -> Any:
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def _record(pids: list[int], where: Path, anonymize: bool = False) -> dict[str, Any]:
    from gpudoctor.backends import NvmlBackend, NvmlGate
    from support.nvml_fake import FakePynvml
    from support.recorded import record_file

    fake = FakePynvml(count=1, readings={"nvmlDeviceGetComputeRunningProcesses": [
        SimpleNamespace(pid=pid, usedGpuMemory=GiB) for pid in pids], "nvmlDeviceGetGraphicsRunningProcesses": []})
    data, interrupted = record_file(NvmlBackend(NvmlGate(fake)), where / "rec.json", seconds=0.2, interval=0.1,
                                    anonymize=anonymize)
    assert not interrupted
    return data


def test_a_recorded_process_keeps_its_user_and_command_and_replays_with_them(child, tmp_path):
    import json

    from gpudoctor.backends import ReplayBackend
    from gpudoctor.sampling.presentation import process_rows, recorded_process_info
    from gpudoctor.sampling.sampler import Sampler

    data = _record([child.pid, UNSEEN], tmp_path)
    seen, unseen = data["nvml"]["samples"][0]["processes"][0]
    assert seen["pid"] == child.pid and seen["command"] == "sleep 600" and seen["user"] == getpass.getuser()
    assert isinstance(seen["host_memory_bytes"], int) and seen["gpu_memory_bytes"] == GiB
    assert unseen["pid"] == UNSEEN and not {"user", "command"} & set(unseen)  # nothing made up for it

    path = tmp_path / "r.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    snap = Sampler(ReplayBackend.from_file(path), None).read()
    rows, _notes = process_rows(snap, recorded_process_info)
    by_pid = {row.pid: row for row in rows}
    assert by_pid[child.pid].command == "sleep 600" and by_pid[child.pid].user == getpass.getuser()
    assert by_pid[UNSEEN].command == "(not recorded)"


def test_anonymize_redacts_the_user_of_a_recorded_process(child, tmp_path):
    from gpudoctor.core.anonymize import REDACTED

    proc = _record([child.pid], tmp_path, anonymize=True)["nvml"]["samples"][0]["processes"][0][0]
    assert proc["user"] == REDACTED and proc["command"] == "sleep 600"
