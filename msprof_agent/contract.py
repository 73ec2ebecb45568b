"""The output contract: every analysed file's name, columns and units, and the readers of those files.

The analysis writes through the names and headers here; ``compare`` and the viewer read through the
readers here, so a file's layout is spelled once. The layouts are MindInsight's (see
``docs/ARCHITECTURE.md``); ``summary_{rank}.json`` and ``report_{rank}.html`` are ours. Per-rank
names are templates with a ``{rank}`` field (``name(SUMMARY, 0)`` is ``summary_0.json``).

Readers take the file's bytes and return plain dicts and lists (the viewer's section data); a
malformed file raises ``ValueError`` (or the JSON / CSV parser's own error) for the caller to show.
The rules that read these files (the pipeline bottleneck, the slowest rank, where profiler
directories are) live here too, so the summary and the viewer cannot name different answers.
"""
from __future__ import annotations

import csv
import datetime
import glob
import io
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson

# -- names ---------------------------------------------------------------------------------------

PROFILER_INFO = "profiler_info_{rank}.json"
SUMMARY = "summary_{rank}.json"
REPORT = "report_{rank}.html"
STEP_TRACE = "step_trace_raw_{rank}_detail_time.csv"
STEP_POINTS = "step_trace_point_info_{rank}.json"
CPU_OP_TYPES = "cpu_op_type_info_{rank}.csv"
CPU_OP_DETAIL = "cpu_op_detail_info_{rank}.csv"
CPU_OP_SHAPES = "cpu_op_shape_info_{rank}.csv"  # ours: host ops by op and input shape, self and total time
GPU_OP_TYPES = "gpu_op_type_info_{rank}.csv"
GPU_OP_DETAIL = "gpu_op_detail_info_{rank}.csv"
FLOPS = "flops_{rank}.txt"
FLOPS_SUMMARY = "flops_summary_{rank}.json"
ITERATOR_QUEUE = "dataset_iterator_profiling_{rank}.txt"  # non-sink runs
DEVICE_QUEUE = "device_queue_profiling_{rank}.txt"  # sink runs
PIPELINE_RAW = "minddata_pipeline_raw_{rank}.csv"
PIPELINE_PROFILING = "pipeline_profiling_{rank}.json"
CPU_UTILIZATION = "minddata_cpu_utilization_{rank}.json"
MEMORY_SUMMARY = "memory_usage_summary_{rank}.json"
MEMORY_DETAILS = "memory_usage_details_{rank}.json"
DYNAMIC_SHAPE = "dynamic_shape_info_{rank}.json"
HCCL = "hccl_raw_{rank}.csv"
TIMELINE_DISPLAY = "{device}_timeline_display_{rank}.json"
TIMELINE_SUMMARY = "{device}_timeline_summary_{rank}.json"
TIMELINE_DEVICES = ("cpu", "ascend", "gpu")  # the {device} of the timeline names, in the order readers look
PYTHON_HOT_SPOTS = "python_hot_spots_{rank}.csv"  # with_stack / profile_framework: sampled Python time per function
# MindInsight 2.3.1's dashboard of a host-only run asks for the gpu summary (its API knows only gpu and ascend):
# a cpu run's timeline summary is written under this {device} too.
MINDINSIGHT_HOST_TIMELINE = "gpu"
# The exports beside profiler/ (export_type): the Ascend layout's folder, {framework} "pt" or "ms", and HTA's.
ASCEND_EXPORT_DIR = "{host}_{pid}_{started_ms}_ascend_{framework}"
HTA_EXPORT_DIR = "hta_trace"
ASCEND_EXPORT_DIR_RE = re.compile(r"^.+_\d+_\d+_ascend_(pt|ms)$")
CLUSTER_SUMMARY = "cluster_summary.json"
CLUSTER_ANALYSE = "cpu_cluster_analyse_model-data_parallel_1_{ranks}_0.csv"

