"""Step trace: each step split into step interval, forward+backward and tail.

A step runs from the previous step's end to its own boundary. FP start and BP end are chosen by
scope, not by position: forward start is the first forward op of the step from the host's forward
marker (or the data fetch) on, never a data fetch, a gradient op or optimizer housekeeping such as
the global step's ``AssignAdd``; backward end is the end of the last op of the gradient scope
(``Gradients/...`` in MindSpore's GRAPH op names, ``autograd::engine`` in torch). Where names carry
no scope (MindSpore PYNATIVE), backward ends at the last op before the host's backward marker (end
of ``torch.autograd.backward``, start of the optimizer cell), else by the guide's rule (the op before
the last all-reduce or the first optimizer op). ``PROFILING_FP_START`` / ``PROFILING_BP_END``
override (an op name that never occurs is reported). The rule that chose the points of most steps
is named in the summary (``step_points``). Stage times always add up to the step time.
Files: ``names.STEP_TRACE`` (10 ns units, average row last) and ``names.STEP_POINTS``.
"""
from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..contract import readers
from ..contract.columns import AVERAGE_ROW, STEP_TRACE_HEADER, per_step_ms, step_trace_table
from ..contract.names import STEP_POINTS, STEP_TRACE
from ..contract.pages import File, Page
from ..writers import write_csv, write_json

if TYPE_CHECKING:
    from ..records import Step
    from .opcolumns import OpColumns
    from .run import Context
    from .rundata import RunData

ALL_REDUCE_TYPES = ("AllReduce", "allreduce", "all_reduce", "HcomAllReduce", "c10d::allreduce_")
OPTIMIZER_MARKERS = ("optimizer", "ApplyMomentum", "Adam", "ApplyGradientDescent", "SGD", "Optimizer.step", "Lamb", "AdamW")
HOUSEKEEPING_TYPES = ("AssignAdd", "Assign")  # the optimizer's global step and state updates: never the forward start
GRADIENT_SCOPES = ("Gradients/", "autograd::engine::evaluate_function")
# Codes of the rules, in the order they are tried; ``FP_RULES[code]`` names the rule in the output.
FP_RULES = ("PROFILING_FP_START", "first forward op", "host forward start (no ops)")
BP_RULES = ("PROFILING_BP_END", "last op of the gradient scope", "last op before the host backward end",
            "op before the last all-reduce or first optimizer op", "host backward end (no ops)")


def _name_matches(names: np.ndarray, wanted: str) -> np.ndarray:
    """Exact full name, the last scope segment, or a substring: users paste whichever they saw."""
    return np.array([n == wanted or n.rsplit("/", 1)[-1] == wanted or wanted in n for n in names], dtype=bool)


