"""Operator statistics by type and by op, for host ops (``cpu_op_*``) and CUDA kernels (``gpu_op_*``).

Times are self times (an op's own time without the ops nested in it, torch's "Self CPU"), so they
add up to the time spent and percentages sum to 1; counts include nested calls, as torch's table.
``cpu_op_shape_info`` adds each op's input shapes and its total time (nested ops included) beside its self time.

Only ops inside the profiled steps are counted, so per-step frequencies divide by a real step count.
Aggregation is a sort plus ``np.add.reduceat``: linear in the number of ops with no Python loop per op.

Compute means ops running: torch also reports ``record_function`` ranges (``Optimizer.step#SGD.step``,
user ranges, a framework's closures). They are not ops: a range's self time is the Python code run
inside it, not compute. ``op_kinds`` tells them
apart; the op tables rank ops only, and the ranges get their own table (``annotations``).
"""
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..contract import readers
from ..contract.columns import CPU_OP_DETAIL_HEADER, CPU_OP_SHAPE_HEADER, CPU_OP_TYPE_HEADER, GPU_OP_DETAIL_HEADER, GPU_OP_TYPE_HEADER
from ..contract.frameworks import profile_of
from ..contract.names import CPU_OP_DETAIL, CPU_OP_SHAPES, CPU_OP_TYPES, GPU_OP_DETAIL, GPU_OP_TYPES
from ..contract.pages import File, Page
from ..writers import write_csv
from .opevents import groups
from .rundata import RunData

if TYPE_CHECKING:
    from .run import Context  # no __future__ annotations here: they would shadow this module's ``annotations``

TypeRow = tuple[str, int, float]  # (op type, count, total ns)
OpRow = tuple[str, str, int, float]  # (op name, op type, count, total ns)
_WEIGHT_CHUNK = 1 << 18  # ops ``summed`` converts at a time