def name(template: str, rank: int | str, **fields: Any) -> str:
    """The file name of ``template`` for one rank (``fields``: the template's other fields, e.g. ``device``)."""
    return template.format(rank=rank, **fields)


def timeline_device(device_target: str) -> str:
    """The ``{device}`` of the timeline names for a framework's device target."""
    return {"Ascend": "ascend", "GPU": "gpu"}.get(device_target, "cpu")


def timeline_file(profiler_dir: str, rank: int | str) -> str | None:
    """Name of the rank's Trace Event file (cpu/ascend/gpu variant), or None."""
    for device in TIMELINE_DEVICES:
        candidate = name(TIMELINE_DISPLAY, rank, device=device)
        if os.path.isfile(os.path.join(profiler_dir, candidate)):
            return candidate
    return None


def profiler_dirs(path: str, holds: Callable[[str], Any]) -> list[str]:
    """The profiler directories under PATH: PATH itself, PATH/profiler or PATH/rank_*/profiler (multi-card),
    those for which ``holds(directory)`` is true (raw data for the analysis, a summary for compare)."""
    path = os.path.abspath(path)
    candidates = [path, os.path.join(path, "profiler")] + sorted(glob.glob(os.path.join(path, "rank_*", "profiler")))
    return [c for c in candidates if holds(c)]


def rank_pattern(template: str) -> re.Pattern[str]:
    """A regular expression matching the template's file names, the rank as its group 1."""
    return re.compile("^" + re.escape(template).replace(re.escape("{rank}"), r"(\d+)") + "$")


_SUMMARY_RE = rank_pattern(SUMMARY)


def summary_ranks(profiler_dir: str) -> list[int]:
    """Ranks with a ``summary_{rank}.json`` in the directory, in rank order."""
    found = (_SUMMARY_RE.match(entry) for entry in os.listdir(profiler_dir)) if os.path.isdir(profiler_dir) else ()
    return sorted(int(m.group(1)) for m in found if m)


# -- timeline time base ---------------------------------------------------------------------------

TIME_BASE = "time_base"  # the ``M`` event whose args give the epoch instant a timeline's ``ts`` count from
_DAY_NS = 86_400_000_000_000


def day_base(first_ns: int) -> int:
    """The start of the UTC day holding ``first_ns`` (epoch ns): the base every trace of a job counts
    ``ts`` from. Its ranks start seconds apart, so they share it (an hour's start would split a job
    that began across one; ``msprof-agent analyse`` of several ranks also gives each the job's
    earliest start). Timestamps counted from it stay under about 1e11 us for runs of days, where a
    double holds them to well under a nanosecond (epoch microseconds, about 1.8e15, only to 0.25 us,
    so slices that touch would overlap once parsed)."""
    return int(first_ns) // _DAY_NS * _DAY_NS


