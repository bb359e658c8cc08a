"""``gpudoctor fleet``: every node's GPUs from what Prometheus already holds, worst first.

It reads Prometheus's HTTP API (``/api/v1/query``, instant queries); it never scrapes nodes.
Two kinds of series are understood:

* gpudoctor's exporter (``gpudoctor_gpu_*``, ``gpudoctor_report_*``; docs/fleet.md), and
* NVIDIA dcgm-exporter (``DCGM_FI_DEV_*``, and its windowed ``DCGM_EXP_*_COUNT`` where enabled),
  for nodes that run that instead.

One row per (instance, GPU). A row's status is the worst of its findings:

* ``fail``: the GPU stopped answering NVML, uncorrectable ECC errors since the driver loaded,
  row remapping failed, a critical Xid (see gpudoctor/core/xid.py), or the node's last report failed;
* ``stale``: the target stopped answering Prometheus (``up == 0``), or its readings are older
  than ``stale_after_s`` (a sampler stuck in the driver);
* ``warn``: a reset is pending to activate a row remap or page retirement, clocks held down by
  heat or a hardware slowdown (the power cap alone is a loaded board's normal state), a non-critical
  Xid, the last report warned or is old;
* ``pass``: none of these.

A GPU Prometheus no longer gets (a target that stopped answering, or a GPU gone from a live
exporter's scrape: a warning with its age) keeps its last known readings, Xid and report verdict
from the look-back window, judged as before and said to be last known: a critical last-known Xid
keeps the row failing.

The package, by job: :mod:`.selector` (``--match`` and the URL), :mod:`.client` (the Prometheus
client and the reader of its answers), :mod:`.rows` (rows, view, series), :mod:`.rules` (the
series read and each row's findings, with gpudoctor.core.findings' judgements and words),
:mod:`.gather` (one look at the fleet), :mod:`.text` (the table and the exit codes).

Front end: no torch, no pynvml; only the standard library's HTTP client.
"""

from __future__ import annotations

import urllib.error  # noqa: F401 (tests reach urllib through this package, as before the split)
import urllib.request  # noqa: F401

from .client import LABEL_MAX, MAX_ANSWER_BYTES, MAX_SERIES, Prometheus, parse_answer
from .gather import collect
from .rows import (DEFAULT_LOOKBACK, DEFAULT_REPORT_MAX_AGE_S, DEFAULT_STALE_AFTER_S, DEFAULT_TIMEOUT_S,
                    SCHEMA_VERSION, STATUS_ORDER, FleetError, FleetRow, FleetView, Series)
from .rules import dcgm_metrics, gpudoctor_metrics, judge_clocks, last_known_metrics
from .selector import Matcher, check_url, parse_match
from .text import error_exit_code, exit_code, fmt_mem, fmt_number, reading_cell, reading_columns, render_text

_judge_clocks = judge_clocks  # the name a test imports

__all__ = ["dcgm_metrics", "DEFAULT_LOOKBACK", "DEFAULT_REPORT_MAX_AGE_S", "DEFAULT_STALE_AFTER_S",
           "DEFAULT_TIMEOUT_S", "gpudoctor_metrics", "LABEL_MAX", "last_known_metrics", "MAX_ANSWER_BYTES",
           "MAX_SERIES", "SCHEMA_VERSION", "STATUS_ORDER", "FleetError", "FleetRow", "FleetView", "Matcher",
           "Prometheus", "Series", "check_url", "collect", "error_exit_code", "exit_code", "fmt_mem", "fmt_number",
           "judge_clocks", "parse_answer", "parse_match", "reading_cell", "reading_columns", "render_text"]
