"""The Ascend profiler's text layout for one rank, as msprof-analyze and MindStudio Insight read it.

``{root}/profiler_info_{r}.json``, ``profiler_metadata.json`` and ``ASCEND_PROFILER_OUTPUT/``:
``step_trace_time.csv`` (µs per step), ``trace_view.json`` (a bare Trace Event list with the
``Overlap Analysis`` process and host ops as ``cpu_op``), ``communication.json``,
``communication_matrix.json``, ``op_statistic.csv`` and, with memory, ``memory_record.csv``.
Only what is true of host work is written: nothing that describes device hardware (no
``kernel_details.csv``, no AI Core metrics). Host ops carry ``Core Type`` ``HOST_CPU``.

Collectives recorded by gloo (or any host backend) run over TCP; the Ascend schema has bandwidth slots
only for its own links and msprof-analyze's advisor reads only ``SDMA`` and ``RDMA``. Their traffic is
labelled ``RDMA`` (the slot for traffic between processes over a network transport), with the real
transport in ``communication_matrix.json``'s ``Transport Type`` (``TCP``). The host cannot tell the
wait for a slower peer from the transfer inside one call, so ``Wait Time`` is 0 and ``Transit Time``
is the call's whole duration; the slow-rank view comes from ``step_trace_time.csv``'s Computing.
How groups, calls and links are keyed (as msprof-analyze joins them): ``ascend_comm``.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ..analysis import (
    DEVICE_PID,
    OPS_PID,
    OpEvents,
    counted_op_mask,
    device_tables,
    fixed_events,
    step_events,
    time_base,
    write_trace,
)
from ..contract import names
from ..writers import write_csv, write_json
from . import ascend_comm
from .base import ascend_dir
from .layouts import layout_of

if TYPE_CHECKING:
    from ..analysis import Overlap, Run
    from ..analysis.rundata import RunData

NAME = "text"

STEP_HEADER = ["Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage", "Bubble",
               "Communication(Not Overlapped and Exclude Receive)", "Preparing"]
OP_HEADER = ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)", "Max Time(us)", "Ratio(%)"]
MEMORY_HEADER = ["Component", "Timestamp(us)", "Total Allocated(MB)", "Total Reserved(MB)", "Total Active(MB)", "Stream Ptr", "Device Type"]
OVERLAP_PID = 8
OVERLAP_TRACKS = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")
MB = 1 << 20


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


def target(run: Run) -> str:
    return ascend_dir(run)


def write(run: Run, root: str) -> dict[str, Any]:
    data, overlap = run.data, run.overlap
    out = os.path.join(root, names.ASCEND_OUTPUT)
    rank, pretty = run.ctx.rank, run.ctx.pretty
    info = dict(run.results.get("info") or {}, rank_id=rank, start_info={"collectionTimeBegin": int(data.meta.get("started_ns") or 0) // 1000})
    write_json(os.path.join(root, names.rank_file(names.ASCEND_INFO, rank)), info, pretty)
    write_json(os.path.join(root, names.ASCEND_METADATA), metadata(data), pretty)
    write_csv(os.path.join(out, names.ASCEND_STEP_TRACE), STEP_HEADER, step_table(overlap))
    trace = _trace_view(data, os.path.join(out, names.ASCEND_TRACE_VIEW), overlap)
    rows = ascend_comm.calls(data)
    communication, matrix = ascend_comm.communication_json(rows), ascend_comm.matrix_json(rows)
    write_json(os.path.join(out, names.ASCEND_COMMUNICATION), communication, pretty)
    write_json(os.path.join(out, names.ASCEND_COMMUNICATION_MATRIX), matrix, pretty)
    write_csv(os.path.join(out, names.ASCEND_OP_STATISTIC), OP_HEADER, op_statistic(data))
    if data.mem:
        component = layout_of(data).component
        write_csv(os.path.join(out, names.ASCEND_MEMORY_RECORD), MEMORY_HEADER,
                  [[component, _us(m["ts"]), round(m.get("allocated", 0) / MB, 4), "", "", "", m.get("device", "cpu").upper()]
                   for m in sorted(data.mem, key=lambda m: m["ts"])])
    return {"steps": len(overlap.rows), "trace_view": trace}


def step_table(overlap: Overlap) -> list[list[float]]:
    """step_trace_time.csv's rows, µs (the database's StepTraceTime holds the same)."""
    return [[r["n"], _us(r["computing"]), _us(r["comm_alone"]), _us(r["overlapped"]), _us(r["communication"]), _us(r["free"]),
             _us(r["end"] - r["start"]), 0, _us(r["comm_alone"]), _us(r["preparing"])] for r in overlap.rows]


def metadata(data: RunData) -> dict[str, Any]:
    """World size and rank, the groups of the rank's collectives (``parallel_group_info``: ``ascend_comm``);
    ``distributed_args`` (which msprof-analyze checks: dp * pp * tp = world size) only when the run recorded
    its parallel sizes."""
    meta = data.meta
    result: dict[str, Any] = {"rank": data.rank, "world_size": meta.get("rank_size", 1), "framework": meta.get("framework"), "agent": "msprof-agent"}
    groups = ascend_comm.parallel_group_info(data)
    if groups:
        result["parallel_group_info"] = groups
    sizes = {key: meta[key] for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "data_parallel_size") if meta.get(key)}
    if sizes:
        result["distributed_args"] = dict(sizes, world_size=result["world_size"], rank=data.rank)
    return result


def overlap_events(overlap: Overlap, base: int) -> tuple[list[dict[str, Any]], bytes]:
    """The ``Overlap Analysis`` process: per step one Computing, Communication, Communication(Not Overlapped)
    and Free event, each as long as the step's total of that kind (what the advisor sums), placed from the
    first such interval of the step, ``ts`` from ``base`` (epoch ns). One event per interval would be one per op on a host run."""
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": OVERLAP_PID, "tid": 0, "args": {"name": "Overlap Analysis"}}]
    events += [{"ph": "M", "name": "thread_name", "pid": OVERLAP_PID, "tid": tid, "args": {"name": name}} for tid, name in enumerate(OVERLAP_TRACKS)]
    firsts = [_first_within(starts, ends, overlap.rows) for starts, ends in (overlap.computing, overlap.communication, overlap.comm_alone)]
    firsts.append(overlap.first_free())
    parts = []
    for tid, (name, key, first) in enumerate(zip(OVERLAP_TRACKS, ("computing", "communication", "comm_alone", "free"), firsts)):
        template = b',{"ph":"X","name":"%s","cat":"overlap","pid":%d,"tid":%d,"ts":%%d.%%03d,"dur":%%d.%%03d,"args":{"step":%%d}}' % (
            name.encode(), OVERLAP_PID, tid)
        for row, begin in zip(overlap.rows, first):
            if row[key] > 0:
                begin = max(row["start"], min(begin, row["end"] - row[key]))
                parts.append(template % (*divmod(begin - base, 1000), *divmod(row[key], 1000), row["n"]))
    return events, b"".join(parts)


def _first_within(starts: np.ndarray, ends: np.ndarray, rows: list[dict[str, int]]) -> list[int]:
    """For each step, the start of its first interval (clipped to the step), or the step's start."""
    lo = np.array([r["start"] for r in rows], dtype=np.int64)
    at = np.searchsorted(ends, lo, side="right")
    first = np.where(at < len(starts), np.maximum(starts[np.minimum(at, len(starts) - 1)] if len(starts) else lo, lo), lo)
    firsts: list[int] = first.tolist()
    return firsts