def time_base_event(base_ns: int, pid: int) -> dict[str, Any]:
    """The metadata event recording a timeline's base (viewers ignore metadata names they do not know)."""
    utc = datetime.datetime.fromtimestamp(base_ns // 1_000_000_000, datetime.UTC)
    return {"ph": "M", "name": TIME_BASE, "pid": pid, "tid": 0,
            "args": {"epoch_ns": base_ns, "utc": utc.strftime("%Y-%m-%dT%H:%M:%SZ"), "ts_unit": "us since epoch_ns"}}


def timeline_base(events: Sequence[Any]) -> int:
    """The epoch ns a parsed timeline's ``ts`` count from (0: a file without a base, in epoch us)."""
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "M" and event.get("name") == TIME_BASE:
            return int((event.get("args") or {}).get("epoch_ns", 0))
    return 0


def rebase(events: Sequence[Any], from_ns: int, to_ns: int) -> list[Any]:
    """Events counted from ``from_ns`` re-counted from ``to_ns`` (whole hours apart, so exactly), their
    base event dropped: the caller writes one for the merged file."""
    shift = (from_ns - to_ns) / 1000.0
    out = []
    for event in events:
        if not isinstance(event, dict) or (event.get("ph") == "M" and event.get("name") == TIME_BASE):
            continue
        if shift and isinstance(event.get("ts"), (int, float)):
            event = dict(event, ts=round(event["ts"] + shift, 3))
        out.append(event)
    return out


# -- columns and units ---------------------------------------------------------------------------

STEP_TRACE_UNIT_NS = 10  # step trace times are in units of 10 ns
STEP_TRACE_UNITS_PER_MS = 1_000_000 // STEP_TRACE_UNIT_NS
STEP_TRACE_HEADER = ["step_num", "start_point", "end_point", "total", "fp_point", "bp_point", "iteration_interval", "fp_and_bp", "tail"]
STAGES = ("iteration_interval", "fp_and_bp", "tail")
AVERAGE_ROW = "-"  # step_num of the last row of the step trace and hccl files
CPU_OP_TYPE_HEADER = ["op_type", "type_occurrences", "execution_frequency(per-step)", "total_compute_time(ms)", "avg_time(ms)", "percent"]
CPU_OP_DETAIL_HEADER = ["op_side", "op_type", "op_name", "full_op_name", "op_occurrences", "op_total_time(ms)", "op_avg_time(ms)",
                        "total_proportion", "subgraph", "pid"]
CPU_OP_SHAPE_HEADER = ["op_type", "op_name", "input_shape", "op_occurrences", "self_time(ms)", "total_time(ms)"]
GPU_OP_TYPE_HEADER = ["op_type", "type_occurrences", "total_time(us)", "proportion", "avg_time(us)"]
GPU_OP_DETAIL_HEADER = ["op_side", "op_type", "op_name", "op_full_name", "op_occurrences", "op_total_time(us)", "op_avg_time(us)",
                        "proportion", "cuda_activity_cost_time(us)", "cuda_activity_call_count"]
PIPELINE_HEADER = ["op_id", "op_type", "num_workers", "output_queue_size", "output_queue_average_size",
                   "output_queue_length", "output_queue_usage_rate", "sample_interval", "parent_id", "children_id"]
HCCL_HEADER = ["step_num", "communication_cost", "wait_cost", "link_info", "communication_operator_cost"]
NOT_MEASURED = ""  # a contract column the agent cannot fill (hccl wait_cost): empty, read back as None
CLUSTER_HEADER = ["rank_id", "step_time(ms)", "iteration_interval(ms)", "fp_and_bp(ms)", "tail(ms)", "communication(ms)"]
PYTHON_HOT_SPOTS_HEADER = ["first_step", "last_step", "function", "self_ms", "total_ms", "self_ms_per_step"]
QUEUE_FETCH, QUEUE_SIZE = "0", "1"  # first field of a queue profiling line: a fetch's cost, or the queue's size
FETCH_GET, FETCH_TOTAL = 0, 2  # second field of a fetch line: the get alone, or the whole step


def step_trace_table(rows: Sequence[Mapping[str, int]]) -> list[list[int]]:
    """The step trace's per-step rows in 10 ns units from ns ``start``/``end``/``fp``/``bp``: the points
    are converted first, then differenced, so the stages add up to the total exactly."""
    unit = STEP_TRACE_UNIT_NS
    table = []
    for r in rows:
        start, end, fp, bp = r["start"] // unit, r["end"] // unit, r["fp"] // unit, r["bp"] // unit
        table.append([r["n"], start, end, end - start, fp, bp, fp - start, bp - fp, end - bp])
    return table


def per_step_ms(table: Sequence[Sequence[int]]) -> dict[str, list[float]]:
    """The summary's ``per_step_ms``: step numbers, and the total and stage times (ms) of the step trace rows."""
    columns = {"step": 0, "total": 3, "iteration_interval": 6, "fp_and_bp": 7, "tail": 8}
    return {key: [row[i] if key == "step" else row[i] / STEP_TRACE_UNITS_PER_MS for row in table] for key, i in columns.items()}


# -- readers -------------------------------------------------------------------------------------

def read_json(raw: bytes) -> Any:
    return orjson.loads(raw)


def read_summary(profiler_dir: str, rank: int | str) -> dict[str, Any]:
    with open(os.path.join(profiler_dir, name(SUMMARY, rank)), "rb") as handle:
        summary: dict[str, Any] = orjson.loads(handle.read())
    return summary


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


def queue_file(profiler_dir: str, rank: int | str) -> str | None:
    """The rank's queue profiling file (iterator or device queue), or None."""
    for template in (ITERATOR_QUEUE, DEVICE_QUEUE):
        candidate = name(template, rank)
        if os.path.isfile(os.path.join(profiler_dir, candidate)):
            return candidate
    return None


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


# The states a machine's busy time (100 - idle) is made of, as ``minddata_cpu_utilization``'s device_info names them
# (nice and steal where the sampler recorded them); the kernel's irq and softirq time is the small rest.
CPU_BUSY_STATES = {"user_utilization": "user", "sys_utilization": "sys", "nice_utilization": "nice", "io_utilization": "iowait",
                   "steal_utilization": "steal"}


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
    return {"machine_busy_mean": None if idle is None else round(100 - idle, 2),
            **{f"machine_{state}_mean": mean(machine.get(key)) for key, state in CPU_BUSY_STATES.items()},
            "process_user_mean": mean(process.get("user_utilization")), "process_sys_mean": mean(process.get("sys_utilization")),
            "samples": len(stamps)}


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


def op_type_totals(profiler_dir: str, rank: int | str) -> list[tuple[str, float]] | None:
    """Every host op type's total ms from ``cpu_op_type_info`` (None when the file is absent)."""
    path = os.path.join(profiler_dir, name(CPU_OP_TYPES, rank))
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        return [(row["op_type"], row["total_ms"] or 0.0) for row in read_op_types(handle.read())]


def warmup_step_numbers(summary: Mapping[str, Any]) -> set[int]:
    """The numbers of the steps the summary names as warm-up (left out of every steady figure)."""
    return {w["step"] for w in summary.get("warmup_steps") or ()}


def step_samples(profiler_dir: str, rank: int | str, summary: Mapping[str, Any]) -> dict[str, list[float]]:
    """Per-step total and stage times (ms) of one rank's steady steps (warm-up left out): the summary's
    ``per_step_ms``; for summaries written before it (released versions), the step trace file beside it."""
    per_step = summary.get("per_step_ms")
    if per_step is None:
        path = os.path.join(profiler_dir, name(STEP_TRACE, rank))
        with open(path, "rb") as handle:
            steps = read_step_trace(handle.read())["steps"]
        per_step = {key: [step[key] for step in steps] for key in ("step", "total") + STAGES}
    warm = warmup_step_numbers(summary)
    keep = [i for i, n in enumerate(per_step["step"]) if n not in warm]
    return {key: [per_step[key][i] for i in keep] for key in ("total",) + STAGES}


# -- rules over several ranks --------------------------------------------------------------------

SLOWEST_RANK_WHY = "largest step interval + forward/backward (its own work, before waiting for peers)"


def slowest_rank(stages: Mapping[Any, Mapping[str, Any]]) -> Any:
    """The rank with the most work of its own per step (interval + forward/backward, before the tail where it
    waits for its peers), or None unless two or more ranks have both. ``stages``: each rank's average stage
    times. Total step time cannot tell: synchronised ranks all wait for the slowest."""
    own = {rank: s["iteration_interval"] + s["fp_and_bp"] for rank, s in stages.items()
           if s.get("iteration_interval") is not None and s.get("fp_and_bp") is not None}
    return max(own, key=lambda rank: own[rank]) if len(own) > 1 else None


def summaries(profiler_dir: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(rank, summary) of every readable ``summary_{rank}.json`` in the directory, in rank order."""
    for rank in summary_ranks(profiler_dir):
        try:
            yield rank, read_summary(profiler_dir, rank)
        except (OSError, orjson.JSONDecodeError):
            continue
