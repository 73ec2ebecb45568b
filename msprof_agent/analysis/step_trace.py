"""Step trace: each step split into step interval, forward+backward and tail.

A step runs from the previous step's end to its own boundary. FP start and BP end come from
``PROFILING_FP_START`` / ``PROFILING_BP_END`` when set (an op name that never occurs is reported),
else as the seed describes: forward starts at the first op after the data fetch (or the host's
forward marker), backward ends at the op before the last all-reduce, or before the first optimizer
op, or at the host's backward marker. Stage times always add up to the step time.
Files: ``step_trace_raw_{r}_detail_time.csv`` (10 ns units, average row last) and
``step_trace_point_info_{r}.json``.
"""
import collections

import numpy as np

from ..writers import write_csv, write_json

HEADER = ["step_num", "start_point", "end_point", "total", "fp_point", "bp_point", "iteration_interval", "fp_and_bp", "tail"]
ALL_REDUCE_TYPES = ("AllReduce", "allreduce", "all_reduce", "HcomAllReduce", "c10d::allreduce_")
OPTIMIZER_MARKERS = ("optimizer", "ApplyMomentum", "Adam", "ApplyGradientDescent", "SGD", "Optimizer.step", "Lamb", "AdamW")


def _name_matches(names, wanted):
    """Exact full name, the last scope segment, or a substring: users paste whichever they saw."""
    return np.array([n == wanted or n.rsplit("/", 1)[-1] == wanted or wanted in n for n in names], dtype=bool)


def _first_index(mask):
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _last_index(mask):
    hits = np.flatnonzero(mask)
    return int(hits[-1]) if hits.size else None


class Points:
    """Where forward starts and backward ends in one step, and which op marked each."""

    def __init__(self, fp, bp, fp_op=None, bp_op=None):
        self.fp, self.bp, self.fp_op, self.bp_op = fp, bp, fp_op, bp_op


class OpMarks:
    """Per-op booleans the FP/BP rules need, computed once per unique op name or type, not per step."""

    def __init__(self, data, fp_name, bp_name):
        names, types = data.op_names.astype(str), data.op_types.astype(str)
        name_id, type_id = data.ops["name_id"], data.ops["type_id"]
        optimizer = np.zeros(len(names), dtype=bool)
        for marker in OPTIMIZER_MARKERS:
            optimizer |= np.char.find(names, marker) >= 0
        self.get_next = (np.char.find(types, "GetNext") >= 0)[type_id]
        self.all_reduce = np.isin(types, ALL_REDUCE_TYPES)[type_id]
        self.optimizer = optimizer[name_id]
        self.fp = _name_matches(names, fp_name)[name_id] if fp_name else None
        self.bp = _name_matches(names, bp_name)[name_id] if bp_name else None


def find_points(step, idx, ops, marks):
    """FP/BP points of one step from its ops (indices ``idx``, sorted by start) and the host markers.

    Forward starts at the first op after the host's forward marker (the training callback or module
    pre-hook), else after the data fetch (and any GetNext op). Backward ends at the end of the last
    op before the host's backward marker, else by the seed's all-reduce / optimizer rule.
    """
    begin, finish = step["start"], step["end"]
    last_wait_end = max((e for _, e in step.get("waits") or ()), default=None)
    fp = fp_op = bp = bp_op = None
    if len(idx):
        starts = ops["start"][idx]
        ends = starts + ops["dur"][idx]
        index = _first_index(marks.fp[idx]) if marks.fp is not None else None
        if index is None:
            after = starts >= (step.get("fp") or last_wait_end or begin)
            get_next = _last_index(marks.get_next[idx])
            if get_next is not None:
                after &= np.arange(len(idx)) > get_next
            index = _first_index(after)
        if index is not None:
            fp, fp_op = int(starts[index]), ops["name"][idx[index]]
        index = _last_index(marks.bp[idx]) if marks.bp is not None else None
        if index is None and step.get("bp") is not None:
            index = _last_index(ends <= step["bp"])
        if index is None:
            index = _auto_bp_index(marks.all_reduce[idx], marks.optimizer[idx])
        bp, bp_op = int(ends[index]), ops["name"][idx[index]]
    if fp is None:
        fp = step.get("fp") or last_wait_end or begin
    if bp is None:
        bp = step.get("bp") or finish
    fp = min(max(fp, begin), finish)
    bp = min(max(bp, fp), finish)
    return Points(fp, bp, fp_op, bp_op)


