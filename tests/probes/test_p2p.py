"""Peer-to-peer paths between GPUs (probes/p2p.py): NVML's topology and P2P status through the gate,
ACS and the IOMMU read from sysfs laid out as the kernel lays it out (tests/support/pcie_tree.py), the
judgement, and the --full copies (stubs here: torch on the CPU; the real peer copy is marked gpu).

Not yet measured on a GPU: no figure here is a GPU's.
"""

from __future__ import annotations

import os

import pytest

from gpudoctor.backends import NvmlBackend, NvmlGate, pcie_paths
from gpudoctor.backends.na import NA, is_na
from gpudoctor.core.model import POISONED, ProbeResult, Status
from gpudoctor.probes import ProbeContext, _p2p
from support.nvml_fake import FakePynvml, nvml_error, peer_paths
from support.pcie_tree import DOWNSTREAM, GPUS, ROOT_PORT, SWITCH_UP, config_space, lay_out

REDIRECT = 0x1D  # SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+ (nccl#2079's root ports)


def _nvml(level: int = 10, **status: int) -> FakePynvml:
    nvml = FakePynvml(2, readings={"nvmlDeviceGetName": "NVIDIA RTX 6000 Ada Generation"})
    for i, bdf in enumerate(GPUS):
        nvml.devices[i]["nvmlDeviceGetPciInfo"] = type("Pci", (), {"busId": ("0000" + bdf).encode()})()
    peer_paths(nvml, level, **status)
    return nvml


def _run(nvml: FakePynvml, root, monkeypatch, level: str = "quick") -> ProbeResult:
    from gpudoctor.probes import p2p

    monkeypatch.setattr(pcie_paths, "ROOT", str(root))
    return p2p.run(ProbeContext(NvmlBackend(NvmlGate(nvml)), level=level))


def _codes(r: ProbeResult) -> dict[str, Status]:
    return {f.code: f.status for f in r.findings}


# --------------------------------------------------------------------------- the readers
def test_acs_is_read_from_the_extended_configuration_space():
    acs = pcie_paths.acs_from_config("0000:02:08.0", config_space(REDIRECT))
    assert acs.text() == "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
    assert acs.redirects == ["ReqRedir", "CmpltRedir"] and acs.raw == REDIRECT
    assert pcie_paths.acs_from_config("x", config_space(None)) is None  # no ACS capability
    assert "root" in pcie_paths.acs_from_config("x", config_space(REDIRECT, readable=False))
    # a loop in the capability list, or garbage, ends
    looped = bytearray(config_space(None))
    looped[0x100:0x104] = (0x0001 | 0x100 << 20).to_bytes(4, "little")
    assert pcie_paths.acs_from_config("x", bytes(looped)) is None


def test_lspcis_acsctl_lines_give_the_same_control():
    text = ("\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+\n"
            "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n")
    [acs] = pcie_paths.acs_from_lspci(text, "0000:02:08.0")
    assert acs.bits == pcie_paths.acs_from_register("0000:02:08.0", REDIRECT).bits


def test_the_bridges_above_each_gpu_and_between_two(tmp_path):
    root = str(lay_out(tmp_path))
    above = [pcie_paths.upstream_bridges(g, root) for g in GPUS]
    assert above[0] == [ROOT_PORT, SWITCH_UP, DOWNSTREAM[0]]
    assert _p2p.bridges_between(*above) == [DOWNSTREAM[0], DOWNSTREAM[1]]  # the switch's downstream ports
    assert _p2p.bridges_between(["0000:40:01.1"], ["0000:60:01.1"]) == ["0000:40:01.1", "0000:60:01.1"]
    assert pcie_paths.upstream_bridges("0000:99:00.0", root) is None


