"""A device whose texts are absurdly long (a 5,000-character name, serial and VBIOS from a
broken binding or driver): the TUI draws every screen at a small and a large size, keeps each
text within the line it is drawn on, and quits on ``q`` at once.

Real NVML hands names through a 96-byte buffer, so such a name can only come from a damaged
driver or binding; the hostile-input pass of issue #29 listed "the TUI on a 5,000-character GPU
name does not quit on q". That did not reproduce here on the recording path (replay refuses
names over 4,096 characters) or this live path; this test keeps it that way."""

from __future__ import annotations

import time

import pytest

from gpudoctor.backends import NvmlBackend, NvmlGate
from support.nvml_fake import FakePynvml
from support.tui_support import fixed_host, run_async, screen_lines, take_samples

pytestmark = pytest.mark.timeout(120)

LONG = "N" * 5000


def _app():
    from gpudoctor.tui.app import GpudoctorApp

    fake = FakePynvml(2, readings={"nvmlDeviceGetName": LONG, "nvmlDeviceGetSerial": "S" * 5000,
                                   "nvmlDeviceGetVbiosVersion": "V" * 5000})
    return GpudoctorApp(lambda: NvmlBackend(NvmlGate(fake)), interval=3600.0, host_sampler=fixed_host,
                        workload_check=lambda: "workload module not available (test: not wired)")


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
@run_async
async def test_a_5000_character_gpu_name_is_drawn_within_the_screen_and_q_quits(size):
    app = _app()
    async with app.run_test(size=size) as pilot:
        await take_samples(pilot, app, 2)
        for key in ("1", "p", "d", "1"):
            await pilot.press(key)
            await pilot.pause()
            lines = screen_lines(app)
            assert len(lines) == size[1] and all(len(line) <= size[0] for line in lines), key
        assert any("NNNN" in line for line in screen_lines(app))  # the name is shown, cut to fit
        started = time.monotonic()
        await pilot.press("q")
    assert app.return_code == 0
    assert time.monotonic() - started < 60  # a q that was not taken never returns
