"""Real-world cases: public bug threads whose cause was settled there, run through gpudoctor's own checks.

Each case is one JSON file under tests/data/realworld/ (see its README): the thread's address, the
facts as posted (versions, arch lists, error text, kernel-log and metric lines), the cause in our
words, the ``inputs`` handed to gpudoctor (the posted facts in the shape its checks take), and the
verdict gpudoctor should give. A case gpudoctor judges wrong today carries ``gpudoctor_today``
(what it says, and what it should say): the test is then a strict xfail, so the fix that makes it
right has to remove that line.

The checks used are gpudoctor's own pure judgements:
* ``environment``: probes/environment.py's run() over the driver (NVML) and torch's facts, and the
  compiled extensions' targets where a case posts them (as the fat-binary scan reads them);
* ``devices``: probes/devices.py's run() over NVML's GPUs, CUDA_VISIBLE_DEVICES and torch's count;
* for both, where a case posts them, NVML's failure to start (``nvml_status``), the CUDA driver's own
  start (``cuda_start``) and the stack's files (``stack``: the module version file, the libraries'
  names, cgroup lines, /dev nodes, the PCI bus, and the environment), laid out in a folder and read by
  gpudoctor.backends.stack's live readers (tests/support/stack_layout.py);
* ``health``: probes/health.py's check_device() over one GPU's NVML readings (and its process list,
  ``nvml_processes``, where posted);
* ``kernel_log``: gpudoctor/core/xid.py's parse_kmsg() over the posted lines, then the events probe's
  judgement of the Xids found, GPU by GPU and side by side (probes/events.py);
* ``fleet``: gpudoctor/fleet.py's collect() over the posted dcgm-exporter series, served by a
  stand-in Prometheus (and, where a case posts it, the last-Xid gauge's history over the window);
* ``p2p``: probes/_p2p.py's judge() over the posted path between GPUs: NVML's topology and P2P
  status, each bridge's ACS control read from its posted ``lspci -vvv`` "ACSCtl:" line
  (gpudoctor.backends.pcie_paths.acs_from_lspci) or register value (acs_from_register), the posted
  kernel command line (cmdline_words, group_type_from_cmdline).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from support.realworld import (
    CASE_FILES, CHECKS, _load, assert_probe_verdict, run_devices, run_environment, run_fleet, run_health,
    run_kernel_log, run_p2p,
)


def _params() -> list[Any]:
    params = []
    for path in CASE_FILES:
        case = _load(path)
        marks = []
        if case.get("gpudoctor_today"):
            marks.append(pytest.mark.xfail(strict=True, reason=case["gpudoctor_today"]))
        params.append(pytest.param(case, id=case["id"], marks=marks))
    return params


@pytest.mark.parametrize("case", _params())
def test_realworld_case(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    inputs, expected = case["inputs"], case["expected"]
    check = case["check"]
    if check == "environment":
        assert_probe_verdict(run_environment(inputs, monkeypatch, tmp_path), expected)
    elif check == "devices":
        assert_probe_verdict(run_devices(inputs, monkeypatch, tmp_path), expected)
    elif check == "health":
        assert_probe_verdict(run_health(inputs, monkeypatch), expected)
    elif check == "kernel_log":
        result, found = run_kernel_log(inputs, monkeypatch)
        assert [[x.pci_bus_id, x.code] for x in found] == expected["xids"]
        assert_probe_verdict(result, expected)
    elif check == "p2p":
        assert_probe_verdict(run_p2p(inputs, monkeypatch), expected)
    elif check == "fleet":
        view = run_fleet(inputs, monkeypatch)
        assert len(view.rows) == 1
        row = view.rows[0]
        assert row.status == expected["status"], f"{row.status}: {row.reason}"
        for word in expected.get("words", []):
            assert word.lower() in row.reason.lower(), row.reason
    else:  # pragma: no cover - guarded by test_case_files_are_complete
        pytest.fail(f"unknown check {check!r}")


# --------------------------------------------------------------------------- the corpus itself
REQUIRED = ("id", "url", "class", "facts", "cause", "check", "inputs", "expected")


def test_case_files_are_complete() -> None:
    assert len(CASE_FILES) >= 40
    ids = set()
    for path in CASE_FILES:
        case = _load(path)
        for key in REQUIRED:
            assert case.get(key), f"{path.name}: {key} missing"
        assert case["id"] == path.stem
        assert case["id"] not in ids
        ids.add(case["id"])
        assert re.match(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$", case["url"]), case["url"]
        assert case["check"] in CHECKS, case["check"]
        exp = case["expected"]
        assert set(exp) <= {"status", "code", "code_any", "absent", "words", "xids"}, path.name
        assert exp.get("status") or exp.get("code") or exp.get("words"), f"{path.name}: asserts nothing"
        if case.get("gpudoctor_today"):
            assert case["gpudoctor_today"].startswith(case["class"] + ":"), path.name
