"""Order statistics shared by the probes, the workload and the training hooks.

One percentile for the whole project, so that a p50 in a report, a sweep row and a
training summary mean the same thing.
"""

from __future__ import annotations

import math
from typing import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) of ``values``, by linear interpolation; None if empty.

    The maths: sort the n values as x[0] <= ... <= x[n-1]; the percentile sits at the
    fractional rank h = (n - 1) * q / 100, and is x[floor(h)] + (h - floor(h)) *
    (x[floor(h) + 1] - x[floor(h)]). This is Hyndman and Fan's definition 7, the default of
    numpy.percentile and of ``statistics.quantiles(method="inclusive")``: the 50th
    percentile of an even count is the mean of the two middle values, q = 0 and q = 100
    are the minimum and the maximum.
    """
    ordered = sorted(float(v) for v in values)
    if not ordered:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within 0..100, not {q!r}")
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
