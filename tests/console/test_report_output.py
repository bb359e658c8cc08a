"""The text report fits the terminal and the markdown summary is safe to paste (#12 items 3, 5, 7)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

from gpudoctor.core.model import ProbeResult, Report, Status
from gpudoctor.console.render import render_text, report_to_markdown

ROOT = Path(__file__).resolve().parents[2]
LONG = ("The driver supports CUDA up to 12.4, but this torch is built for CUDA 13.2, so CUDA cannot "
        "start and every tensor stays on the CPU; upgrade the driver or install a matching wheel.")


def sample_report(name: str = "NVIDIA A100") -> Report:
    ok = ProbeResult("health", summary="1 GPU(s) healthy", duration_s=0.1)
    ok.measure("temperature", 40, "C")
    ok.find(Status.PASS, "ok", "temperatures fine")
    bad = ProbeResult("environment", summary=f"driver too old for {name}", duration_s=0.2)
    bad.measure("torch", "2.15.0+cu132")
    bad.find(Status.FAIL, "driver_too_old", LONG + " " + name,
             why="torch.cuda.is_available() returns False with 'The NVIDIA driver on your system is too old'; "
                 "training code written device-agnostic silently runs on the CPU.",
             fix="Upgrade the NVIDIA driver to >= 580.65.06, or install a torch built for CUDA 12.x "
                 "(pip install torch --index-url https://download.pytorch.org/whl/cu126).")
    bad.settle()
    skipped = ProbeResult.skip("workload", "skipped: no CUDA device")
    return Report(results=[ok, bad, skipped], host={"hostname": "node-a"}, source="replay:x.json")


def text_of(report: Report, width: int, verbose: bool = False) -> list[str]:
    out = io.StringIO()
    render_text(report, out, color=False, width=width, verbose=verbose)
    return out.getvalue().splitlines()


def test_text_wraps_at_80_with_hanging_indents_and_one_line_per_pass():
    lines = text_of(sample_report(), 80)
    assert all(len(line) <= 80 for line in lines), lines
    head = [i for i, line in enumerate(lines) if line.startswith("    fail: ")][0]
    assert lines[head + 1].startswith(" " * len("    fail: ")) and lines[head + 1].strip()
    assert [line for line in lines if "health" in line] == ["[PASS] health  1 GPU(s) healthy  (0.1 s)"]
    assert not any("temperature" in line for line in lines)  # passing details only with -v
    assert any("temperature" in line for line in text_of(sample_report(), 80, verbose=True))
    assert len(lines) == len(set(lines))  # no repeated lines
    skip = [line for line in lines if "skip" in line.lower() and "1 skip" not in line]
    assert skip == ["[SKIP] workload  skipped: no CUDA device  (0.0 s)"]  # said once, no "skip: skipped:"
    assert not any(re.search(r"(^|\s)\(\s*\)", line) for line in lines)  # no empty parentheses
    assert lines[-1].endswith("(1 pass, 1 skip, 1 fail)")


def test_piped_text_is_not_hard_wrapped():
    lines = text_of(sample_report(), 0)
    assert any(line == "    fail: " + LONG + " NVIDIA A100" for line in lines)


def test_interrupted_empty_report_has_no_empty_parentheses():
    lines = text_of(Report(interrupted=True), 80)
    assert lines[-1].startswith("Verdict: SKIP  Interrupted before any check finished.")
    assert not any(re.search(r"(^|\s)\(\s*\)", line) for line in lines)  # no empty parentheses


def test_markdown_is_one_collapsible_block_and_escapes_driver_text():
    hostile = "A100 </details><script>x</script> | `code` *b* [l](u) \x1b]0;t\x07"
    md = report_to_markdown(sample_report(hostile))
    assert md.startswith("<details>\n<summary>gpudoctor report: FAIL: ")
    assert md.count("</details>") == 1 and md.rstrip().endswith("</details>")
    assert "<script>" not in md and "&lt;/details&gt;&lt;script&gt;" in md
    assert "\x1b" not in md and "\x07" not in md
    rows = [line for line in md.splitlines() if line.startswith("| FAIL")]
    assert len(rows) == 1 and rows[0].count(" | ") == 3  # the pipe in the name is escaped
    assert "\\| `code` \\*b\\* \\[l\\](u)" in rows[0]  # a balanced code span stays code
    assert "| SKIP | workload |" in md and "temperatures fine" not in md  # passes are not listed
    assert "node-a" not in md  # anonymized by default


def test_markdown_keeps_code_spans_and_escapes_a_lone_backtick():
    """GitHub shows `\\`` literally: the fixes' commands (`nvidia-smi -r`) stay code spans; a lone
    backtick from driver text is escaped so it opens no span; the <summary> (HTML, no markdown)
    gets <code> and no backslashes."""
    from gpudoctor.console.render import md_html, md_text

    assert md_text("reset it (`nvidia-smi -r`), then reboot") == "reset it (`nvidia-smi -r`), then reboot"
    assert md_text("odd ` tick") == "odd \\` tick"
    assert md_html("FAIL: run `sudo modprobe nvidia`") == "FAIL: run <code>sudo modprobe nvidia</code>"
    assert "\\" not in md_html("a_b *c* [d]")


def test_cli_format_markdown_and_json_alias():
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gpudoctor", "report", "--quick", *args],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)

    md = run("--format", "markdown")
    assert md.stdout.startswith("<details>") and "anonymized" in md.stdout, md.stderr
    plain = run("--format", "markdown", "--no-anonymize")
    assert plain.stdout.startswith("<details>") and "anonymized" not in plain.stdout
    clash = run("--json", "--format", "markdown")
    assert clash.returncode == 2 and clash.stderr.count("\n") == 1 and "--json is --format json" in clash.stderr
    assert run("--json").stdout.lstrip().startswith("{")


# --------------------------------------------------------------------------- no torch: skips said once
def no_torch_report() -> Report:
    """A GPU machine whose gpudoctor has no torch: the NVML checks pass, the torch checks skip."""
    results = [ProbeResult("environment", status=Status.PASS, summary="driver 570.86.15, no torch", duration_s=0.1),
               ProbeResult("health", status=Status.PASS, summary="1 GPU(s) healthy", duration_s=0.1)]
    for name in ("memory", "transfer", "compute", "correctness", "workload", "distributed"):
        skipped = ProbeResult.skip(name, "torch is not installed in this environment (/opt/venv/bin/python)")
        skipped.findings[0].why = "This check runs PyTorch on the GPU."
        skipped.findings[0].fix = "Install gpudoctor where you train: pip install 'gpudoctor[torch]'."
        results.append(skipped)
    results.append(ProbeResult.skip("events", "no GPU events on this driver"))
    return Report(results=results, source="live")


def test_a_skip_reason_shared_by_several_checks_is_said_once():
    lines = text_of(no_torch_report(), 0)
    text = "\n".join(lines)
    assert text.count("This check runs PyTorch on the GPU.") == 1
    assert text.count("pip install 'gpudoctor[torch]'") == 1
    assert ("[SKIP] memory, transfer, compute, correctness, workload, distributed: torch is not installed in this "
            "environment (/opt/venv/bin/python)") in lines
    assert "[SKIP] events  no GPU events on this driver  (0.0 s)" in lines  # its own reason: its own line
    assert all(80 >= len(line) for line in text_of(no_torch_report(), 80))
    md = report_to_markdown(no_torch_report())
    assert md.count("pip install") == 1 and "| SKIP | memory, transfer, compute, correctness, workload, distributed |" in md


def test_a_pass_with_skipped_checks_says_what_was_not_checked():
    lines = text_of(no_torch_report(), 0)
    assert lines[-1] == ("Verdict: PASS  Healthy in what was checked; 7 checks skipped: memory, transfer, compute, "
                         "correctness, workload, distributed, events.  (2 pass, 7 skip)")
    assert "no problem found" not in lines[-1]
    assert "Healthy in what was checked; 7 checks skipped" in report_to_markdown(no_torch_report())


def test_report_full_without_torch_says_the_torch_skip_once():
    """The installed base package (no torch), as tests/project/test_install_split.py runs it; JSON keeps
    every skipped check apart with its own why and fix."""
    import json

    from support.torchless import BLOCK_TORCH, _gpudoctor

    text = _gpudoctor(["report", "--full"], prelude=BLOCK_TORCH)
    assert "Traceback" not in text.stderr
    torch_skips = [line for line in text.stdout.splitlines() if "torch is not installed in this environment" in line]
    assert len(torch_skips) == 1 and torch_skips[0].startswith("[SKIP] ")
    names = torch_skips[0][len("[SKIP] "):].split(":")[0].split(", ")
    assert {"memory", "transfer", "compute", "correctness"} <= set(names)
    assert text.stdout.count("This check runs PyTorch on the GPU.") == 1
    data = json.loads(_gpudoctor(["report", "--full", "--json"], prelude=BLOCK_TORCH).stdout)
    apart = [r for r in data["results"] if r["probe"] in names]
    assert len(apart) == len(names) and all(r["status"] == "skip" and r["findings"][0]["why"] for r in apart)


def test_a_detail_not_measured_in_this_mode_is_not_shown_as_a_reading():
    import json

    from gpudoctor.console.render import report_to_json

    devices = ProbeResult("devices", summary="no GPU visible", duration_s=0.0)
    devices.measure("nvml_device_count", None, note="LibraryNotFound")  # a reading that failed: shown
    devices.measure("torch_device_count", None, note="QuickMode")  # not measured by a quick report
    devices.find(Status.FAIL, "no_gpu", "No NVIDIA GPU is visible.")
    devices.settle()
    report = Report(results=[devices])
    lines = text_of(report, 0)
    assert any(line.split() == ["nvml_device_count", "n/a", "LibraryNotFound"] for line in lines)
    assert not any("torch_device_count" in line or "QuickMode" in line for line in lines), lines
    assert not any("more (use -v)" in line for line in lines)
    assert any(line.split() == ["torch_device_count", "n/a", "QuickMode"] for line in text_of(report, 0, verbose=True))
    names = [m["name"] for m in json.loads(report_to_json(report))["results"][0]["measurements"]]
    assert names == ["nvml_device_count", "torch_device_count"]  # JSON keeps it


def test_anonymized_markdown_has_no_home_directory(monkeypatch):
    monkeypatch.setenv("HOME", "/scratch/alice")  # this user's home, wherever it is
    env = ProbeResult("environment", summary="torch missing in /home/alice/.venv/bin/python", duration_s=0.1)
    env.measure("interpreter", "/home/alice/.venv/bin/python")
    env.find(Status.SKIP, "torch_not_installed", "torch is not installed in /home/alice/.venv/bin/python",
             fix="Run `gpudoctor report --python /Users/alice/miniconda3/bin/python` or /root/venv/bin/python; "
                 "data in /scratch/alice/mnist")
    env.settle()
    report = Report(results=[env])
    md = report_to_markdown(report)
    assert "alice" not in md, md
    assert "&lt;home&gt;/.venv/bin/python" in md and "&lt;home&gt;/miniconda3/bin/python" in md
    assert "&lt;home&gt;/venv/bin/python" in md and "&lt;home&gt;/mnist" in md  # /root, and $HOME
    assert "/home/alice/.venv" in report_to_markdown(report, anonymize=False)  # --no-anonymize keeps them
    out = io.StringIO()
    render_text(report, out, color=False, width=0, verbose=True, anonymize=True)
    assert "alice" not in out.getvalue() and "<home>/.venv/bin/python" in out.getvalue()


def test_home_paths_inside_longer_paths_and_words_stay():
    from gpudoctor.core.anonymize import strip_home_paths

    kept = ["/data/home/alice/x", "/rootfs/etc", "/srv/Users/x", "homework"]
    assert strip_home_paths(kept, home="/nonexistent-home") == kept
    assert strip_home_paths({"p": "PATH=/home/bob/bin:/usr/bin"}, home="/x") == {"p": "PATH=<home>/bin:/usr/bin"}


def test_strip_home_paths_changes_home_paths_only():
    from gpudoctor.core.anonymize import strip_home_paths

    data = {"uuid": "board-7", "serial": "1320", "python": "/home/alice/.venv/bin/python"}
    assert strip_home_paths(data, home="/x") == {"uuid": "board-7", "serial": "1320",
                                                 "python": "<home>/.venv/bin/python"}
