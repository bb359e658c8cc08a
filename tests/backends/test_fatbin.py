"""The fat-binary reader (gpudoctor/backends/fatbin.py): built shared objects, malformed ones, the CUDA
compatibility rules, the real fat binaries of torch 2.14.1+cu130 and torchvision, the scan of a
site-packages folder, and the environment probe's findings about extensions."""

from __future__ import annotations

import importlib.util
import os
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from support import fatbin_samples as s
from gpudoctor.backends import fatbin
from gpudoctor.backends.na import NA
from gpudoctor.core.model import Status
from gpudoctor.probes import ProbeContext


# --------------------------------------------------------------------------- reading built samples
def test_archs_of_a_built_extension() -> None:
    data = s.extension(s.container(*s.sm(80, 86), s.entry(s.PTX, 86, 0x8011)),
                       s.container(s.entry(s.ELF, 90, 0x108011), s.entry(s.ELF, 103, 0x1208011, header_size=112),
                                   s.entry(s.PTX, 120, 0x8011, header_size=80)))
    found = fatbin.parse_bytes(data)
    assert found.error is None and found.has_fatbin
    assert found.sass == {"sm_80", "sm_86", "sm_90a", "sm_103f"}
    assert found.ptx == {"compute_86", "compute_120"}
    assert (found.containers, found.entries, found.compressed) == (2, 6, 4)
    assert found.describe() == "sm_80 sm_86 compute_86 sm_90a sm_103f compute_120"


def test_relocatable_section_and_padding_between_containers() -> None:
    data = s.extension(s.container(*s.sm(70)) + b"\0" * 8 + s.container(*s.sm(75)), section="__nv_relfatbin")
    found = fatbin.parse_bytes(data)
    assert found.error is None and found.sass == {"sm_70", "sm_75"} and found.containers == 2


def test_a_shared_object_without_gpu_code() -> None:
    found = fatbin.parse_bytes(s.elf({".text": b"\xc3" * 8, ".data": b"x" * 8}))
    assert (found.has_fatbin, found.error, found.sass, found.ptx) == (False, None, set(), set())


def test_a_nobits_fatbin_section_holds_nothing_to_read() -> None:
    found = fatbin.parse_bytes(s.elf({".nv_fatbin": s.container(*s.sm(80))}, nobits=(".nv_fatbin",)))
    assert found.error is None and not found.has_fatbin


@pytest.mark.parametrize("mangle, reason", [
    (lambda d: d[:40], "shorter than an ELF header"),
    (lambda d: b"MZ" + d[2:], "not an ELF file"),
    (lambda d: d[:4] + b"\x01" + d[5:], "not a little-endian 64-bit ELF file"),
    (lambda d: d[:0x28] + struct.pack("<Q", 0) + d[0x30:], "no section header table"),
    (lambda d: d[:0x28] + struct.pack("<Q", 2 ** 62) + d[0x30:], "past the end of the file"),
    (lambda d: d[:0x3A] + struct.pack("<H", 40) + d[0x3C:], "section header size of 40"),
    (lambda d: d[:0x3E] + struct.pack("<H", 99) + d[0x40:], "index is out of range"),
    (lambda d: d[:-40], "past the end of the file"),
])
def test_a_malformed_elf_is_an_answer(mangle: Any, reason: str) -> None:
    found = fatbin.parse_bytes(mangle(s.extension(s.container(*s.sm(80)))))
    assert found.error is not None and found.error.startswith("could not read: ") and reason in found.error


def _fatbin_at(data: bytes) -> int:
    return data.index(struct.pack("<I", s.FATBIN_MAGIC))


@pytest.mark.parametrize("offset, value, reason", [
    (0, struct.pack("<I", 0x12345678), "no fat-binary magic"),
    (6, struct.pack("<H", 60000), "fat-binary header size of 60000"),
    (8, struct.pack("<Q", 2 ** 63), "runs past its section"),
    (16 + 4, struct.pack("<I", 8), "entry header size of 8"),
    (16 + 8, struct.pack("<Q", 2 ** 40), "runs past its fat binary"),
    (16 + 28, struct.pack("<I", 2 ** 31), "architecture 2147483648"),
])
def test_a_malformed_fat_binary_is_an_answer(offset: int, value: bytes, reason: str) -> None:
    data = bytearray(s.extension(s.container(*s.sm(80, 90))))
    at = _fatbin_at(bytes(data)) + offset
    data[at:at + len(value)] = value
    found = fatbin.parse_bytes(bytes(data))
    assert found.error is not None and found.error.startswith("could not read: ") and reason in found.error


