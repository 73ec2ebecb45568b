"""Each step split as the Ascend profiler splits it: Computing, Communication (overlapped or not), Free.

Computing is the union of the rank's own op intervals in the step, communication ops left out: with
gloo a fast rank waits inside its collectives for the slow one, so step totals are equal on every
rank while Computing still tells them apart. Communication is the union of the recorded collective
calls; the part no op overlaps is ``Communication(Not Overlapped)``; Free is the rest of the step.
Intervals are merged with numpy (``analysis.intervals``), not op by op.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from .intervals import length_within, merge

if TYPE_CHECKING:
    from ..records import Comm
    from .rundata import RunData

Intervals = tuple[np.ndarray, np.ndarray]  # disjoint sorted (starts, ends), ns

COMM_OP = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|broadcast|barrier|all_?to_?all|^gloo:|^nccl:|^hccl|^hcom|c10d::|^send$|^recv$|isend|irecv",
                     re.IGNORECASE)


def _subtract(a: Intervals, b: Intervals) -> Intervals:
    """``a`` minus ``b``, both disjoint sorted interval sets (``a`` small: the collectives)."""
    out_s: list[int] = []
    out_e: list[int] = []
    for s, e in zip(a[0].tolist(), a[1].tolist()):
        lo, hi = np.searchsorted(b[1], s, side="right"), np.searchsorted(b[0], e, side="left")
        cursor = s
        for bs, be in zip(b[0][lo:hi].tolist(), b[1][lo:hi].tolist()):
            if bs > cursor:
                out_s.append(cursor)
                out_e.append(bs)
            cursor = max(cursor, be)
        if cursor < e:
            out_s.append(cursor)
            out_e.append(e)
    return np.array(out_s, dtype=np.int64), np.array(out_e, dtype=np.int64)


def comm_op_mask(data: RunData) -> np.ndarray:
    """Ops that are collectives themselves (their time is communication, not computing)."""
    by_type = np.array([bool(COMM_OP.search(t)) for t in data.op_types.astype(str)], dtype=bool)
    by_name = np.array([bool(COMM_OP.search(n.rsplit("/", 1)[-1])) for n in data.op_names.astype(str)], dtype=bool)
    mask: np.ndarray = by_type[data.ops["type_id"]] | by_name[data.ops["name_id"]]
    return mask


class Overlap:
    """Computing / communication / free intervals of a rank and their per-step totals (ns)."""

    def __init__(self, data: RunData, stages: list[dict[str, Any]]) -> None:
        self.stages = stages
        if data.op_count:
            keep = ~comm_op_mask(data)
            starts = data.ops["start"][keep]
            self.computing = merge(starts, starts + data.ops["dur"][keep])
        else:
            self.computing = merge(np.zeros(0, np.int64), np.zeros(0, np.int64))
        calls = sorted((c["start"], c["start"] + c["dur"]) for c in data.comm)
        comm = merge(np.array([c[0] for c in calls], dtype=np.int64), np.array([c[1] for c in calls], dtype=np.int64))
        self.communication = comm
        self.comm_alone = _subtract(comm, self.computing)
        lo = np.array([s["start"] for s in stages], dtype=np.int64)
        hi = np.array([s["end"] for s in stages], dtype=np.int64)
        self.rows: list[dict[str, int]] = []
        if not stages:
            return
        computing = length_within(*self.computing, lo, hi)
        communication = length_within(*comm, lo, hi)
        alone = length_within(*self.comm_alone, lo, hi)
        for stage, c, m, a in zip(stages, computing.tolist(), communication.tolist(), alone.tolist()):
            total = stage["end"] - stage["start"]
            self.rows.append({"n": stage["n"], "start": stage["start"], "end": stage["end"], "computing": c, "communication": m,
                              "comm_alone": a, "overlapped": m - a, "free": max(0, total - c - a), "preparing": stage["interval"]})

    def first_free(self) -> list[int]:
        """Where each step's first free gap starts: its start, or the end of the busy stretch covering it.

        The stretch is followed end to end from set to set (computing, then lone communication, which
        touches computing but never overlaps it), a few vectorised look-ups per collective, rather than
        by sorting the union of every op interval."""
        at = np.array([r["start"] for r in self.rows], dtype=np.int64)
        while True:
            moved = at
            for starts, ends in (self.computing, self.comm_alone):
                if len(starts):
                    inside = np.searchsorted(starts, moved, side="right") - 1
                    end = ends[np.maximum(inside, 0)]
                    moved = np.where((inside >= 0) & (end > moved), end, moved)
            if np.array_equal(moved, at):
                first_free: list[int] = at.tolist()
                return first_free
            at = moved


GROUP = "world"  # the default process group's name, and the group of calls recorded without one (seen only by the profiler)


def collectives(data: RunData) -> list[tuple[int, str, Comm]]:
    """(step, key, call) of every recorded collective in time order; ``key`` is ``{name}_{i}@{group}``
    with ``i`` the call's index among the step's calls of that name in that group, the same on every rank."""
    seen: dict[tuple[int, str, str], int] = {}  # calls so far per (step, name, group)
    out = []
    for call in sorted(data.comm, key=lambda c: c["start"]):
        step, name, group = call.get("step", 0), call.get("name", "comm"), call.get("group") or GROUP
        index = seen[(step, name, group)] = seen.get((step, name, group), -1) + 1
        out.append((step, f"{name}_{index}@{group}", call))
    return out
