"""Operator statistics by type and by op, for host ops (``cpu_op_*``) and CUDA kernels (``gpu_op_*``).

Only ops inside the profiled steps are counted, so per-step frequencies divide by a real step count.
Aggregation is a sort plus ``np.add.reduceat``: linear in the number of ops with no Python loop per op.
"""
import numpy as np

from ..writers import write_csv

CPU_TYPE_HEADER = ["op_type", "type_occurrences", "execution_frequency(per-step)", "total_compute_time(ms)", "avg_time(ms)", "percent"]
CPU_DETAIL_HEADER = ["op_side", "op_type", "op_name", "full_op_name", "op_occurrences", "op_total_time(ms)", "op_avg_time(ms)", "total_proportion", "subgraph", "pid"]
GPU_TYPE_HEADER = ["op_type", "type_occurrences", "total_time(us)", "proportion", "avg_time(us)"]
GPU_DETAIL_HEADER = ["op_side", "op_type", "op_name", "op_full_name", "op_occurrences", "op_total_time(us)", "op_avg_time(us)", "proportion", "cuda_activity_cost_time(us)", "cuda_activity_call_count"]


def group_sum(keys, durations):
    """(unique keys, counts, summed durations) sorted by summed duration, largest first."""
    if len(keys) == 0:
        return np.array([], dtype=object), np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    boundaries = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    totals = np.add.reduceat(durations[order], boundaries)
    counts = np.diff(np.r_[boundaries, len(sorted_keys)])
    unique = sorted_keys[boundaries]
    rank = np.argsort(-totals, kind="stable")
    return unique[rank], counts[rank], totals[rank]


def profiled_op_mask(data):
    """Ops that ran inside a profiled step (all ops when no step boundaries were seen)."""
    if not data.op_count:
        return np.zeros(0, dtype=bool)
    window = [s["n"] for s in data.window_steps]
    if not window:
        return np.ones(data.op_count, dtype=bool)
    return np.isin(data.ops["step"], window)


def short_name(full_name):
    return full_name.rsplit("/", 1)[-1]


def _device_tables(data, mask, device):
    """Types, names and durations of the profiled ops that ran on the host or on a CUDA device."""
    ops = data.ops
    select = mask & ((ops["device"] == "cuda") if device == "cuda" else (ops["device"] != "cuda"))
    return ops["type"][select], ops["name"][select], ops["dur"][select]


def write(data, ctx):
    mask = profiled_op_mask(data)
    steps = max(len(data.window_steps), 1)
    result = {"types": [], "total_ms": 0.0}
    if not data.op_count:
        return result
    types, names, durs = _device_tables(data, mask, "cpu")
    total = float(durs.sum()) or 1.0
    unique, counts, totals = group_sum(types.astype(str), durs)
    type_rows = [[t, int(c), round(c / steps, 4), round(s / 1e6, 6), round(s / 1e6 / c, 6), round(s / total, 6)]
                 for t, c, s in zip(unique, counts, totals)]
    write_csv(ctx.path(f"cpu_op_type_info_{ctx.rank}.csv"), CPU_TYPE_HEADER, type_rows)
    type_of = dict(zip(names.tolist(), types.tolist()))
    pid = data.meta.get("pid", 0)
    unique, counts, totals = group_sum(names.astype(str), durs)
    detail_rows = [["Host", type_of[n], short_name(n), n, int(c), round(s / 1e6, 6), round(s / 1e6 / c, 6), round(s / total, 6),
                    n.split("/", 1)[0] if "/" in n else "Default", pid] for n, c, s in zip(unique, counts, totals)]
    write_csv(ctx.path(f"cpu_op_detail_info_{ctx.rank}.csv"), CPU_DETAIL_HEADER, detail_rows)
    result["types"] = [{"op_type": r[0], "count": r[1], "total_ms": r[3], "percent": r[5]} for r in type_rows]
    result["total_ms"] = total / 1e6
    result["ops"] = len(detail_rows)
    _write_gpu(data, mask, ctx)
    return result


def _write_gpu(data, mask, ctx):
    types, names, durs = _device_tables(data, mask, "cuda")
    if not len(durs):
        return
    total = float(durs.sum()) or 1.0
    unique, counts, totals = group_sum(types.astype(str), durs)
    write_csv(ctx.path(f"gpu_op_type_info_{ctx.rank}.csv"), GPU_TYPE_HEADER,
              [[t, int(c), round(s / 1e3, 3), round(s / total, 6), round(s / 1e3 / c, 3)] for t, c, s in zip(unique, counts, totals)])
    type_of = dict(zip(names.tolist(), types.tolist()))
    unique, counts, totals = group_sum(names.astype(str), durs)
    write_csv(ctx.path(f"gpu_op_detail_info_{ctx.rank}.csv"), GPU_DETAIL_HEADER,
              [["Device", type_of[n], short_name(n), n, int(c), round(s / 1e3, 3), round(s / 1e3 / c, 3), round(s / total, 6),
                round(s / 1e3, 3), int(c)] for n, c, s in zip(unique, counts, totals)])
