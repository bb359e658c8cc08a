"""A recording taken the way `gpudoctor record` takes it: ``recorder.record_parts`` writes the file
as it samples, and the test reads back what was written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpudoctor.backends.base import GpuBackend


def record_file(gpu: GpuBackend, path: Path, *, seconds: float, interval: float,
                anonymize: bool = False) -> tuple[dict[str, Any], bool]:
    """Record ``gpu`` (no torch facts) into ``path``, one part; returns (the file's JSON, interrupted)."""
    from gpudoctor.sampling.recorder import record_parts

    paths, interrupted = record_parts(path, seconds=seconds, interval=interval, with_torch=False,
                                      anonymize=anonymize, gpu=gpu)
    assert paths == [path], paths  # a short recording is one file
    return json.loads(path.read_text(encoding="utf-8")), interrupted
