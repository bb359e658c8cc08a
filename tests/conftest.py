"""Shared fixtures.

Every report the test-suite builds in-process is validated against
docs/report.schema.json (Report.to_dict is wrapped for the whole session); reports from
CLI subprocesses are validated by the tests that parse them, with ``validate_report``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

try:  # property-based fuzzing (tests/cli/test_fuzz_parsers.py): HYPOTHESIS_PROFILE=long for the long run
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("default-run", deadline=None)
    _hypothesis_settings.register_profile("long", max_examples=5000, deadline=None)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default-run"))
except ImportError:  # hypothesis is a dev dependency; only the fuzz tests need it
    pass

ROOT = Path(__file__).resolve().parents[1]


def _take_back_ignored_interrupts() -> None:
    """A run started in the background by a shell without job control (``cmd &`` in a script, some CI runners)
    inherits SIGINT and SIGQUIT ignored, and so would every process the tests start: the Ctrl-C and ``--then
    stop`` tests would then send signals nobody receives. Python keeps an ignored SIGINT ignored at start-up, so
    the suite puts the usual dispositions back for itself and its children (SIGHUP is left as found: ``nohup``
    asks for it to be ignored on purpose)."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


_take_back_ignored_interrupts()
DATA = ROOT / "tests" / "data"
SCHEMA_PATH = ROOT / "docs" / "report.schema.json"


def _validator():
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


_VALIDATOR = _validator()


def validate_report_dict(data: dict) -> dict:
    errors = sorted(_VALIDATOR.iter_errors(data), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        raise AssertionError(f"report does not match schema at {list(first.path)}: {first.message}")
    json.dumps(data, allow_nan=False)  # strict JSON: no NaN/Infinity
    return data


@pytest.fixture(autouse=True, scope="session")
def _validate_every_report():
    from gpudoctor.core.model import Report

    original = Report.to_dict

    def checked(self):
        return validate_report_dict(original(self))

    Report.to_dict = checked
    yield
    Report.to_dict = original


@pytest.fixture
def one_torch_thread(monkeypatch):
    """For tests that train: they check behaviour, not speed, and one intra-op thread keeps them
    quick and steady on a busy 2-core machine (two threads spin-wait badly when the cores are
    shared). Used with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # for the child processes the tests start
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def validate_report():
    return validate_report_dict


@pytest.fixture
def data_dir() -> Path:
    return DATA


def run_cli(*args: str, env: dict | None = None, timeout: float = 240, cwd: str | None = None):
    """Run ``python -m gpudoctor ARGS`` for real; returns CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "gpudoctor", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=cwd)


@pytest.fixture
def cli():
    return run_cli


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


@pytest.fixture(autouse=True, scope="session")
def _private_published_summaries(tmp_path_factory):
    """Published training summaries live in a directory of the test session's own, and the
    TUI/exporter read from it: no training process elsewhere on the machine shows up here.
    Monitors publish only in the tests that turn it on (GPUDOCTOR_PUBLISH=1 in a child's
    environment): the monitors the other tests build in this process publish nothing."""
    directory = tmp_path_factory.mktemp("published")
    directory.chmod(0o700)
    saved = {name: os.environ.get(name) for name in ("GPUDOCTOR_RUNTIME_DIR", "GPUDOCTOR_PUBLISH")}
    os.environ["GPUDOCTOR_RUNTIME_DIR"] = str(directory)
    os.environ["GPUDOCTOR_PUBLISH"] = "0"
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _cuda_driver_beside_the_fake_nvml(request, monkeypatch):
    """In-process tests fake NVML (tests/support/nvml_fake.py, recordings); the CUDA driver's start
    (gpudoctor.backends.cuda_driver.cuda_start) is asked in a child process that cannot see that
    fake, and this machine has no libcuda. So in-process it answers as a driver that started with
    one device, beside the fake GPU. The real function is exercised by the subprocess tests
    (tests/probes/test_one_verdict.py, with benchmarks/fake_nvml's fake libcuda) and by its unit tests;
    a test that needs another answer sets ProbeContext(_cuda_start=...) or monkeypatches it, or
    asks for the real one with @pytest.mark.real_cuda_driver."""
    if request.node.get_closest_marker("real_cuda_driver"):
        return
    from gpudoctor.backends import cuda_driver

    # the runner's early start answers what cuda_start (as a test may patch it) answers
    monkeypatch.setattr(cuda_driver, "begin_cuda_start",
                        lambda timeout_s=cuda_driver.TIMEOUT_S: cuda_driver.Answered(cuda_driver.cuda_start()))
    monkeypatch.setattr(cuda_driver, "cuda_start",
                        lambda timeout_s=cuda_driver.TIMEOUT_S: cuda_driver.CudaStart(loaded=True, code=0,
                                                                                     device_count=1))
