"""TF32 through torch's fp32_precision API (torch 2.9+), never the legacy allow_tf32 beside it:
a program that set the new API must not see a deprecation warning or a "mix of the legacy and
new APIs" RuntimeError from gpudoctor's probes, and its setting is put back (CPU torch)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from gpudoctor.probes._precision import Fp32Precision, matmul_tf32_on  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(torch.backends.cuda.matmul, "fp32_precision"),
                                reason="torch without fp32_precision (before 2.9)")


@pytest.fixture
def new_api_tf32():
    """The program chose TF32 for matmuls the torch 2.9+ way."""
    m = torch.backends.cuda.matmul
    m.fp32_precision = "tf32"
    yield m
    m.fp32_precision = "none"


def test_the_switch_uses_fp32_precision_and_puts_it_back(new_api_tf32):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Fp32Precision(torch, tf32=False, conv=True):
            assert new_api_tf32.fp32_precision == "ieee"
            assert torch.backends.cudnn.conv.fp32_precision == "ieee"
        assert new_api_tf32.fp32_precision == "tf32"
        assert torch.backends.cudnn.conv.fp32_precision == "tf32"
        assert matmul_tf32_on(torch)


def test_the_correctness_checks_run_after_the_program_set_the_new_api(new_api_tf32):
    from gpudoctor.probes.correctness import check_matmul

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for mode in ("fp32", "tf32"):
            row = check_matmul(torch, "cpu", mode, 8, 8, 8, torch.Generator().manual_seed(1))
            assert row["mode"] == mode
    assert new_api_tf32.fp32_precision == "tf32"