def test_every_truncation_is_an_answer() -> None:
    data = s.extension(s.container(*s.sm(80, 90), s.entry(s.PTX, 90)))
    for cut in range(0, len(data), 7):
        found = fatbin.parse_bytes(data[:cut])
        assert found.error is None or found.error.startswith("could not read: ")
        assert found.sass <= {"sm_80", "sm_90"}


def test_files_that_are_not_regular_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "ext.so"
    os.mkfifo(fifo)  # no writer: a blocking open would hang
    started = time.monotonic()
    found = fatbin.read_file(fifo)
    assert time.monotonic() - started < 30 and found.error is not None and found.error.startswith("could not read")
    assert fatbin.read_file("/dev/zero").error is not None
    assert fatbin.read_file(tmp_path / "missing.so").error is not None


# --------------------------------------------------------------------------- compatibility
@pytest.mark.parametrize("arch, capability, runs", [
    ("sm_80", "8.0", True), ("sm_80", "8.6", True), ("sm_80", "8.9", True), ("sm_86", "8.0", False),
    ("sm_80", "9.0", False), ("sm_90", "8.9", False), ("sm_90", "10.0", False),
    ("sm_90a", "9.0", True), ("sm_90a", "9.1", False), ("sm_100a", "10.3", False),
    ("sm_100f", "10.3", True), ("sm_103f", "10.0", False), ("sm_120", "12.1", True),
    ("compute_80", "8.0", True), ("compute_80", "9.0", True), ("compute_120", "8.9", False),
    ("compute_90a", "9.0", True), ("compute_90a", "10.0", False), ("compute_100f", "10.3", True),
    ("compute_100f", "12.0", False), ("sm_x", "8.0", False), ("sm_80", "unknown", False),
])
def test_cuda_compatibility_rules(arch: str, capability: str, runs: bool) -> None:
    assert fatbin.runs_on(arch, capability) is runs


def test_verdict_prefers_a_binary_over_ptx() -> None:
    archs = fatbin.parse_bytes(s.extension(s.container(*s.sm(75, 80), s.entry(s.PTX, 80))))
    assert [fatbin.verdict(archs, cc) for cc in ("7.0", "7.5", "8.6", "9.0", "12.0")] == \
        ["none", "sass", "sass", "ptx", "ptx"]


# --------------------------------------------------------------------------- real fat binaries
# the site-packages folder that holds torch, found without importing it (other tests check that
# gpudoctor's quick path leaves torch unimported in this process)
_TORCH_SPEC = importlib.util.find_spec("torch")
SITE = Path(_TORCH_SPEC.origin).parent.parent if _TORCH_SPEC and _TORCH_SPEC.origin else Path("/nonexistent")


def _counting(path: Path) -> tuple[fatbin.FatbinArchs, int]:
    """The file's archs and how many bytes were read to learn them."""
    read = [0]
    fd = os.open(path, os.O_RDONLY)
    try:
        def pread(offset: int, size: int) -> bytes:
            read[0] += size
            return os.pread(fd, size, offset)

        return fatbin.parse_elf(pread, os.fstat(fd).st_size), read[0]
    finally:
        os.close(fd)


def test_libtorch_cuda_is_read_from_its_headers() -> None:
    path = SITE / "torch" / "lib" / "libtorch_cuda.so"
    if not path.is_file():
        pytest.skip("no CUDA build of torch installed")
    torch = pytest.importorskip("torch")
    found, read = _counting(path)  # how little is read is counted in bytes, not timed
    assert found.error is None and found.containers > 10
    # headers only: well under 1% of the file (libtorch_cuda.so 2.14: 500 MB, 2,975 entries)
    assert read < path.stat().st_size / 100
    plain = {a for a in found.sass if not a.endswith(("a", "f"))}
    # torch's own arch list is a subset: the library also has arch-specific kernels (sm_90a, sm_100a:
    # FP8 and grouped GEMMs) and in 2.14.1+cu130 one container built for sm_89
    assert set(torch.cuda.get_arch_list()) <= plain
    assert any(a.endswith("a") for a in found.sass)