def test_the_iommu_state_from_groups_and_the_command_line(tmp_path):
    root = str(lay_out(tmp_path, iommu_type="DMA-FQ", cmdline="ro quiet intel_iommu=on"))
    state = pcie_paths.read_iommu(list(GPUS), root)
    assert state.readable and state.units == ["dmar0"] and state.cmdline == ["intel_iommu=on"]
    assert state.translating() == list(GPUS)
    none = pcie_paths.read_iommu(list(GPUS), str(lay_out(tmp_path / "b", iommu_type=None)))
    assert none.group_types == {g: None for g in GPUS} and none.translating() == []
    # a kernel before 5.11 has no type file: the command line decides
    assert pcie_paths.group_type_from_cmdline(["intel_iommu=on", "iommu=pt"], ["dmar0"]) == "identity"
    assert pcie_paths.group_type_from_cmdline(["intel_iommu=on"], ["dmar0"]) == "DMA"
    assert pcie_paths.group_type_from_cmdline([], []) is None
    assert not pcie_paths.read_iommu(list(GPUS), str(tmp_path / "nothing")).readable


def test_nvml_topology_and_p2p_status_through_the_gate():
    gpu = NvmlBackend(NvmlGate(_nvml(20, read=0, nvlink=5)))
    assert gpu.p2p(0, 1) == {"topology": 20, "read": 0, "write": 0, "nvlink": 5, "atomics": 5}
    # nvidia-ml-py declares NVML_P2P_CAPS_INDEX_READ = 0, (a tuple): NVML's 0 is asked, not (0,)
    slipped = _nvml(10, read=0, nvlink=5)
    slipped.NVML_P2P_CAPS_INDEX_READ = (0,)
    assert NvmlBackend(NvmlGate(slipped)).p2p(0, 1)["read"] == 0
    lost = _nvml()
    lost.lost = {0}
    assert NvmlBackend(NvmlGate(lost)).p2p(0, 1)["read"] == NA("GpuIsLost")
    old = FakePynvml(2)  # a driver without the functions: NA, never an exception
    assert all(is_na(v) for v in NvmlBackend(NvmlGate(old)).p2p(0, 1).values())


# --------------------------------------------------------------------------- the judgement, end to end of the probe
def test_acs_redirect_under_one_switch_fails_with_the_bridges_and_the_fix(tmp_path, monkeypatch):
    r = _run(_nvml(10), lay_out(tmp_path, acs=REDIRECT), monkeypatch)
    assert r.status == Status.FAIL and _codes(r)["p2p_acs_redirect"] == Status.FAIL
    [f] = [f for f in r.findings if f.code == "p2p_acs_redirect"]
    assert DOWNSTREAM[0] in f.summary and "ReqRedir+" in f.summary and "GPU 0 and GPU 1" in f.summary
    assert "setpci" in f.fix and "ECAP_ACS+0x6.w=0000" in f.fix and "NCCL_P2P_DISABLE=1" in f.fix
    assert "BIOS" in f.fix


def test_acs_off_and_iommu_passthrough_pass(tmp_path, monkeypatch):
    r = _run(_nvml(10), lay_out(tmp_path, acs=0x01), monkeypatch)  # SrcValid alone redirects nothing
    assert r.status == Status.PASS, [(f.code, f.summary) for f in r.findings]
    assert r.details["pairs"][0]["topology"] == "one PCIe switch (PIX)"


def test_a_translating_iommu_warns_with_iommu_pt(tmp_path, monkeypatch):
    r = _run(_nvml(30), lay_out(tmp_path, iommu_type="DMA", cmdline="ro intel_iommu=on"), monkeypatch)
    assert _codes(r) == {"p2p_iommu_translates": Status.WARN}
    [f] = r.findings
    assert "DMA" in f.summary and "intel_iommu=on" in f.summary and "iommu=pt" in f.fix


def test_nvlink_pairs_need_no_pcie_checks(tmp_path, monkeypatch):
    r = _run(_nvml(10, nvlink=0), lay_out(tmp_path, acs=REDIRECT, iommu_type="DMA"), monkeypatch)
    assert r.status == Status.PASS and not r.findings


