"""The TUI process never imports torch (so never creates a CUDA context); the CLI's
report path never imports textual."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.fresh_interpreter import modules_loaded

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from support.tui_support import STANDIN, make_test_app, take_samples, wait_for

async def main():
    app = make_test_app(STANDIN, loop=True, doctor_level="standard", workload_check=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await take_samples(pilot, app, 3)
        for key in ("p", "d", "w", "question_mark", "escape", "o"):
            await pilot.press(key)
            await pilot.pause()
        await wait_for(pilot, lambda: app.doctor.finished, timeout=240)
        await pilot.press("q")
    mods = sys.modules
    print(json.dumps({"torch": "torch" in mods, "torch.cuda": "torch.cuda" in mods,
                      "doctor_results": sorted(app.doctor.results), "rc": app.return_code}))

if __name__ == "__main__":
    asyncio.run(main())
"""


@pytest.mark.timeout(300)
def test_tui_process_never_imports_torch(tmp_path):
    """Every screen visited and the doctor run at the standard level (torch probes go to a child)."""
    script = tmp_path / "tui_no_torch.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(ROOT / "tests")], capture_output=True, text=True,
                          timeout=280, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rc"] == 0
    assert out["torch"] is False and out["torch.cuda"] is False


def test_cli_parser_and_report_path_do_not_import_textual():
    assert modules_loaded("import gpudoctor.cli as c; c.build_parser(); import gpudoctor.commands.watch, "
                          "gpudoctor.sampling.sampler, gpudoctor.sampling.presentation, gpudoctor.tui, gpudoctor.commands.tui, gpudoctor.tui.workload_runner",
                          ("textual", "torch", "pynvml")) == []


def test_public_name_is_lazy():
    import gpudoctor

    assert "GpudoctorApp" in gpudoctor.__all__
    from gpudoctor.tui.app import GpudoctorApp

    assert gpudoctor.GpudoctorApp is GpudoctorApp
