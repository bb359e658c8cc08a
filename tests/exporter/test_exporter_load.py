"""Load: 50 scrapes per second for 10 s on loopback, no error, no RSS growth.

Marked ``benchmark`` (outside the default run): ``pytest -m benchmark tests/exporter/test_exporter_load.py``.
The same measurement as a script: ``python benchmarks/exporter_load.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.script_loader import load_script

pytestmark = pytest.mark.benchmark

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "exporter_load.py"


def _load_script():
    return load_script(SCRIPT, "exporter_load")


def test_fifty_scrapes_per_second_for_ten_seconds():
    result = _load_script().run(rate=50.0, seconds=10.0, interval=0.2)
    assert result["warmup_errors"] == 0
    assert result["errors"] == 0, result["first_errors"]
    assert result["scrapes"] == 500
    assert result["achieved_rate_per_s"] >= 45.0, result
    # Sampling every 0.2 s during the run swaps in new snapshots: memory must still stay flat.
    assert result["rss_growth_mib"] <= 2.0, result
