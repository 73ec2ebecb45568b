"""Unions of time intervals with numpy: sorted starts, a running maximum of the ends, no loop per interval.

The advisor's compute time (ops running) and the exports' Computing / Communication split read them.
"""
from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals (starts sorted) as disjoint sorted (starts, ends) arrays."""
    if not len(starts):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    reach = np.maximum.accumulate(ends)
    new = np.append(True, starts[1:] > reach[:-1])
    if new.all():  # already disjoint (ops one after another on a host thread): nothing to merge
        return starts, ends
    firsts = np.flatnonzero(new)
    return starts[firsts], np.maximum.reduceat(ends, firsts)


def length_within(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray | list[int], hi: np.ndarray | list[int]) -> np.ndarray:
    """Total length (int64) of disjoint sorted intervals clipped to each window [lo, hi), lo <= hi."""
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    if not len(starts):
        return np.zeros(len(lo), dtype=np.int64)
    first, stop = np.searchsorted(ends, lo, side="right"), np.searchsorted(starts, hi, side="left")
    total = np.concatenate(([0], np.cumsum(np.maximum(ends - starts, 0))))
    inner = total[stop] - total[first]
    some = first < stop  # the first and last interval may stick out of the window
    head, tail = np.minimum(first, len(starts) - 1), np.maximum(stop - 1, 0)
    overhang = np.maximum(lo - starts[head], 0) + np.maximum(ends[tail] - hi, 0)
    return np.where(some, inner - overhang, inner)


def covered(starts: np.ndarray, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Which POINTS fall inside the union of the intervals (starts sorted, ends included)."""
    lo, hi = merge(starts, ends)
    if not len(lo):
        return np.zeros(len(points), dtype=bool)
    before = np.searchsorted(lo, points, side="right") - 1
    inside: np.ndarray = (before >= 0) & (points <= hi[np.maximum(before, 0)])
    return inside
