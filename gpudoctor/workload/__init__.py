"""The reference MNIST workload: the tutorials' network, three input pipelines, a sweep.

``run_sweep(SweepConfig(...), on_run=...)`` runs it; ``gpudoctor bench mnist`` is the
command. Importing this package does not import torch (the runs do).
"""

from __future__ import annotations

from gpudoctor.workload.config import MODES, RunConfig, SweepConfig
from gpudoctor.workload.sweep import SweepResult, run_sweep, sweep_with_progress

__all__ = ["MODES", "RunConfig", "SweepConfig", "SweepResult", "run_sweep", "sweep_with_progress"]