def _trace_view(data: RunData, path: str, overlap: Overlap) -> dict[str, int]:
    """Our timeline's tracks plus Overlap Analysis, host ops as ``cpu_op`` within the same ``timeline_limit``."""
    base = time_base(data, overlap.stages)
    fixed, overlap_bytes = overlap_events(overlap, base)
    steps, _ = step_events(data, overlap.stages, base)
    events = OpEvents(data, OPS_PID, DEVICE_PID, base, category="cpu_op") if data.op_count else None
    head = orjson.dumps(fixed_events(data, base) + fixed)[:-1] + steps + overlap_bytes
    limit_mb = data.options.timeline_limit
    _, kept, size = write_trace(path, head, b"]", events, data.ops["dur"] if events else None, limit_mb)
    return {"ops": kept, "bytes": size}


def op_statistic(data: RunData) -> list[list[Any]]:
    """Host op types in the profiled steps: count and self time (µs), as the rank's op tables count them."""
    if not data.op_count:
        return []
    type_ids, _, durs = device_tables(data, counted_op_mask(data), "cpu")
    if not len(durs):
        return []
    order = np.argsort(type_ids.astype(np.uint16) if len(data.op_types) <= 1 << 16 else type_ids, kind="stable")  # 16 bits: a radix sort
    codes, durs = type_ids[order], durs[order]
    firsts = np.flatnonzero(np.append(True, codes[1:] != codes[:-1]))
    counts = np.diff(np.append(firsts, len(codes)))
    totals, lows, highs = np.add.reduceat(durs, firsts), np.minimum.reduceat(durs, firsts), np.maximum.reduceat(durs, firsts)
    grand = float(durs.sum()) or 1.0
    rows = [["host", data.op_types[codes[f]], "HOST_CPU", int(c), round(t / 1e3, 3), round(lo / 1e3, 3), round(t / c / 1e3, 3), round(hi / 1e3, 3),
             round(100 * t / grand, 4)] for f, c, t, lo, hi in zip(firsts.tolist(), counts.tolist(), totals.tolist(), lows.tolist(), highs.tolist())]
    return sorted(rows, key=lambda r: -r[4])