def test_no_peer_to_peer_from_nvml_is_a_note_not_a_failure(tmp_path, monkeypatch):
    r = _run(_nvml(50, read=1), lay_out(tmp_path, acs=REDIRECT), monkeypatch)
    assert _codes(r) == {"p2p_not_supported": Status.PASS}
    assert "chipset" in r.findings[0].summary


@pytest.mark.parametrize("layout, words", [
    (dict(readable=False), "root only"),
    (dict(vm=True), "virtual machine"),
])
def test_what_cannot_be_read_is_said_not_passed(tmp_path, monkeypatch, layout, words):
    r = _run(_nvml(10), lay_out(tmp_path, acs=REDIRECT, **layout), monkeypatch)
    assert r.status == Status.SKIP and "p2p_unreadable" in _codes(r)
    assert any(words in f.summary for f in r.findings), [f.summary for f in r.findings]
    assert "p2p_acs_redirect" not in _codes(r)


def test_a_path_partly_unreadable_is_not_a_pass(tmp_path, monkeypatch):
    """One pair NVML refuses (a pass note), the other's ACS behind root: the probe skips, not passes."""
    nvml = _nvml(10)
    nvml.count = 3
    nvml.devices.append(dict(nvml.devices[0]))
    peer_paths(nvml, 10, pairs={(0, 2): {"read": 1}, (1, 2): {"read": 1}})
    r = _run(nvml, lay_out(tmp_path, acs=REDIRECT, readable=False), monkeypatch)
    assert {"p2p_not_supported", "p2p_unreadable"} <= set(_codes(r)) and r.status == Status.SKIP


def test_no_sysfs_says_so(tmp_path, monkeypatch):
    r = _run(_nvml(10), tmp_path / "empty", monkeypatch)
    assert r.status == Status.SKIP
    assert any("/sys/bus/pci is not here" in f.summary for f in r.findings)


def test_one_gpu_or_no_nvml_is_a_skip(tmp_path, monkeypatch):
    from gpudoctor.probes import p2p

    one = p2p.run(ProbeContext(NvmlBackend(NvmlGate(FakePynvml(1)))))
    assert one.status == Status.SKIP and "fewer than two" in one.summary
    none = p2p.run(ProbeContext(NvmlBackend(NvmlGate(FakePynvml(init_error="LibraryNotFound")))))
    assert none.status == Status.SKIP


def test_a_replay_has_no_host_path(tmp_path, monkeypatch):
    from gpudoctor.probes import p2p

    ctx = ProbeContext(NvmlBackend(NvmlGate(_nvml(10))), replay=True)
    r = p2p.run(ctx)
    assert r.status == Status.SKIP and any("replayed recording" in f.summary for f in r.findings)


# --------------------------------------------------------------------------- --full: copies (stubs)
def _pair(nvlink: int = 5) -> _p2p.PairPath:
    return _p2p.PairPath(0, 1, {"topology": 10, "read": 0, "write": 0, "nvlink": nvlink, "atomics": 5},
                         ("0000:03:00.0", "0000:04:00.0"))


def test_a_copy_checks_every_byte_and_times_the_rate():
    torch = _StubTorch(gbs=25.0)
    copy = _p2p.copy_between(torch, "cpu", "cpu", 1 << 20, timeout_s=5, wait=lambda deadline: True,
                             clock_s=_coarse_clock(), ceiling_gbs=25.0, copy=torch.cuda.copy)
    assert copy.wrong == 0 and copy.gb_per_s == pytest.approx(25.0)

    def corrupting(dst, src):
        dst.copy_(src)
        dst[::4096] ^= 0xFF  # every 4096th byte flipped
    bad = _p2p.copy_between(torch, "cpu", "cpu", 1 << 20, timeout_s=5, wait=lambda deadline: True,
                            clock_s=lambda: 0.0, copy=corrupting)
    assert bad.wrong == 256
    r = ProbeResult("p2p")
    _p2p.judge_copy(r, _pair(), bad, _p2p.Link("PCIe gen 4 x16", 31.5), "cuda:0 -> cuda:1")
    assert _codes(r) == {"p2p_copy_corrupt": Status.FAIL} and "256 of 1048576" in r.findings[0].summary


