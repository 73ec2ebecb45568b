"""The step breakdown: each step split into stages (``STAGES``), and the figures the rules read of them.

Each step is split into stages without overlap: data wait, compute (some op running: the union of the
ops' intervals outside the wait; annotation ranges and Python calls are not ops, see
``operators.op_kinds``), runtime (gaps between ops inside a compiled graph: MindSpore GRAPH mode,
torch.compile regions), pause (the agent's own: the profiler's start-up) and host (the rest: Python
between and around the ops); communication (time in collectives) is counted beside them, inside compute or host.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...contract.frameworks import profile_of
from ..intervals import length_within, merge
from ..operators import ANNOTATION, OP, op_kinds
from ..stats import median

if TYPE_CHECKING:
    from ...records import Comm

Row = dict[str, Any]  # one step's figures: ``step_breakdown``'s rows

STAGES = ("wait", "compute", "runtime", "host", "pause")  # a step's time, split without overlap
STAGE_WORDS = {"wait": "data wait", "compute": "op time", "runtime": "runtime gaps between compiled ops", "host": "host time",
               "pause": "the profiler's own pauses"}


def median_of(values: list[float]) -> float:
    """The median; 0.0 for none (a stage no step has costs nothing)."""
    return median(values) if values else 0.0


def mean_of(values: list[float]) -> float:
    """The mean (numpy's summation, so the figures stay those already written); 0.0 for none."""
    return float(np.mean(values)) if values else 0.0


def mad_of(values: list[float]) -> float:
    """Median absolute deviation, scaled to a standard deviation for normal data."""
    if not values:
        return 0.0
    middle = median(values)
    return 1.4826 * median(abs(float(v) - middle) for v in values)


def stage_figures(steady: list[Row], key: str) -> tuple[float, float]:
    """(mean, median) of a stage over the steady steps."""
    values = [r[key] for r in steady]
    return mean_of(values), median_of(values)


def collective_ms(comm: Sequence[Comm]) -> dict[int, float]:
    """Time (ms) in recorded collective calls, per step: where a rank waits for its peers."""
    per_step: dict[int, float] = {}
    for call in comm:
        per_step[call.get("step", 0)] = per_step.get(call.get("step", 0), 0.0) + call["dur"] / 1e6
    return per_step


def compiled_regions(data: Any) -> np.ndarray:
    """torch.compile's ranges (n x 2, ns, merged) where the ops of a compiled graph run; empty elsewhere."""
    profile = profile_of(data.meta.get("framework"))
    prefixes = profile.compiled_region_prefixes if profile else ()
    if not data.op_count or not prefixes:
        return np.zeros((0, 2), dtype=np.int64)
    names = data.op_names.astype(str)
    wanted = np.array([name.startswith(prefixes) for name in names.tolist()], dtype=bool)
    select = wanted[data.ops["name_id"]] & (op_kinds(data) == ANNOTATION)
    if not select.any():
        return np.zeros((0, 2), dtype=np.int64)
    starts = data.ops["start"][select]
    ends = starts + data.ops["dur"][select]
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    firsts = np.flatnonzero(np.concatenate(([True], starts[1:] > ends[:-1])))
    return np.stack([starts[firsts], np.maximum.reduceat(ends, firsts)], axis=1)


def graph_mode(data: Any) -> bool:
    """MindSpore's step runs as one compiled graph (GRAPH mode): from the compiled call's start (the
    step's forward start) to its last op, or to its return where the step ends there (the step record's
    ``compiled_call``), the time no op runs is the runtime's (launch, between ops, the wait for the last)."""
    profile = profile_of(data.meta.get("framework"))
    return bool(profile and profile.graph_context_mode and data.meta.get("context_mode") == profile.graph_context_mode)


def step_breakdown(data: Any, rows: list[Row]) -> list[Row]:
    """Per step (ms): total and its stages (``STAGES``: data wait, compute, runtime, host, pause), plus
    communication (time in collectives, inside compute or host). Compute is the union of the ops'
    intervals (ops started in the step before and still running included) clipped to the step, less
    its part inside the step's waits: a few vectorised look-ups for all steps (``intervals``)."""
    ops = data.ops
    if data.op_count:
        select = (op_kinds(data) == OP) & ~ops.on_device
        starts, durations = (ops["start"], ops["dur"]) if select.all() else (ops["start"][select], ops["dur"][select])
        busy_starts, busy_ends = merge(starts, starts + durations)
    else:
        busy_starts = busy_ends = np.zeros(0, dtype=np.int64)
    lo = np.array([row["start"] for row in rows], dtype=np.int64)
    hi = np.array([row["end"] for row in rows], dtype=np.int64)
    compute = length_within(busy_starts, busy_ends, lo, np.maximum(hi, lo))
    steps = {s["n"]: s for s in data.window_steps}
    owner, wait_lo, wait_hi = [], [], []
    for i, row in enumerate(rows):
        for a, b in steps.get(row["n"], {}).get("waits") or ():
            owner.append(i)
            wait_lo.append(min(max(a, row["start"]), row["end"]))
            wait_hi.append(max(min(b, row["end"]), wait_lo[-1]))
    np.subtract.at(compute, owner, length_within(busy_starts, busy_ends, wait_lo, wait_hi))  # ops run while fetching data are the wait's
    runtime = _runtime_ns(data, rows, steps, busy_starts, busy_ends, lo, hi)
    in_collectives = collective_ms(data.comm)
    out = []
    for row, ns, gaps in zip(rows, compute.tolist(), runtime.tolist()):
        waits = steps.get(row["n"], {}).get("waits") or ()
        paused = data.paused_ns(row["start"], row["end"]) / 1e6
        total, busy_ms, runtime_ms = row["total"] / 1e6, float(ns) / 1e6, float(gaps) / 1e6
        wait = max(row.get("wait", 0) / 1e6 - sum(data.paused_ns(a, b) for a, b in waits) / 1e6, 0.0)
        out.append({"n": row["n"], "start": row["start"], "end": row["end"], "total": total, "wait": wait, "compute": busy_ms,
                    "runtime": runtime_ms, "pause": paused, "host": max(total - wait - busy_ms - runtime_ms - paused, 0.0),
                    "communication": in_collectives.get(row["n"], 0.0)})
    return out


def _runtime_ns(data: Any, rows: list[Row], steps: dict[int, Any], busy_starts: np.ndarray, busy_ends: np.ndarray,
                lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per step, the time inside a compiled graph that no op runs (ns). MindSpore GRAPH: from the compiled
    call's start (the forward start) to its last op, or to its return where the step ends there; torch:
    inside torch.compile's regions."""
    runtime = np.zeros(len(rows), dtype=np.int64)
    if not len(busy_starts):
        return runtime
    if graph_mode(data) or any(s.get("compiled_call") for s in steps.values()):
        first = np.searchsorted(busy_ends, lo, side="right")  # the first op still running at or after the step's start
        last = np.searchsorted(busy_starts, hi, side="left") - 1  # the last op started before its end
        for i, row in enumerate(rows):
            step = steps.get(row["n"], {})
            if first[i] > last[i] or not (graph_mode(data) or step.get("compiled_call")):
                continue
            begin = max(row["start"], min(step.get("fp") or busy_starts[first[i]], busy_starts[first[i]]))
            end = row["end"] if step.get("compiled_call") else min(int(busy_ends[last[i]]), row["end"])
            if end > begin:
                runtime[i] = end - begin - int(length_within(busy_starts, busy_ends, [begin], [end])[0])
        return runtime
    regions = compiled_regions(data)
    for a, b in regions.tolist():  # few: one or two a step
        for i in range(int(np.searchsorted(hi, a, side="right")), int(np.searchsorted(lo, b, side="left"))):
            begin, end = max(a, int(lo[i])), min(b, int(hi[i]))
            if end > begin:
                runtime[i] += end - begin - int(length_within(busy_starts, busy_ends, [begin], [end])[0])
    return runtime
