"""Exit codes, in one place. Stable: scripts depend on them (README, docs/exit-codes.md).

=====  ==================  ==========================================================
code   name                meaning
=====  ==================  ==========================================================
0      OK                  healthy: nothing at or above the --fail-on level
1      INTERNAL            gpudoctor itself failed (a bug: please report it)
2      USAGE               bad command line or input file (nothing was checked)
3      WARN                warnings at or above --fail-on (report: --fail-on warn, the default)
4      FAIL                at least one probe failed: the GPU stack is not usable as is
5      PROBE_ERROR         no failure, but a probe could not complete (crash, hang, time limit)
6      NO_GPU              nothing to watch or record: NVML found no usable NVIDIA GPU (watch, record)
7      WRITE_FAILED        the run finished but an output file could not be written (stdout kept)
8      UNREACHABLE         fleet: Prometheus could not be reached or did not answer as Prometheus does
9      CANNOT_ATTACH       why: the process could not be sampled (no permission, a Python py-spy cannot read)
10     PROCESS_ENDED       why: the process ended while it was sampled; what was sampled was reported
129    HANGUP              stopped by SIGHUP (terminal closed); finished results were kept and written
                           (not the exporter: SIGTERM and SIGHUP are its normal stop, exit 0)
130    INTERRUPTED         stopped by Ctrl-C; finished results were kept and written
143    TERMINATED          stopped by SIGTERM; finished results were kept and written (not the exporter)
=====  ==================  ==========================================================
"""

OK = 0
INTERNAL = 1
USAGE = 2
WARN = 3
FAIL = 4
PROBE_ERROR = 5
NO_GPU = 6
WRITE_FAILED = 7
UNREACHABLE = 8
CANNOT_ATTACH = 9
PROCESS_ENDED = 10
HANGUP = 129
INTERRUPTED = 130
TERMINATED = 143

DESCRIPTIONS = {
    OK: "healthy: nothing at or above the --fail-on level",
    INTERNAL: "gpudoctor itself failed (a bug)",
    USAGE: "bad command line or input file; nothing was checked",
    WARN: "warnings found (with --fail-on warn, the default)",
    FAIL: "at least one probe failed",
    PROBE_ERROR: "a probe could not complete (crash, hang or time limit); nothing failed",
    NO_GPU: "watch/record: no usable NVIDIA GPU",
    WRITE_FAILED: "finished, but an output file could not be written",
    UNREACHABLE: "fleet: Prometheus could not be reached",
    CANNOT_ATTACH: "why: the process could not be sampled (permission, Python version)",
    PROCESS_ENDED: "why: the process ended while sampled; what was sampled was reported",
    HANGUP: "hung up (SIGHUP: the terminal closed); finished results were kept (the exporter: 0)",
    INTERRUPTED: "interrupted; finished results were kept",
    TERMINATED: "terminated by SIGTERM; finished results were kept (the exporter: 0)",
}


def for_status(status: str, fail_on: str = "warn") -> int:
    """Exit code for a report whose overall status is ``status``."""
    if status == "fail":
        return FAIL
    if status == "error":
        return PROBE_ERROR
    if status == "warn" and fail_on == "warn":
        return WARN
    return OK