@pytest.mark.parametrize("ceiling, true_gbs", [(900.0, 810.0), (450.0, 400.0), (31.5, 26.0), (None, 20.0)])
def test_nvlink_rates_are_timed_by_cuda_events_over_a_batch_long_enough(ceiling, true_gbs):
    """A host clock that ticks a millisecond a call (launches, 1 ms polls) cannot time a 64 MiB copy at
    NVLink 5's 900 GB/s (75 us): the rate comes from timing events on the source device's stream, over a
    batch of >= 20 ms at the link's ceiling, and a copy at 90 % of NVLink 5 is not called slow."""
    torch = _StubTorch(gbs=true_gbs)
    nbytes = 64 << 20
    copy = _p2p.copy_between(torch, "cpu", "cpu", nbytes, timeout_s=10, wait=lambda deadline: True,
                             clock_s=_coarse_clock(), ceiling_gbs=ceiling, copy=torch.cuda.copy, pause=lambda: None)
    assert copy.gb_per_s == pytest.approx(true_gbs, rel=1e-6)
    batch = torch.cuda.timed[-1]
    assert batch["stream"] == ("stream of", "cpu")  # the source device's current stream
    assert batch["copies"] >= _p2p.MIN_REPEATS and batch["copies"] * nbytes / ((ceiling or true_gbs) * 1e9) >= 0.0199
    r = ProbeResult("p2p")
    _p2p.judge_copy(r, _pair(), copy, _p2p.Link("NVLink (18 link(s))", ceiling), "cuda:0 -> cuda:1")
    assert _codes(r) == {"p2p_copy_ok": Status.PASS}


def test_a_copy_that_never_finishes_is_a_hang():
    torch = _StubTorch()
    hung = _p2p.copy_between(torch, "cpu", "cpu", 4096, timeout_s=10, wait=lambda deadline: False,
                             clock_s=lambda: 0.0)
    r = ProbeResult("p2p")
    _p2p.judge_copy(r, _pair(), hung, _p2p.Link("PCIe gen 4 x16", 31.5), "cuda:0 -> cuda:1")
    assert _codes(r) == {"p2p_copy_hung": Status.FAIL}
    # the first copy finished, the timed batch never does: a hang too, found by polling the event to a deadline
    stuck = _StubTorch(gbs=25.0, hang_after=1)
    later = _p2p.copy_between(stuck, "cpu", "cpu", 4096, timeout_s=10, wait=lambda deadline: True,
                              clock_s=_coarse_clock(), ceiling_gbs=25.0, copy=stuck.cuda.copy, pause=lambda: None)
    assert later.seconds is None and later.waited_s > 10


def test_the_rate_is_judged_against_the_link():
    slow = _p2p.PeerCopy(64 << 20, (64 << 20) / 3e9, 0, 64 << 20)  # 3 GB/s
    link = _p2p.link_of(_pair(), {"pcie_gen_max": 4, "pcie_width_max": 16}, {"pcie_gen_max": 5, "pcie_width_max": 8})
    assert link.label == "PCIe gen 4 x8" and link.gb_per_s == pytest.approx(15.75, rel=0.01)
    r = ProbeResult("p2p")
    _p2p.judge_copy(r, _pair(), slow, link, "cuda:0 -> cuda:1")
    assert _codes(r) == {"p2p_copy_slow": Status.WARN}
    fast = _p2p.PeerCopy(64 << 20, (64 << 20) / 12e9, 0, 64 << 20)
    r = ProbeResult("p2p")
    _p2p.judge_copy(r, _pair(), fast, link, "cuda:0 -> cuda:1")
    assert _codes(r) == {"p2p_copy_ok": Status.PASS}
    nvlinks = [{"link": i, "active": True, "version": 6, "version_name": "4.0", "remote_type": "switch"}
               for i in range(18)]
    over = _p2p.link_of(_pair(nvlink=0), {}, {}, nvlinks)
    assert over.label == "NVLink (18 link(s), version 6 (as nvmlNvlinkVersion_t: NVLink 4.0))"
    assert over.gb_per_s == 450.0