def test_torchvision_extension_matches_torchs_arch_list() -> None:
    torch = pytest.importorskip("torch")
    candidates = [SITE / "torchvision" / n for n in ("_C.so", "_C_stable.so")]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None or not (SITE / "torch" / "lib" / "libtorch_cuda.so").is_file():
        pytest.skip("no CUDA build of torchvision installed")
    found = fatbin.read_file(path)
    arch_list = torch.cuda.get_arch_list()
    assert found.error is None
    # torchvision is built with torch's TORCH_CUDA_ARCH_LIST: the same cubins, plus PTX of the newest
    # architecture only (the list's last entry carries +PTX), so newer GPUs still JIT-compile its ops
    assert found.sass == {a for a in arch_list if a.startswith("sm_")}
    newest = max((a for a in arch_list if a.startswith("sm_")), key=fatbin.arch_order)
    assert found.ptx == {newest.replace("sm_", "compute_")}


def test_entry_architectures_agree_with_the_cubins_own_elf_headers() -> None:
    """An independent check of the entry header's architecture field: an uncompressed cubin is an ELF
    file whose e_flags name its SM (CUDA's ELF ABI version 8: bits 8-15; before it, bits 0-7)."""
    path = SITE / "torchvision" / "_C_stable.so"
    if not path.is_file():
        pytest.skip("no CUDA build of torchvision 0.29 installed")
    found = fatbin.FatbinArchs()
    found.cubins_at = []
    data = path.read_bytes()  # 8 MB
    fatbin.parse_elf(lambda offset, size: data[offset:offset + size], len(data), found)
    checked = 0
    for offset, _size, name, flags in found.cubins_at:
        if flags & fatbin.FLAGS_COMPRESSED:
            continue
        cubin = data[offset:offset + 64]
        assert cubin[:4] == b"\x7fELF", name
        e_flags, = struct.unpack_from("<I", cubin, 0x30)
        sm = (e_flags >> 8) & 0xFF if cubin[8] >= 8 else e_flags & 0xFF
        assert f"sm_{sm}" == name.rstrip("af"), (name, hex(e_flags))
        checked += 1
    assert checked >= 4


# --------------------------------------------------------------------------- the scan
def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site-packages"
    good = s.extension(s.container(*s.sm(80, 86, 90)))
    files = {
        "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so": s.extension(s.container(*s.sm(80, 90))),
        "myext/_C.abi3.so": good,
        "ptxonly/kernels.so": s.extension(s.container(s.entry(s.PTX, 80))),
        "plain/_speedups.so": s.elf({".text": b"\xc3"}),
        "notelf/lib.so": b"just text",
        "torch/lib/libtorch_cuda.so": good, "nvidia/cu13/lib/libcublas.so.13": good,
        "triton/_C/libtriton.so": good, "mypkg.libs/libvendored.so.1": good,
        "flash_attn-2.8.3.dist-info/RECORD": b"flash_attn/__init__.py,sha256=x,10\n"
                                             b"flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so,sha256=y,20\n",
    }
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    os.mkfifo(site / "myext" / "fifo.so")
    os.symlink(site / "myext" / "_C.abi3.so", site / "myext" / "link.so")
    return site


def test_scan_finds_extensions_and_leaves_torch_and_nvidia_out(tmp_path: Path) -> None:
    scan = fatbin.scan_site_packages(str(_site(tmp_path)))
    assert sorted(scan.found) == ["flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so", "myext/_C.abi3.so",
                                  "ptxonly/kernels.so"]
    assert scan.found["ptxonly/kernels.so"].ptx == {"compute_80"} and scan.stopped == ""


def test_scan_names_the_distribution_that_installed_an_extension(tmp_path: Path) -> None:
    scan = fatbin.scan_site_packages(str(_site(tmp_path)))
    assert scan.distribution("flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so") == "flash_attn"
    assert scan.distribution("myext/_C.abi3.so") == "myext"  # no RECORD lists it: its folder


def test_scan_is_bounded(tmp_path: Path) -> None:
    site = str(_site(tmp_path))
    assert "stopped after 2 shared objects" in fatbin.scan_site_packages(site, max_files=2).stopped
    assert fatbin.scan_site_packages(site, time_budget_s=-1).stopped.startswith("stopped after")


