"""Readers of the analysed files: each takes a file's bytes and returns plain dicts and lists (the
viewer's section data); a malformed file raises ``ValueError`` (or the JSON / CSV parser's own error)
for the caller to show. The rules read from those files (the pipeline bottleneck, the CPU means) are
here too, so the summary and the viewer cannot name different answers.
"""
from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from .columns import (
    AVERAGE_ROW,
    CPU_BUSY_STATES,
    DEVICE_IDLE_COLUMNS,
    DEVICE_STEP_HEADER,
    FETCH_GET,
    GPU_KERNEL_HEADER,
    QUEUE_FETCH,
    QUEUE_SIZE,
    STAGES,
    STEP_TRACE_UNIT_NS,
    STEP_TRACE_UNITS_PER_MS,
)
from .names import CPU_OP_TYPES, rank_file


def read_json(raw: bytes) -> Any:
    return orjson.loads(raw)


def _csv_rows(raw: bytes) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8"))))
    if not rows:
        raise ValueError("empty file")
    return rows[0], [r for r in rows[1:] if r]


def _num(text: Any) -> float | None:
    """A number from a CSV cell; empty or non-numeric cells (e.g. an absent fp point) become None."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value else None


def _int(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _need(row: Sequence[str], width: int, what: str) -> None:
    if len(row) < width:
        raise ValueError(f"{what}: row {row[:3]!r}... has {len(row)} columns, expected at least {width}")


def read_step_trace(raw: bytes) -> dict[str, Any]:
    """``{"steps": [...], "average": {...}}`` in ms: each step's points, total and stages, and its
    start/end/fp/bp as offsets (from the first step's start, or its own start for fp/bp)."""
    _, rows = _csv_rows(raw)
    steps: list[dict[str, Any]] = []
    average: dict[str, Any] | None = None
    raw_points = []
    for row in rows:
        _need(row, 9, "step trace")
        ms = [None if value is None else value / STEP_TRACE_UNITS_PER_MS for value in map(_num, row[1:9])]
        item: dict[str, Any] = dict(zip(("start", "end", "total", "fp", "bp") + STAGES, ms))
        if row[0].strip() == AVERAGE_ROW:
            average = item
        else:
            item["step"] = int(float(row[0]))
            steps.append(item)
            raw_points.append(row[1:6])
    # Offsets from exact integers: epoch times in 10 ns lose their last digits as float milliseconds.
    first = _int(raw_points[0][0]) if raw_points else None

    def offset(point: int | None, origin: int | None) -> float | None:
        return None if point is None or origin is None else (point - origin) / STEP_TRACE_UNITS_PER_MS

    for item, (start_text, end_text, _, fp_text, bp_text) in zip(steps, raw_points):
        start, end, fp, bp = _int(start_text), _int(end_text), _int(fp_text), _int(bp_text)
        item["start_offset"], item["end_offset"] = offset(start, first), offset(end, first)
        item["fp_offset"], item["bp_offset"] = offset(fp, start), offset(bp, start)
    if average is None and steps:
        raise ValueError("step trace: the average row (step_num '-') is missing; the file may be half-written")
    return {"steps": steps, "average": average}


def read_step_points(raw: bytes) -> list[dict[str, Any]]:
    """The step trace's steps as exact epoch nanoseconds (``start``, ``end``, ``fp``, ``bp``; fp and bp None where
    absent) and their step number: for instants compared across ranks, which ``read_step_trace``'s float
    milliseconds hold only to a fraction of a microsecond."""
    _, rows = _csv_rows(raw)
    steps = []
    for row in rows:
        _need(row, 9, "step trace")
        if row[0].strip() == AVERAGE_ROW:
            continue
        start, end, fp, bp = (None if (value := _int(text)) is None else value * STEP_TRACE_UNIT_NS for text in (row[1], row[2], row[4], row[5]))
        if start is not None and end is not None:
            steps.append({"step": int(float(row[0])), "start": start, "end": end, "fp": fp, "bp": bp})
    return steps


def read_op_types(raw: bytes) -> list[dict[str, Any]]:
    """``cpu_op_type_info``: one dict per op type, largest total time first."""
    _, rows = _csv_rows(raw)
    out: list[dict[str, Any]] = []
    for row in rows:
        _need(row, 6, "operator types")
        out.append({"op_type": row[0], "occurrences": _num(row[1]), "per_step": _num(row[2]),
                    "total_ms": _num(row[3]), "avg_ms": _num(row[4]), "percent": _num(row[5])})
    out.sort(key=lambda r: -(r["total_ms"] or 0))
    return out


def read_op_detail(raw: bytes) -> list[dict[str, Any]]:
    """``cpu_op_detail_info``: one dict per op, largest total time first."""
    _, rows = _csv_rows(raw)
    out: list[dict[str, Any]] = []
    for row in rows:
        _need(row, 8, "operator detail")
        out.append({"op_side": row[0], "op_type": row[1], "op_name": row[2], "full_op_name": row[3],
                    "occurrences": _num(row[4]), "total_ms": _num(row[5]), "avg_ms": _num(row[6]),
                    "proportion": _num(row[7]), "subgraph": row[8] if len(row) > 8 else "",
                    "pid": row[9] if len(row) > 9 else ""})
    out.sort(key=lambda r: -(r["total_ms"] or 0))
    return out


def read_op_shapes(raw: bytes) -> list[dict[str, Any]]:
    """``cpu_op_shape_info``: one dict per (op, input shape), largest self time first. Self time leaves out
    the ops nested inside (torch records nested ops); total time keeps them."""
    _, rows = _csv_rows(raw)
    out: list[dict[str, Any]] = []
    for row in rows:
        _need(row, 6, "operator shapes")
        out.append({"op_type": row[0], "op_name": row[1], "input_shape": row[2], "occurrences": _num(row[3]),
                    "self_ms": _num(row[4]), "total_ms": _num(row[5])})
    out.sort(key=lambda r: -(r["self_ms"] or 0))
    return out


def read_gpu_op_types(raw: bytes) -> list[dict[str, Any]]:
    """``gpu_op_type_info``: one dict per kernel type (the device activities by name, every profiled step), largest
    total time first; times in ms as the CPU tables' (the file's are in µs)."""
    _, rows = _csv_rows(raw)
    out: list[dict[str, Any]] = []
    for row in rows:
        _need(row, 5, "GPU operator types")
        total_us, avg_us = _num(row[2]), _num(row[4])
        out.append({"op_type": row[0], "occurrences": _num(row[1]), "total_ms": None if total_us is None else total_us / 1e3,
                    "percent": _num(row[3]), "avg_ms": None if avg_us is None else avg_us / 1e3})
    out.sort(key=lambda r: -(r["total_ms"] or 0))
    return out


def read_gpu_kernels(raw: bytes) -> list[dict[str, Any]]:
    """``gpu_kernels``: one dict per (device activity name, launching op) over the steady steps, largest total time first."""
    _, rows = _csv_rows(raw)
    out: list[dict[str, Any]] = []
    for row in rows:
        _need(row, len(GPU_KERNEL_HEADER), "GPU kernels")
        out.append({"kernel": row[0], "kind": row[1], "launched_by": row[2], "count": _num(row[3]), "total_ms": _num(row[4]),
                    "avg_us": _num(row[5]), "share": _num(row[6])})
    out.sort(key=lambda r: -(r["total_ms"] or 0))
    return out


def read_device_steps(raw: bytes) -> list[dict[str, Any]]:
    """``device_steps``: one dict per steady step, in step order: its time, the device's busy and idle time (ms), the
    idle time by cause (``idle``: {cause: ms}, ``DEVICE_IDLE_COLUMNS``' causes) and its activities, launches and syncs."""
    header, rows = _csv_rows(raw)
    if header != DEVICE_STEP_HEADER:
        raise ValueError(f"device steps: the header is {header[:4]!r}..., not the contract's")
    at = {column: i for i, column in enumerate(DEVICE_STEP_HEADER)}
    out = []
    for row in rows:
        _need(row, len(DEVICE_STEP_HEADER), "device steps")
        out.append({"step": int(float(row[0])), "step_ms": _num(row[1]), "busy_ms": _num(row[2]), "idle_ms": _num(row[3]),
                    "idle": {cause: _num(row[at[column]]) for cause, column in DEVICE_IDLE_COLUMNS.items()},
                    "activities": _num(row[at["device_activities"]]), "launches": _num(row[at["launches"]]), "syncs": _num(row[at["syncs"]])})
    return out


def read_flops(raw: bytes) -> dict[str, list[float | None]]:
    """``flops_{rank}.txt``: a header line, then ``name, MFLOPs(cube), GFLOPS(cube), MFLOPs(vec), GFLOPS(vec)``."""
    _, rows = _csv_rows(raw)
    out = {}
    for row in rows:
        _need(row, 5, "flops")
        out[row[0].strip()] = [_num(v) for v in row[1:5]]
    return out


def read_queue(raw: bytes) -> dict[str, Any]:
    """Iterator / device-queue profiling lines: ``0 kind step cost_ms ts`` (fetch) and ``1 cap step size ts`` (queue)."""
    fetch, queue = [], []
    for number, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 5:
            raise ValueError(f"line {number}: expected 5 fields, got {len(parts)}")
        kind, a, step, value, ts = parts[0], int(parts[1]), int(parts[2]), float(parts[3]), float(parts[4])
        if kind == QUEUE_FETCH:
            fetch.append({"kind": a, "step": step, "cost_ms": value, "ts": ts})
        elif kind == QUEUE_SIZE:
            queue.append({"capacity": a, "step": step, "size": value, "ts": ts})
        else:
            raise ValueError(f"line {number}: unknown record type {kind!r}")
    sizes = [q["size"] for q in queue]
    gets = fetch_waits(fetch)
    stats = {
        "queue_samples": len(sizes),
        "empty_count": sum(1 for s in sizes if s <= 0),
        "empty_ratio": (sum(1 for s in sizes if s <= 0) / len(sizes)) if sizes else None,
        "queue_size_mean": (sum(sizes) / len(sizes)) if sizes else None,
        "capacity": max((q["capacity"] for q in queue), default=None),
        "fetch_count": len(gets),
        "fetch_ms_mean": (sum(gets) / len(gets)) if gets else None,
        "fetch_ms_max": max(gets) if gets else None,
    }
    return {"fetch": fetch, "queue": queue, "stats": stats}


def fetch_waits(fetch: Sequence[Mapping[str, Any]]) -> list[float]:
    """The per-step wait for data (ms) among ``read_queue``'s fetch lines (the gets, not the step totals)."""
    return [f["cost_ms"] for f in fetch if f["kind"] == FETCH_GET]


def read_pipeline(raw: bytes) -> dict[str, Any]:
    """``minddata_pipeline_raw``: the dataset ops and the ops the bottleneck rule marks."""
    _, rows = _csv_rows(raw)
    ops = []
    for row in rows:
        _need(row, 10, "pipeline")
        sizes = json.loads(row[3]) if row[3].strip() else []
        children = json.loads(row[9]) if row[9].strip() else []
        parent = _num(row[8])
        ops.append({"op_id": int(float(row[0])), "op_type": row[1], "num_workers": _num(row[2]),
                    "queue_sizes": [s for s in sizes if isinstance(s, (int, float))],
                    "queue_average": _num(row[4]), "queue_length": _num(row[5]), "queue_usage": _num(row[6]),
                    "sample_interval": _num(row[7]), "parent_id": -1 if parent is None else int(parent),
                    "children": [int(c) for c in children]})
    return {"ops": ops, "bottlenecks": pipeline_bottlenecks(ops)}


QUEUE_HIGH, QUEUE_LOW = 0.8, 0.6  # MindInsight's queue usage thresholds


def pipeline_bottlenecks(ops: Sequence[Mapping[str, Any]], high: float = QUEUE_HIGH, low: float = QUEUE_LOW) -> list[dict[str, Any]]:
    """The MindSpore Profiler guide's reading of queue usage (``ops``: ``op_id``, ``parent_id``, ``children``,
    ``queue_usage`` of the op's output queue), in op order: an op whose input queues are high (> ``high``)
    while its output queue is low (< ``low``) may be the bottleneck; so may the last (root) op when its
    input queues are all high, and the source op when every queue is low."""
    by_id = {op["op_id"]: op for op in ops}
    known = [op["queue_usage"] for op in ops if op["queue_usage"] is not None]
    all_low = bool(known) and max(known) < low
    marked = []
    for op in ops:
        inputs = [by_id[c]["queue_usage"] for c in op["children"] if c in by_id and by_id[c]["queue_usage"] is not None]
        out = op["queue_usage"]
        is_root = op["parent_id"] not in by_id
        if not op["children"] and all_low:
            marked.append({"op_id": op["op_id"], "why": f"source op; every queue's usage < {low:.0%}"})
        elif inputs and min(inputs) > high and (is_root or (out is not None and out < low)):
            where = "last op" if is_root else f"output queue usage {out:.0%} < {low:.0%}"
            marked.append({"op_id": op["op_id"], "why": f"input queue usage {min(inputs):.0%} > {high:.0%}; {where}"})
    return marked


def read_cpu_utilization(raw: bytes) -> dict[str, Any]:
    data = orjson.loads(raw)
    if not isinstance(data, dict) or "time_stamp" not in data:
        raise ValueError("no time_stamp list")
    return data


def cpu_means(utilization: Mapping[str, Any]) -> dict[str, Any]:
    """The mean CPU utilization (%) of a ``minddata_cpu_utilization`` dict, the one definition the summary,
    report and viewer show: each sample weighted by the time since the one before (the first by the
    next gap), so a sample covering no time counts for nothing and uneven sampling is not biased."""
    stamps = list(utilization.get("time_stamp") or [])
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    weights = ([gaps[0]] + gaps) if gaps else [1.0] * len(stamps)
    total = sum(w for w in weights if w > 0)

    def mean(values: Sequence[Any] | None) -> float | None:
        pairs = [(w, v) for w, v in zip(weights, values or ()) if w > 0 and isinstance(v, (int, float))]
        return round(sum(w * v for w, v in pairs) / total, 2) if pairs and total else None

    machine, process = utilization.get("device_info") or {}, utilization.get("process_info") or {}
    idle = mean(machine.get("idle_utilization"))
    states = {f"machine_{state}_mean": mean(machine.get(key)) for key, state in CPU_BUSY_STATES.items()}
    busy = None if idle is None else round(100 - idle, 2)
    # the kernel's irq and softirq time, which the sampler does not record: what busy holds beyond the states
    rest = None if busy is None else round(max(0.0, busy - sum(v for v in states.values() if v is not None)), 2)
    return {"machine_busy_mean": busy, **states, "machine_irq_mean": rest,
            "process_user_mean": mean(process.get("user_utilization")), "process_sys_mean": mean(process.get("sys_utilization")),
            "agent_mean": mean((utilization.get("agent_info") or {}).get("utilization")), "samples": len(stamps)}


def read_hccl(raw: bytes) -> dict[str, Any]:
    """``hccl_raw``: per-step communication time and wait (ms; None where not measured) and the average row."""
    _, rows = _csv_rows(raw)
    steps: list[dict[str, Any]] = []
    average = None
    for row in rows:
        _need(row, 3, "hccl")
        item: dict[str, Any] = {"communication_ms": _num(row[1]), "wait_ms": _num(row[2])}
        if row[0].strip() == AVERAGE_ROW:
            average = item
        else:
            item["step"] = int(float(row[0]))
            steps.append(item)
    return {"steps": steps, "average": average}


def memory_lines(details: Any) -> list[dict[str, Any]]:
    """The per-graph memory curves (MB) of ``memory_usage_details``: a dict keyed by graph, a list, or one graph.
    With ``time_stamp_ns`` / ``time_stamp`` (ms) beside ``lines`` the curve is over time, else over execution order."""
    if isinstance(details, dict) and "lines" in details:
        graphs = [details]
    elif isinstance(details, dict):
        graphs = [g for g in details.values() if isinstance(g, dict)]
    elif isinstance(details, list):
        graphs = [g for g in details if isinstance(g, dict)]
    else:
        raise ValueError("unexpected memory details layout")
    out = []
    for index, graph in enumerate(graphs):
        lines = [v for v in graph.get("lines") or [] if isinstance(v, (int, float))]
        x = None
        for key, per_second in (("time_stamp_ns", 1e9), ("time_stamp", 1e3)):  # seconds from the first sample
            stamps = graph.get(key)
            if isinstance(stamps, list) and len(stamps) == len(lines) and lines:
                x = [(t - stamps[0]) / per_second for t in stamps]
                break
        out.append({"graph_id": graph.get("graph_id", index), "lines": lines, "x": x,
                    "peak": max(lines) if lines else None, "static_mem": graph.get("static_mem")})
    return out


def read_memory_details(raw: bytes) -> list[dict[str, Any]]:
    return memory_lines(orjson.loads(raw))


def op_type_totals(profiler_dir: str, rank: int | str) -> list[tuple[str, float, float]] | None:
    """Every host op type's total ms and calls from ``cpu_op_type_info`` (None when the file is absent)."""
    path = os.path.join(profiler_dir, rank_file(CPU_OP_TYPES, rank))
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        return [(row["op_type"], row["total_ms"] or 0.0, row["occurrences"] or 0.0) for row in read_op_types(handle.read())]