@pytest.mark.parametrize("version, links, ceiling", [
    ("3.1", 4, 56.25),    # GA102 bridges (RTX 3090, A6000, A40): 112.5 GB/s both ways over 4 links
    ("3.0", 12, 300.0),   # A100 SXM: 600 GB/s both ways over 12 links
    ("4.0", 18, 450.0), ("5.0", 18, 900.0), ("4", 18, 450.0),
    ("9.7", 4, None),     # a version not known: no ceiling to judge against, rather than a guess
])
def test_the_nvlink_ceiling_is_keyed_on_the_full_version(version, links, ceiling):
    nvlinks = [{"link": i, "active": True, "version_name": version, "remote_type": "switch"} for i in range(links)]
    assert _p2p.link_of(_pair(nvlink=0), {}, {}, nvlinks).gb_per_s == ceiling


def test_a_link_named_as_a_generation_its_gpu_lacks_is_shown_raw_and_not_judged():
    """Issue #40 item 2 in the p2p probe. nvml.h declares nvmlDeviceGetNvLinkVersion's answer a plain
    unsigned int; H100 links have answered 7, which pynvml's nvmlNvlinkVersion_t names NVLink 5.0
    (public NCCL benchmark scripts give Hopper 25 GB/s per link over that name). Judged at 5.0's
    50 GB/s per link, a copy at 80 % of an H100's 450 GB/s read 40 % of a 900 GB/s ceiling: a false
    p2p_copy_slow. The link shows the raw value beside the enum's name, and a name that the GPU's
    architecture has no such generation of is not judged until a GPU run settles it."""
    def links(raw: int, name: str) -> list[dict[str, object]]:
        return [{"link": i, "active": True, "version": raw, "version_name": name, "remote_type": "switch"}
                for i in range(18)]

    hopper, blackwell = {"architecture": 9}, {"architecture": 10}
    link = _p2p.link_of(_pair(nvlink=0), hopper, hopper, links(7, "5.0"))
    assert link.gb_per_s is None
    assert link.label == "NVLink (18 link(s), version 7 (as nvmlNvlinkVersion_t: NVLink 5.0))"
    copy = _p2p.PeerCopy(64 << 20, (64 << 20) / 360e9, 0, 64 << 20)  # 360 GB/s: 80 % of 18 x 25
    r = ProbeResult("p2p")
    _p2p.judge_copy(r, _pair(nvlink=0), copy, link, "cuda:0 -> cuda:1")
    assert _codes(r) == {"p2p_copy_ok": Status.PASS}
    assert "version 7 (as nvmlNvlinkVersion_t: NVLink 5.0)" in r.measurements[0].note
    # the names each architecture has are judged: Hopper's 4.0, Blackwell's 5.0
    assert _p2p.link_of(_pair(nvlink=0), hopper, hopper, links(6, "4.0")).gb_per_s == 450.0
    assert _p2p.link_of(_pair(nvlink=0), blackwell, blackwell, links(7, "5.0")).gb_per_s == 900.0
    # an architecture not read (a replay, an old driver): the enum's reading, as before
    assert _p2p.link_of(_pair(nvlink=0), {"architecture": NA("NotSupported")}, {}, links(7, "5.0")).gb_per_s == 900.0


def _coarse_clock():
    """A host clock that moves a millisecond at each reading: far too coarse to time a peer copy."""
    ticks = iter(range(1_000_000))
    return lambda: next(ticks) * 1e-3


