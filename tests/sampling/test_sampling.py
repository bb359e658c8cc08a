"""gpudoctor.sampling.sampler: the one sampler of GPUs over time, and what hangs cannot block.

The NVML stand-in is the pynvml-shaped fake of test_backends (through the real NvmlGate and
NvmlBackend); the hang cases use a backend whose call waits on an Event that is never set.
No timed assertions beyond generous bounds.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from support.nvml_stand_ins import fake_pynvml, v2_answer, v2_memory_nvml

from gpudoctor.backends import NA, NvmlBackend, NvmlGate, ReplayBackend
from gpudoctor.sampling.sampler import Sampler

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
STANDIN = TESTS / "data" / "handmade_two_gpu_training_standin.json"
GPU_LOST = TESTS / "data" / "exporter_gpu_lost_handmade.json"  # two GPUs; GPU 1 lost in sample 2


def live(**kw):
    return NvmlBackend(NvmlGate(fake_pynvml(**kw)))


def test_reads_take_only_what_is_asked():
    util = Sampler(live(), with_processes=False, reads="utilization").read()
    assert set(util.devices[0].sample) == {"t", "gpu_util_pct", "mem_util_pct"}
    assert util.devices[0].sample["gpu_util_pct"] == 55
    memory = Sampler(live(), with_processes=False, reads="memory").read()
    assert set(memory.devices[0].sample) == {"t", "memory_used_bytes", "memory_free_bytes", "memory_total_bytes",
                                             "memory_reserved_bytes"}
    full = Sampler(live(), reads="full").read()
    assert "pcie_tx_kbps" in full.devices[0].sample and full.devices[0].processes[0].pid == 7


def test_only_the_chosen_devices_are_read():
    snap = Sampler(ReplayBackend.from_file(STANDIN), with_processes=False, devices=[1]).read()
    assert [d.index for d in snap.devices] == [1] and snap.count == 2


def test_fault_state_per_gpu_and_bounded_history():
    sampler = Sampler(ReplayBackend.from_file(GPU_LOST), with_processes=False, history_length=3)
    first = sampler.read()
    assert first.devices[1].fault is None and sampler.faults == {}
    for _ in range(4):
        sampler.read()  # the recording holds its last sample
    assert sampler.faults == {1: NA("GpuIsLost")}  # GPU 1 fell off the bus; GPU 0 carries on
    assert len(sampler.history.series(0, "gpu_util_pct")) == 3 and sampler.history.series(1, "gpu_util_pct")[-1] is None


def test_nvml_restart_with_back_off_belongs_to_the_core():
    class Clock:
        now = 0.0

        def __call__(self):
            return self.now

    clock = Clock()
    mod = fake_pynvml()
    tries = {"n": 0}

    def init():
        tries["n"] += 1
        if tries["n"] < 3:
            raise type("NVMLError_DriverNotLoaded", (Exception,), {})()
    mod.nvmlInit = init
    sampler = Sampler(NvmlBackend(NvmlGate(mod)), with_processes=False, recover=True, retry_first_s=5,
                      clock=clock)
    assert sampler.read().retry_in_s == 5 and sampler.reinits == 0
    clock.now = 5.0
    assert sampler.read().retry_in_s == 10 and sampler.reinits == 1  # still no driver: the wait doubles
    clock.now = 15.0
    snap = sampler.read()
    assert snap.nvml_status is None and snap.retry_in_s is None and sampler.reinits == 2
    assert snap.devices[0].static["name"] == "Fake GPU"
    replay = Sampler(ReplayBackend.from_file(GPU_LOST), recover=True)
    assert replay.recover is False  # a recording cannot be restarted


def test_the_thread_samples_over_time_and_stops():
    seen = []
    sampler = Sampler(live(), with_processes=False, reads="fast", interval_s=0.01, on_sample=seen.append)
    sampler.start()
    assert sampler.wait_first(30)
    deadline = time.monotonic() + 30
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sampler.close() is True and not sampler.running
    assert len(seen) >= 3 and all(s.devices[0].sample["gpu_util_pct"] == 55 for s in seen)
    assert [s.t_mono for s in seen] == sorted(s.t_mono for s in seen)


class Hung(ReplayBackend):
    """A recording whose reads hang in the 'driver' until ``release`` is set (never, here)."""

    release = threading.Event()
    inside = threading.Event()

    def sample(self, index):
        Hung.inside.set()
        Hung.release.wait()
        return super().sample(index)


def test_a_hung_read_holds_only_the_sampler_thread():
    gpu = Hung.from_file(STANDIN)
    closed = []
    gpu.close = lambda: closed.append(1)  # type: ignore[method-assign]
    sampler = Sampler(gpu, with_processes=False, interval_s=0.05).start()
    assert Hung.inside.wait(30)
    assert sampler.wait_first(0.2) is False and sampler.latest is None
    assert sampler.close(join_s=0.2) is False and closed == []  # no nvmlShutdown under a running call
    assert sampler._thread is not None and sampler._thread.daemon  # nothing waits for it at exit


_TUI_SCRIPT = """
import asyncio, os, signal, sys, threading
sys.path.insert(0, {tests!r})
from support.tui_support import STANDIN, fixed_host
from gpudoctor.backends import ReplayBackend
from gpudoctor.tui.app import GpudoctorApp

never = threading.Event()

