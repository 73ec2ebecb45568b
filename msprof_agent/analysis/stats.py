"""Median and percentiles of the per-step figures, equal to numpy's (``np.median``, ``np.percentile``
with its default linear method) to the last bit.

Not numpy's own: both import ``numpy.ma`` on first use, 0.03-0.1 s of every exit's analysis that
nothing else there needs. The arithmetic below is numpy's, step for step, in Python floats.
"""
from __future__ import annotations

import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ..contract.summary import Percentiles


def median(values: Iterable[float]) -> float:
    """The median of a sequence of numbers (float); nan for none, as numpy gives."""
    ordered = sorted(float(v) for v in values)
    n = len(ordered)
    if not n:
        return math.nan
    middle = n // 2
    return ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def percentiles(values: Sequence[float]) -> Percentiles | None:
    """Mean, p50, p90 and max to 4 places, the shape of every per-step figure in the summary; None for no values."""
    if not values:
        return None
    import numpy as np

    array = np.asarray(values, dtype=np.float64)
    return {"mean": round(float(array.mean()), 4), "p50": round(percentile(values, 50), 4),
            "p90": round(percentile(values, 90), 4), "max": round(float(array.max()), 4)}


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0-100) of a non-empty sequence, interpolated linearly between the two
    nearest ranks (numpy's default)."""
    ordered = sorted(float(v) for v in values)
    n, quantile = len(ordered), q / 100
    virtual = (n - 1) * quantile  # numpy's "linear" method
    below = math.floor(virtual)
    gamma = virtual - below
    lower = ordered[min(max(below, 0), n - 1)]
    upper = ordered[min(max(below + 1, 0), n - 1)]
    difference = upper - lower
    return upper - difference * (1 - gamma) if gamma >= 0.5 else lower + difference * gamma  # numpy's _lerp