class _StubCuda:
    """torch.cuda as the probe's copies use it, over CPU tensors: peer access, current streams, and
    events on a modelled GPU timeline. ``copy`` is a peer copy that takes nbytes / ``gbs`` of GPU time;
    an event recorded on a stream stamps the time its queued work ends; ``query`` says whether the
    stream got there (never, with ``done`` False, or for events after ``hang_after`` copies);
    ``elapsed_time`` is in milliseconds, as CUDA's. ``timed``: each start-end pair of timing events."""

    def __init__(self, done: bool = True, gbs: float = 25.0, hang_after: int | None = None) -> None:
        cuda = self
        self.gpu_s = 0.0
        self.copies = 0
        self.timed: list[dict] = []

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.timing = enable_timing
                self.at: float | None = None

            def record(self, stream: object) -> None:
                self.at, self.stream, self.after = cuda.gpu_s, stream, cuda.copies

            def query(self) -> bool:
                return done and (hang_after is None or self.after <= hang_after)

            def elapsed_time(self, end: "Event") -> float:
                assert self.timing and end.timing and self.stream == end.stream and end.query()
                cuda.timed.append({"stream": end.stream, "copies": end.after - self.after})
                return (end.at - self.at) * 1e3

        self.Event = Event
        self.gbs = gbs

    def copy(self, dst, src) -> None:
        dst.copy_(src)
        self.copies += 1
        self.gpu_s += src.numel() / (self.gbs * 1e9)

    @staticmethod
    def can_device_access_peer(a: int, b: int) -> bool:
        return True

    @staticmethod
    def current_stream(device: object) -> tuple[str, object]:
        return ("stream of", device)


class _StubTorch:
    """Real torch (CPU tensors) with a stub ``cuda``: the probe's --full copies run end to end here."""

    def __init__(self, done: bool = True, gbs: float = 25.0, hang_after: int | None = None) -> None:
        import torch

        self._torch = torch
        self.cuda = _StubCuda(done, gbs, hang_after)

    def __getattr__(self, name: str):
        return getattr(self._torch, name)


@pytest.mark.parametrize("done", [True, False])
def test_full_copies_each_way_between_every_pair_with_stubs(tmp_path, monkeypatch, done):
    pytest.importorskip("torch")
    from gpudoctor.probes import _gpu, _measuring, p2p

    devices = [_gpu.Device(i, i, "stub", 1 << 30, (9, 0)) for i in range(2)]
    monkeypatch.setattr(_measuring, "torch_and_devices", lambda ctx, probe: (_StubTorch(done), devices))
    monkeypatch.setattr(_gpu, "torch_device", lambda torch, device: "cpu")
    monkeypatch.setattr(p2p, "COPY_BYTES", 1 << 20)
    monkeypatch.setattr(p2p, "COPY_TIMEOUT_S", 0.2)
    nvml = _nvml(10)
    for device in nvml.devices:
        device.update(nvmlDeviceGetMaxPcieLinkGeneration=4, nvmlDeviceGetMaxPcieLinkWidth=16)
    r = _run(nvml, lay_out(tmp_path, acs=0), monkeypatch, level="full")
    copies = [f for f in r.findings if f.code.startswith("p2p_copy")]
    if done:
        assert [f.summary.split("):")[0] for f in copies] == ["GPU 0 and GPU 1 (cuda:0 -> cuda:1",
                                                              "GPU 0 and GPU 1 (cuda:1 -> cuda:0"]
        assert {f.code for f in copies} <= {"p2p_copy_ok", "p2p_copy_slow"}
        assert all("PCIe gen 4 x16" in f.summary for f in copies)
        assert [m.name for m in r.measurements] == ["p2p_bandwidth", "p2p_bandwidth"]
        assert POISONED not in r.details
    else:  # the first copy never finishes: one hang, no copy after it, and the runner told to end the process
        assert [(f.code, f.status) for f in copies] == [("p2p_copy_hung", Status.FAIL)]
        assert r.status == Status.FAIL
        assert "cuda:0 -> cuda:1 never finished" in r.details[POISONED]