def test_this_environment_scan_is_quick_enough() -> None:
    if not (SITE / "torch").is_dir():
        pytest.skip("torch is not installed")
    scan = fatbin.scan_site_packages(str(SITE), time_budget_s=30)
    assert scan.stopped == "" and scan.seconds < fatbin.QUICK_SCAN_S * 4  # a loaded 2-core machine
    assert not any(p.startswith(("torch" + os.sep, "nvidia" + os.sep)) for p in scan.found)


# --------------------------------------------------------------------------- the environment probe
class _Gpu:
    def __init__(self, *capabilities: str) -> None:
        self._cc = capabilities

    def status(self) -> Any:
        return None

    def driver_version(self) -> str:
        return "580.65.06"

    def cuda_driver_version(self) -> str:
        return "13.0"

    def device_count(self) -> int:
        return len(self._cc)

    def static(self, index: int) -> dict[str, Any]:
        return {"index": index, "name": f"GPU{index}", "compute_capability": self._cc[index],
                "uuid": f"GPU-{index}", "pci_bus_id": f"00000000:0{index + 1}:00.0", "mig_mode": 0}


def _scan(**files: bytes) -> fatbin.ExtensionScan:
    scan = fatbin.ExtensionScan("/site")
    for rel, data in files.items():
        scan.found[rel.replace("__", "/")] = fatbin.parse_bytes(data)
    scan.examined = len(files)
    return scan


def _quick_environment(gpu: Any, scan: Any) -> Any:
    from gpudoctor.probes import environment
    from gpudoctor.backends.torch_build import TorchBuild

    build = TorchBuild("/usr/bin/python3", "3.12", "/site/torch", "2.14.1+cu130", "13.0")
    return environment.run(ProbeContext(gpu, level="quick", _torch_build=build, _cuda_start=NA("NotRecorded"),
                                        _extensions=scan))


def test_quick_report_fails_an_extension_without_the_gpus_arch() -> None:
    scan = _scan(flash_attn__ext_so=s.extension(s.container(*s.sm(80, 90))),
                 ptxonly__k_so=s.extension(s.container(s.entry(s.PTX, 80))))
    result = _quick_environment(_Gpu("12.0", "12.0"), scan)
    codes = [(f.status, f.code, f.device) for f in result.findings]
    assert (Status.FAIL, "extension_no_kernel_image", None) in codes
    assert (Status.WARN, "extension_ptx_jit_only", None) in codes
    failed = next(f for f in result.findings if f.code == "extension_no_kernel_image")
    assert "flash_attn/ext_so" in failed.summary and "sm_80 sm_90" in failed.summary and "GPU 1" in failed.summary
    assert 'TORCH_CUDA_ARCH_LIST="12.0"' in failed.fix and "flash_attn" in failed.fix
    assert "no kernel image is available" in failed.why
    assert result.status == Status.FAIL


def test_an_extension_with_the_gpus_arch_passes_and_is_measured() -> None:
    scan = _scan(flash_attn__ext_so=s.extension(s.container(*s.sm(80, 90))))
    result = _quick_environment(_Gpu("8.6"), scan)
    assert not [f for f in result.findings if f.code.startswith("extension_")]
    measured = {m.name: m.value for m in result.measurements}
    assert measured["cuda_extensions"] == 1
    assert result.details["cuda_extensions"] == {"flash_attn/ext_so": {"archs": "sm_80 sm_90", "error": None}}


def test_an_unreadable_extension_is_no_finding() -> None:
    broken = bytearray(s.extension(s.container(*s.sm(80))))
    broken[_fatbin_at(bytes(broken))] = 0
    result = _quick_environment(_Gpu("12.0"), _scan(bad__x_so=bytes(broken)))
    assert not [f for f in result.findings if f.code.startswith("extension_")]
    assert result.details["cuda_extensions"]["bad/x_so"]["error"].startswith("could not read: ")


def test_facts_handed_in_or_a_replay_do_not_scan_this_machine() -> None:
    assert ProbeContext(_Gpu("8.0"), _torch_facts={"importable": False}).extensions() == NA("NotRecorded")
    assert ProbeContext(_Gpu("8.0"), replay=True).extensions() == NA("NotRecorded")