def _auto_bp_index(all_reduce, optimizer):
    """The op before the last all-reduce, else before the first optimizer op, else the step's last op."""
    reduce_at = _last_index(all_reduce)
    if reduce_at is not None and reduce_at > 0:
        return reduce_at - 1
    first_optimizer = _first_index(optimizer)
    if first_optimizer is not None and first_optimizer > 0:
        return first_optimizer - 1
    return len(all_reduce) - 1


def compute(data, fp_name=None, bp_name=None):
    """Per window step: dict with ns times, points and stage durations; plus notes on FP/BP names."""
    steps = data.window_steps or []
    ops = data.ops
    rows, notes = [], []
    fp_ops, bp_ops = collections.Counter(), collections.Counter()
    empty = np.array([], dtype=np.int64)
    marks = None
    if data.op_count:
        marks = OpMarks(data, fp_name, bp_name)
        host = np.flatnonzero(ops["device"] != "cuda")
        host = host[np.argsort(ops["step"][host], kind="stable")]
        step_sorted = ops["step"][host]
    for step in steps:
        idx = empty
        if data.op_count:
            lo, hi = np.searchsorted(step_sorted, [step["n"], step["n"] + 1])
            idx = host[lo:hi]
        points = find_points(step, idx, ops, marks)
        fp_ops[points.fp_op] += 1
        bp_ops[points.bp_op] += 1
        rows.append({
            "n": step["n"], "start": step["start"], "end": step["end"], "fp": points.fp, "bp": points.bp,
            "total": step["end"] - step["start"], "interval": points.fp - step["start"],
            "fp_and_bp": points.bp - points.fp, "tail": step["end"] - points.bp, "wait": step.get("wait", 0),
        })
    fp_seen = marks is not None and marks.fp is not None and bool(marks.fp.any())
    bp_seen = marks is not None and marks.bp is not None and bool(marks.bp.any())
    if fp_name and steps and not fp_seen:
        notes.append(f"PROFILING_FP_START={fp_name!r} matched no op; forward start was found automatically")
    if bp_name and steps and not bp_seen:
        notes.append(f"PROFILING_BP_END={bp_name!r} matched no op; backward end was found automatically")
    typical = lambda counts: next((name for name, _ in counts.most_common() if name), None)  # noqa: E731 (step 1 compiles: use the usual op)
    return {"rows": rows, "fp_start": fp_name if fp_seen else typical(fp_ops), "bp_end": bp_name if bp_seen else typical(bp_ops), "notes": notes}


def write(data, ctx):
    meta = data.meta
    result = compute(data, meta.get("options", {}).get("fp_start"), meta.get("options", {}).get("bp_end"))
    rows = result["rows"]
    table = []
    for r in rows:  # points to 10 ns first, then differences, so the stages add up exactly
        start, end, fp, bp = r["start"] // 10, r["end"] // 10, r["fp"] // 10, r["bp"] // 10
        table.append([r["n"], start, end, end - start, fp, bp, fp - start, bp - fp, end - bp])
    if table:
        means = np.array([row[1:] for row in table], dtype=np.float64).mean(axis=0)
        table.append(["-"] + [f"{v:.2f}" for v in means])
    write_csv(ctx.path(f"step_trace_raw_{ctx.rank}_detail_time.csv"), HEADER, table)
    write_json(ctx.path(f"step_trace_point_info_{ctx.rank}.json"),
               {"fp_start": result["fp_start"] or "", "bp_end": result["bp_end"] or ""}, ctx.pretty)
    ctx.notes.extend(result["notes"])
    return result