@pytest.mark.gpu
def test_peer_copies_on_this_machines_gpus():
    """Two or more real GPUs: the probe's full level copies between each pair and judges them."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    from gpudoctor.backends import open_gpu_backend
    from gpudoctor.probes import p2p

    r = p2p.run(ProbeContext(open_gpu_backend(None), level="full"))
    copies = [f for f in r.findings if f.code.startswith("p2p_copy")]
    assert copies, r.to_dict()
    assert all(f.code in ("p2p_copy_ok", "p2p_copy_slow") for f in copies), [(f.code, f.summary) for f in copies]


def test_the_layout_helper_matches_sysfs(tmp_path):
    root = lay_out(tmp_path)
    link = root / "sys" / "bus" / "pci" / "devices" / GPUS[0]
    assert os.path.islink(link) and os.path.realpath(link).endswith(f"{ROOT_PORT}/{SWITCH_UP}/{DOWNSTREAM[0]}/{GPUS[0]}")
    assert nvml_error("NotSupported")  # the fake's errors are what the gate reads


# --------------------------------------------------------------------------- every front end, one verdict
# benchmarks/fake_nvml with two boards (FAKE_NVML_GPUS=2: the real nvidia-ml-py over a fake
# libnvidia-ml) and the readers pointed at a laid-out tree (FAKE_SYSFS_ROOT).
ROOT_DIR = __import__("pathlib").Path(__file__).resolve().parents[2]


def _fake_env(sysfs) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "PYTEST"))}
    env.update(PYTHONPATH=str(ROOT_DIR / "benchmarks" / "fake_nvml"), FAKE_NVML_GPUS="2", FAKE_SYSFS_ROOT=str(sysfs))
    return env


def _report(env: dict[str, str], level: str) -> tuple[int, dict]:
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "gpudoctor", "report", level, "--json"], capture_output=True,
                          text=True, env=env, cwd=ROOT_DIR, timeout=400)
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.timeout(900)
def test_quick_and_full_reports_fail_on_acs_redirect_alike(tmp_path):
    from gpudoctor.core import exitcodes

    env = _fake_env(lay_out(tmp_path, acs=REDIRECT))
    for level in ("--quick", "--full"):
        code, document = _report(env, level)
        p2p = next(r for r in document["results"] if r["probe"] == "p2p")
        assert code == exitcodes.FAIL and p2p["status"] == "fail", (level, p2p)
        assert [f["code"] for f in p2p["findings"] if f["status"] == "fail"] == ["p2p_acs_redirect"], level
    clean = _fake_env(lay_out(tmp_path / "clean", acs=0))
    code, document = _report(clean, "--quick")
    assert code == exitcodes.OK, [(r["probe"], r["summary"]) for r in document["results"]]


def test_the_exporter_publishes_the_p2p_verdict(tmp_path):
    from support.prom_support import assert_exporter_report_fails

    assert_exporter_report_fails(_fake_env(lay_out(tmp_path, acs=REDIRECT)), ROOT_DIR)


@pytest.mark.timeout(120)
def test_the_tui_header_fails_on_acs_redirect(tmp_path):
    from support.tui_support import assert_tui_header_fails

    assert_tui_header_fails(_fake_env(lay_out(tmp_path, acs=REDIRECT)), cols=200)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("symbol", ["nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus"])
def test_a_driver_that_never_answers_the_pair_call_costs_seconds_not_the_report(tmp_path, symbol):
    """The fake libnvidia-ml blocks in one of the pair calls for ever: the gate gives up after 5 s, the
    p2p probe fails with driver_not_answering, and every other probe has answered."""
    env = _fake_env(lay_out(tmp_path))
    env["FAKE_NVML_HANG"] = symbol
    code, document = _report(env, "--quick")
    by_probe = {r["probe"]: r for r in document["results"]}
    assert by_probe["p2p"]["status"] == "fail" and "not answering" in by_probe["p2p"]["summary"], by_probe["p2p"]
    assert all(r["status"] == "pass" for name, r in by_probe.items() if name != "p2p")
