"""gpudoctor.core._num: the one "a reading as a number, or None" every layer uses."""

from __future__ import annotations

import math

from gpudoctor.core._num import is_number, number
from gpudoctor.backends.na import NA


def test_numbers_are_floats_and_everything_else_is_none():
    assert number(3) == 3.0 and isinstance(number(3), float)
    assert number(2.5) == 2.5
    for not_a_number in (True, False, None, NA("NotSupported"), "7", b"7", [1]):
        assert number(not_a_number) is None, not_a_number
        assert not is_number(not_a_number)


def test_finite_leaves_out_nan_and_the_infinities():
    assert math.isnan(number(math.nan)) and number(math.inf) == math.inf
    for value in (math.nan, math.inf, -math.inf):
        assert number(value, finite=True) is None
    assert number(0, finite=True) == 0.0