def summed(codes: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """``np.bincount(codes, weights, minlength=size)``, the weights converted to float64 a chunk at a time: a whole
    column's copy (16 MB at 2 M ops) would sit beside the timeline's arrays, written meanwhile (``analyse_pages``)."""
    total = np.zeros(size, dtype=np.float64)
    for lo in range(0, len(codes), _WEIGHT_CHUNK):
        total += np.bincount(codes[lo:lo + _WEIGHT_CHUNK], weights=weights[lo:lo + _WEIGHT_CHUNK], minlength=size)
    return total


def group_sum(codes: np.ndarray, durations: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes present, counts, summed durations) per integer code, largest total first."""
    if len(codes) == 0:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64), np.array([], dtype=np.float64)
    counts = np.bincount(codes)
    totals = np.bincount(codes, weights=durations)
    present = np.flatnonzero(counts)
    order = present[np.argsort(-totals[present], kind="stable")]
    return order, counts[order], totals[order]


def type_of_names(data: RunData) -> np.ndarray:
    """Op type name for each op-name code."""
    types = np.zeros(len(data.op_names), dtype=np.int64)
    types[data.ops["name_id"]] = data.ops["type_id"]
    return types


OP, ANNOTATION = 0, 1  # what each recorded event is (``op_kinds``)


def name_kinds(data: RunData) -> np.ndarray:
    """OP or ANNOTATION for each op-name code. Only torch records ranges among its events: its ops are
    ``namespace::op`` (``aten::addmm``, ``c10d::allreduce_``), CUDA kernels and memcpy/memset; any
    other name is a ``record_function`` range."""
    names = data.op_names.astype(str)
    kinds = np.full(len(names), OP, dtype=np.int8)
    profile = profile_of(data.meta.get("framework"))
    if not (profile and profile.ranges_among_ops):
        return kinds
    for code, name in enumerate(names.tolist()):
        if "::" not in name:
            kinds[code] = ANNOTATION
    return kinds


def op_kinds(data: RunData) -> np.ndarray:
    """The kind of each recorded event; CUDA kernels are always ops. Where every event is an op (any
    run but torch's), a read-only view of OP: no pass over the ops."""
    by_name = name_kinds(data)
    if (by_name == OP).all():
        return np.broadcast_to(np.int8(OP), data.ops["name_id"].shape)
    return np.where(data.ops.on_device, OP, by_name[data.ops["name_id"]])


def profiled_op_mask(data: RunData) -> np.ndarray:
    """Ops that ran inside a profiled step (all ops when no step boundaries were seen)."""
    if not data.op_count:
        return np.zeros(0, dtype=bool)
    window = [s["n"] for s in data.window_steps]
    if not window:
        return np.ones(data.op_count, dtype=bool)
    steps = data.ops["step"]
    in_window = np.zeros(max(max(window), int(steps.max())) + 1, dtype=bool)  # a table over step numbers: one gather per op
    in_window[window] = True
    mask: np.ndarray = in_window[steps]
    return mask


def counted_op_mask(data: RunData) -> np.ndarray:
    """The ops the op tables count: ops (not ``record_function`` ranges or other kinds) in a profiled step.
    The exports' op tables count the same."""
    mask: np.ndarray = profiled_op_mask(data) & (op_kinds(data) == OP)
    return mask


def shapes_known(data: RunData, mask: np.ndarray) -> np.ndarray:
    """Whether each op under MASK has input shapes: a lookup on the shape codes, not a pass over strings."""
    known = np.array([s is not None for s in data.ops.code_values["shape"]], dtype=bool)
    per_op: np.ndarray = known[data.ops["shape_id"]][mask]  # booleans gathered, then masked: no copy of the codes
    return per_op


def short_name(full_name: str) -> str:
    return full_name.rsplit("/", 1)[-1]


def device_tables(data: RunData, mask: np.ndarray, device: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Type codes, name codes and self times of the profiled ops that ran on the host or on a CUDA device."""
    ops = data.ops
    cuda = ops.on_device
    select = mask & (cuda if device == "cuda" else ~cuda)
    columns = ops["type_id"], ops["name_id"], ops["self"]
    if not select.all():  # all of them (the usual host-only run): no copies
        columns = tuple(column[select] for column in columns)
    return columns[0], columns[1], columns[2].astype(np.float64)  # bincount weighs in float64: converted once, not per table


class OpGroups(NamedTuple):
    """The counted ops of one device grouped by (op name, op type, input shape): one pass over the ops, which the
    type, op and by-shape tables then regroup (a few hundred groups, not millions of ops)."""
    names: np.ndarray  # each group's codes
    types: np.ndarray
    shapes: np.ndarray
    counts: np.ndarray  # its ops
    self_ns: np.ndarray  # their self time
    total_ns: np.ndarray  # their time with the ops nested inside


def op_groups(data: RunData, mask: np.ndarray, device: str) -> OpGroups | None:
    """The ops under MASK that ran on the host ("cpu") or on a CUDA device ("cuda") as ``OpGroups``; None without
    any. Numbered by ``groups`` (a presence table, not a sort)."""
    ops = data.ops
    cuda = ops.on_device
    select = mask & (cuda if device == "cuda" else ~cuda)
    every = bool(select.all())  # the usual host-only run: no copies
    names, types, shapes, own, total = (column if every else column[select]
                                        for column in (ops["name_id"], ops["type_id"], ops["shape_id"], ops["self"], ops["dur"]))
    if not len(names):
        return None
    group, first = groups([names, types, shapes])
    size = len(first)
    return OpGroups(names[first], types[first], shapes[first], np.bincount(group, minlength=size), summed(group, own, size), summed(group, total, size))


def regrouped(codes: np.ndarray, counts: np.ndarray, totals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``group_sum`` of groups already counted: (codes present, counts, summed totals) per code, largest total
    first. Times are whole ns, so float sums are exact in any order and agree with ``group_sum`` over the ops."""
    count = np.bincount(codes, weights=counts).astype(np.int64)
    total = np.bincount(codes, weights=totals)
    present = np.flatnonzero(count)
    order = present[np.argsort(-total[present], kind="stable")]
    return order, count[order], total[order]


def _write_shapes(data: RunData, host: OpGroups, ctx: "Context", op_type: np.ndarray) -> None:
    """Host ops by (op, input shape) with self and total time (total keeps the ops nested inside, torch's
    "CPU total"), from the host groups: (name, shape) pairs numbered by ``groups`` in the order of their codes."""
    pair, first = groups([host.names, host.shapes])
    size = len(first)
    counts = np.bincount(pair, weights=host.counts, minlength=size).astype(np.int64)
    self_ns = np.bincount(pair, weights=host.self_ns, minlength=size)
    total_ns = np.bincount(pair, weights=host.total_ns, minlength=size)
    pair_names, pair_shapes = host.names[first].tolist(), host.shapes[first].tolist()
    shape_values = data.ops.code_values["shape"]
    rows = []
    for i in np.argsort(-self_ns, kind="stable").tolist():
        name, shape = pair_names[i], pair_shapes[i]
        rows.append([data.op_types[op_type[name]], data.op_names[name], shape_values[shape] or "", int(counts[i]),
                     round(self_ns[i] / 1e6, 6), round(total_ns[i] / 1e6, 6)])
    write_csv(ctx.path(CPU_OP_SHAPES), CPU_OP_SHAPE_HEADER, rows)


def _tables(data: RunData, grouped: OpGroups, op_type: np.ndarray) -> tuple[list[TypeRow], list[OpRow], float]:
    """(type rows, op rows) as (name, count, total ns) plus the grand total, for one device's grouped ops."""
    type_lookup, name_lookup = data.op_types, data.op_names
    types = [(type_lookup[c], n, s) for c, n, s in zip(*regrouped(grouped.types, grouped.counts, grouped.self_ns))]
    ops = [(name_lookup[c], type_lookup[op_type[c]], n, s) for c, n, s in zip(*regrouped(grouped.names, grouped.counts, grouped.self_ns))]
    return types, ops, float(grouped.self_ns.sum()) or 1.0


def annotations(data: RunData, mask: np.ndarray, kinds: np.ndarray, steps: int) -> list[dict[str, Any]]:
    """The ``record_function`` ranges: inclusive time (the range) and self time (no op inside), per step."""
    select = mask & (kinds == ANNOTATION)
    if not select.any():
        return []
    codes, durs, own = data.ops["name_id"][select], data.ops["dur"][select].astype(np.float64), data.ops["self"][select].astype(np.float64)
    own_total = np.bincount(codes, weights=own)
    return [{"name": str(data.op_names[c]), "count": int(n), "total_ms": round(float(s) / 1e6, 4),
             "self_ms": round(float(own_total[c]) / 1e6, 4), "per_step_ms": round(float(s) / 1e6 / steps, 4)}
            for c, n, s in zip(*group_sum(codes, durs))][:50]


def write(data: RunData, ctx: "Context") -> dict[str, Any]:
    steps = max(len(data.window_steps), 1)
    result: dict[str, Any] = {"types": [], "total_ms": 0.0, "annotations": []}
    if not data.op_count:
        return result
    profiled, kinds, op_type = profiled_op_mask(data), op_kinds(data), type_of_names(data)
    mask = profiled & (kinds == OP)  # counted_op_mask
    result["annotations"] = annotations(data, profiled, kinds, steps)
    host = op_groups(data, mask, "cpu")
    if host is not None:
        types, ops, total = _tables(data, host, op_type)
        # execution_frequency(per-step) is an integer: MindInsight reads it with int()
        type_rows = [[t, int(c), round(c / steps), round(s / 1e6, 6), round(s / 1e6 / c, 6), round(s / total, 6)] for t, c, s in types]
        write_csv(ctx.path(CPU_OP_TYPES), CPU_OP_TYPE_HEADER, type_rows)
        pid = data.meta.get("pid", 0)
        detail_rows = [["Host", t, short_name(n), n, int(c), round(s / 1e6, 6), round(s / 1e6 / c, 6), round(s / total, 6),
                        n.split("/", 1)[0] if "/" in n else "Default", pid] for n, t, c, s in ops]
        write_csv(ctx.path(CPU_OP_DETAIL), CPU_OP_DETAIL_HEADER, detail_rows)
        _write_shapes(data, host, ctx, op_type)
        result.update({"types": [{"op_type": r[0], "count": r[1], "total_ms": r[3], "percent": r[5]} for r in type_rows],
                       "total_ms": total / 1e6, "ops": len(detail_rows)})
    kernels = op_groups(data, mask, "cuda")
    if kernels is not None:
        types, ops, total = _tables(data, kernels, op_type)
        write_csv(ctx.path(GPU_OP_TYPES), GPU_OP_TYPE_HEADER,
                  [[t, int(c), round(s / 1e3, 3), round(s / total, 6), round(s / 1e3 / c, 3)] for t, c, s in types])
        write_csv(ctx.path(GPU_OP_DETAIL), GPU_OP_DETAIL_HEADER,
                  [["Device", t, short_name(n), n, int(c), round(s / 1e3, 3), round(s / 1e3 / c, 3), round(s / total, 6),
                    round(s / 1e3, 3), int(c)] for n, t, c, s in ops])
    return result


PAGE = Page("operators", (File("op_types", (CPU_OP_TYPES,), readers.read_op_types, tuple(CPU_OP_TYPE_HEADER)),
                          File("op_detail", (CPU_OP_DETAIL,), readers.read_op_detail, tuple(CPU_OP_DETAIL_HEADER)),
                          File("op_shapes", (CPU_OP_SHAPES,), readers.read_op_shapes, tuple(CPU_OP_SHAPE_HEADER)),
                          File("gpu_op_types", (GPU_OP_TYPES,), readers.read_gpu_op_types, tuple(GPU_OP_TYPE_HEADER)),
                          File("gpu_op_detail", (GPU_OP_DETAIL,), columns=tuple(GPU_OP_DETAIL_HEADER))),
            write, {"types": [], "total_ms": 0.0})