class Hung(ReplayBackend):
    def sample(self, index):
        never.wait()  # an NVML call that never comes back

app = GpudoctorApp(lambda: Hung.from_file(STANDIN), interval=0.25, host_sampler=fixed_host,
                   workload_check=lambda: "n/a")

async def main():
    async with app.run_test(size=(80, 24)) as pilot:
        while app.state.stalled_s is None:
            await pilot.pause(0.1)
        if {how!r} == "q":
            await pilot.press("q")
        else:
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(60)

try:
    asyncio.run(main())
except KeyboardInterrupt:
    print("interrupted", flush=True)
print("left the app", app.return_code, flush=True)
"""


def _run_tui_with_a_hung_driver(how: str) -> subprocess.CompletedProcess:
    script = _TUI_SCRIPT.format(tests=str(TESTS), how=how)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=180)


def test_the_tui_quits_with_q_while_an_nvml_call_hangs():
    done = _run_tui_with_a_hung_driver("q")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "left the app 0" in done.stdout


def test_ctrl_c_ends_the_tui_while_an_nvml_call_hangs():
    done = _run_tui_with_a_hung_driver("sigint")
    assert "interrupted" in done.stdout, done.stderr[-2000:]
    assert "left the app" in done.stdout  # and the process ended: nothing joined the hung thread


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return response.read().decode()


def test_the_exporter_serves_while_its_first_sample_hangs():
    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry, serve_metrics

    Hung.inside.clear()
    sampler = GpuSampler(Hung.from_file(STANDIN), interval=0.05)
    sampler.start()
    server, _thread = serve_metrics(build_registry(GpudoctorCollector(sampler, None, "nvml")), "127.0.0.1", 0)
    try:
        assert Hung.inside.wait(30)
        port = server.server_address[1]
        first = _scrape(port)
        assert "gpudoctor_nvml_up 0.0" in first
        deadline = time.monotonic() + 60
        while 'reason="SampleStale"' not in _scrape(port):  # 3 intervals + 1 s without a sample
            assert time.monotonic() < deadline, "the hung first sample was never marked stale"
            time.sleep(0.2)
    finally:
        server.shutdown()
        server.server_close()
        sampler.stop(0.1)


_EXPORTER_SCRIPT = """
import sys, threading
import gpudoctor.backends
from gpudoctor.backends import ReplayBackend
from gpudoctor.cli import main

never = threading.Event()

class Hung(ReplayBackend):
    def sample(self, index):
        never.wait()  # the first NVML call never comes back

gpudoctor.backends.open_gpu_backend = lambda replay=None, loop=False: Hung.from_file({standin!r})
sys.exit(main(["exporter", "--port", "0", "--interval", "0.05", "--no-report", "--exit-after", "8"]))
"""


def test_the_exporter_command_serves_at_once_and_stops_while_its_first_sample_hangs():
    script = _EXPORTER_SCRIPT.format(standin=str(STANDIN))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert "serving http://127.0.0.1:" in line, line
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        body = _scrape(port)  # served before any sample came back
        assert "gpudoctor_nvml_up 0.0" in body and "gpudoctor_nvml_error_info" in body
        assert proc.wait(120) == 0  # --exit-after ends it; nothing waits for the hung call
        rest = proc.stderr.read()
        assert "has not come back" in rest and "leaving NVML open" in rest and "stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _v2_nvml():
    return NvmlBackend(NvmlGate(v2_memory_nvml(v2_answer)[0]))


def test_reserved_memory_is_shown_apart_in_watch_and_the_tui_text():
    from gpudoctor.sampling.presentation import fmt_memory, watch_line, watch_record

    snap = Sampler(_v2_nvml(), with_processes=False).read()
    dev = snap.devices[0]
    assert fmt_memory(dev) == "3.0/80.0 GiB +0.5 reserved"  # the TUI's mem row and watch's line
    assert "mem 3.0/80.0 GiB +0.5 reserved" in watch_line(snap, dev)
    record = watch_record(snap, dev)
    assert record["memory_used_bytes"] == 3 << 30 and record["memory_reserved_bytes"] == 1 << 29
    old = Sampler(ReplayBackend.from_file(STANDIN), with_processes=False).read()
    assert "memory_reserved_bytes" not in watch_record(old, old.devices[0])  # recorded before v2: as before
    assert "reserved" not in fmt_memory(old.devices[0])


def test_the_recorder_and_the_exporter_keep_reserved_memory(tmp_path):
    from prometheus_client import generate_latest

    from gpudoctor.exporter import GpudoctorCollector, GpuSampler, build_registry
    from support.recorded import record_file

    sampler = GpuSampler(_v2_nvml(), interval=1.0)
    sampler.sample_once()
    body = generate_latest(build_registry(GpudoctorCollector(sampler, None, "nvml"))).decode()
    assert "gpudoctor_gpu_memory_reserved_bytes{" in body and "5.36870912e+08" in body
    path = tmp_path / "v2.json"
    data, interrupted = record_file(_v2_nvml(), path, seconds=0.2, interval=0.1)
    assert not interrupted and data["nvml"]["samples"][0]["devices"][0]["memory_reserved_bytes"] == 1 << 29
    replay = ReplayBackend.from_file(path)  # the loader checks it against docs/recording.schema.json
    assert replay.memory(0).memory_reserved_bytes == 1 << 29