def _first_in(mask: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each segment [lo, hi) of ``mask``: the position of its first True, or -1."""
    hits = np.flatnonzero(mask)
    if not len(hits):
        return np.full(len(lo), -1)
    k = np.searchsorted(hits, lo)
    position = hits[np.minimum(k, len(hits) - 1)]
    return np.where((k < len(hits)) & (position < hi), position, -1)


def _last_in(mask: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each segment [lo, hi) of ``mask``: the position of its last True, or -1."""
    hits = np.flatnonzero(mask)
    if not len(hits):
        return np.full(len(lo), -1)
    k = np.searchsorted(hits, hi) - 1
    position = hits[np.maximum(k, 0)]
    return np.where((k >= 0) & (position >= lo), position, -1)


class OpMarks:
    """Per-op booleans the FP/BP rules need, computed once per unique op name or type, not per step;
    None where no op matches (a run without all-reduce ops pays nothing for that rule)."""

    def __init__(self, data: RunData, fp_name: str | None, bp_name: str | None) -> None:
        names, types = data.op_names.astype(str), data.op_types.astype(str)
        name_id, type_id = data.ops["name_id"], data.ops["type_id"]
        optimizer = np.zeros(len(names), dtype=bool)
        for marker in OPTIMIZER_MARKERS:
            optimizer |= np.char.find(names, marker) >= 0
        self.all_reduce = _per_op(np.isin(types, ALL_REDUCE_TYPES), type_id)
        self.optimizer = _per_op(optimizer, name_id)
        gradient = np.zeros(len(names), dtype=bool)
        for scope in GRADIENT_SCOPES:
            gradient |= np.char.startswith(names, scope) | (np.char.find(names, "/" + scope) >= 0)
        self.gradient = _per_op(gradient, name_id)
        not_forward = np.isin(types, HOUSEKEEPING_TYPES) | (np.char.find(types, "GetNext") >= 0)
        self.not_forward = (gradient | optimizer)[name_id] | not_forward[type_id]
        self.fp = _per_op(_name_matches(names, fp_name), name_id) if fp_name else None
        self.bp = _per_op(_name_matches(names, bp_name), name_id) if bp_name else None


def _per_op(by_code: np.ndarray, codes: np.ndarray) -> np.ndarray | None:
    return by_code[codes] if by_code.any() else None


def find_points(steps: Sequence[Step], ops: OpColumns | None, marks: OpMarks | None) -> tuple[np.ndarray, ...]:
    """FP and BP points (ns) of every step, for each the index in ``ops`` of the op that marked it
    (-1: none), and the codes of the rules that chose them (``FP_RULES`` / ``BP_RULES``). All steps
    at once: each step's host ops are one segment of ``host``. Steps without ops keep the host's markers.
    """
    numbers = np.array([s["n"] for s in steps], dtype=np.int64)
    begin = np.array([s["start"] for s in steps], dtype=np.int64)
    finish = np.array([s["end"] for s in steps], dtype=np.int64)
    fp = np.array([s.get("fp") or max((e for _, e in s.get("waits") or ()), default=None) or s["start"] for s in steps], dtype=np.int64)
    host_bp = np.array([s.get("bp") or -1 for s in steps], dtype=np.int64)  # -1: no backward marker
    bp = np.where(host_bp >= 0, host_bp, finish)
    fp_op = bp_op = np.full(len(steps), -1)
    fp_rule, bp_rule = np.full(len(steps), len(FP_RULES) - 1), np.full(len(steps), len(BP_RULES) - 1)
    on_host = np.zeros(0, dtype=bool) if ops is None else ~ops.on_device
    if len(steps) and ops is not None and marks is not None and on_host.any():  # marks: None exactly when ops are
        host = None if on_host.all() else np.flatnonzero(on_host)  # None: every op (no gathers)
        pick = (lambda column: column) if host is None else (lambda column: column[host])
        step_of = pick(ops["step"])
        in_time_order = not (step_of[1:] < step_of[:-1]).any()
        if not in_time_order:  # ops outside every step (before the first, in pauses) break the order
            order = np.argsort(step_of, kind="stable")  # by step, then start
            host = order if host is None else host[order]
            pick = lambda column: column[host]  # noqa: E731
            step_of = step_of[order]
        lo, hi = np.searchsorted(step_of, numbers), np.searchsorted(step_of, numbers + 1)
        segment = None  # each host op's window step, for the rules that need it
        starts = pick(ops["start"])
        ends = starts + pick(ops["dur"])
        first_hit = lambda mask: np.full(len(steps), -1) if mask is None else _first_in(pick(mask), lo, hi)  # noqa: E731
        last_hit = lambda mask: np.full(len(steps), -1) if mask is None else _last_in(pick(mask), lo, hi)  # noqa: E731

        def chosen(at: np.ndarray, found: np.ndarray, code: int, rule: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """Where no earlier rule found a point, this one's ``found``; its code in ``rule``."""
            take = (at < 0) & (found >= 0)
            return np.where(take, found, at), np.where(take, code, rule)

        fp_at, fp_rule = chosen(np.full(len(steps), -1), first_hit(marks.fp), 0, fp_rule)
        if (fp_at < 0).any():
            forward = ~pick(marks.not_forward)
            if in_time_order:  # the ops from the marker on are a suffix of each segment: binary searches
                from_marker = np.maximum(np.searchsorted(starts, fp), lo)
                first_after = _first_in(forward, from_marker, hi)
            else:
                segment = _window_positions(step_of, numbers)
                after = forward & (segment >= 0) & (starts >= fp[np.maximum(segment, 0)])
                first_after = _first_in(after, lo, hi)
            fp_at, fp_rule = chosen(fp_at, first_after, 1, fp_rule)
        bp_at, bp_rule = chosen(np.full(len(steps), -1), last_hit(marks.bp), 0, bp_rule)
        bp_at, bp_rule = chosen(bp_at, last_hit(marks.gradient), 1, bp_rule)
        if ((bp_at < 0) & (host_bp >= 0)).any():
            segment = _window_positions(step_of, numbers) if segment is None else segment
            before = (segment >= 0) & (ends <= np.where(host_bp >= 0, host_bp, np.iinfo(np.int64).min)[segment])
            bp_at, bp_rule = chosen(bp_at, _last_in(before, lo, hi), 2, bp_rule)
        last_reduce, first_optimizer = last_hit(marks.all_reduce), first_hit(marks.optimizer)
        by_rule = np.where(last_reduce > lo, last_reduce - 1, np.where(first_optimizer > lo, first_optimizer - 1, hi - 1))
        bp_at, bp_rule = chosen(bp_at, np.where(hi > lo, by_rule, -1), 3, bp_rule)
        fp = np.where(fp_at >= 0, starts[np.maximum(fp_at, 0)], fp)
        bp = np.where(bp_at >= 0, ends[np.maximum(bp_at, 0)], bp)
        if host is not None:
            fp_at, bp_at = np.where(fp_at >= 0, host[fp_at], -1), np.where(bp_at >= 0, host[bp_at], -1)
        fp_op, bp_op = fp_at, bp_at
    fp = np.minimum(np.maximum(fp, begin), finish)
    bp = np.minimum(np.maximum(bp, fp), finish)
    return fp, bp, fp_op, bp_op, fp_rule, bp_rule


def _window_positions(step_of: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """Each op's position among the window steps ``numbers`` by its step number (-1: in none of them)."""
    window_index = np.full(max(int(numbers.max()), int(step_of.max())) + 1, -1)
    window_index[numbers] = np.arange(len(numbers))
    positions: np.ndarray = window_index[step_of]
    return positions


def _names_at(data: RunData, index: np.ndarray) -> list[str | None]:
    """The name of the op at each index (None for -1)."""
    if not data.op_count:
        return [None] * len(index)
    names = data.op_names[data.ops["name_id"][np.maximum(index, 0)]].tolist()
    return [name if i >= 0 else None for name, i in zip(names, index.tolist())]


def compute(data: RunData, fp_name: str | None = None, bp_name: str | None = None) -> dict[str, Any]:
    """Per window step: dict with ns times, points and stage durations; plus notes on FP/BP names."""
    steps = data.window_steps or []
    notes = []
    marks = OpMarks(data, fp_name, bp_name) if data.op_count else None
    fp, bp, fp_op, bp_op, fp_rule, bp_rule = find_points(steps, data.ops if data.op_count else None, marks)
    fp_ops, bp_ops = collections.Counter(_names_at(data, fp_op)), collections.Counter(_names_at(data, bp_op))
    rows = [{"n": step["n"], "start": step["start"], "end": step["end"], "fp": f, "bp": b,
             "total": step["end"] - step["start"], "interval": f - step["start"],
             "fp_and_bp": b - f, "tail": step["end"] - b, "wait": step.get("wait", 0)}
            for step, f, b in zip(steps, fp.tolist(), bp.tolist())]
    fp_seen = marks is not None and marks.fp is not None
    bp_seen = marks is not None and marks.bp is not None
    if fp_name and steps and not fp_seen:
        notes.append(f"PROFILING_FP_START={fp_name!r} matched no op; forward start was found automatically")
    if bp_name and steps and not bp_seen:
        notes.append(f"PROFILING_BP_END={bp_name!r} matched no op; backward end was found automatically")
    typical = lambda counts: next((name for name, _ in counts.most_common() if name), None)  # noqa: E731 (step 1 compiles: use the usual op)
    usual_rule = lambda codes, names: names[np.bincount(codes).argmax()] if len(codes) else None  # noqa: E731
    return {"rows": rows, "fp_start": fp_name if fp_seen else typical(fp_ops), "bp_end": bp_name if bp_seen else typical(bp_ops),
            "fp_rule": usual_rule(fp_rule, FP_RULES), "bp_rule": usual_rule(bp_rule, BP_RULES), "notes": notes}


def write(data: RunData, ctx: Context) -> dict[str, Any]:
    result = compute(data, data.options.fp_start, data.options.bp_end)
    table = step_trace_table(result["rows"])
    result["per_step_ms"] = per_step_ms(table)
    average = []
    if table:  # integer means, exact (points near 2e17 exceed a double's precision): MindInsight reads every cell with int()
        average = [[AVERAGE_ROW] + [(2 * sum(column) + len(table)) // (2 * len(table)) for column in list(zip(*table))[1:]]]
    write_csv(ctx.path(STEP_TRACE), STEP_TRACE_HEADER, table + average)
    write_json(ctx.path(STEP_POINTS),
               {"fp_start": result["fp_start"] or "", "bp_end": result["bp_end"] or ""}, ctx.pretty)
    ctx.notes.extend(result["notes"])
    return result


PAGE = Page("step_trace", (File("step_trace", (STEP_TRACE,), readers.read_step_trace, tuple(STEP_TRACE_HEADER)),
                           File("step_points", (STEP_TRACE,), readers.read_step_points),  # the timeline download's lanes: exact instants
                           File("point_info", (STEP_POINTS,), readers.read_json)))
