"""Data preparation: the wait for data per step, queue depths, and the dataset pipeline's ops.

Non-sink runs write ``dataset_iterator_profiling_{r}.txt``, sink runs ``device_queue_profiling_{r}.txt``
(lines ``0 <0 get|2 total> <step> <cost_ms> <ts_ms>`` and ``1 <capacity> <step> <size> <ts_ms>``); a run
that sampled no queue sizes writes its fetch lines to ``data_wait_profiling_{r}.txt`` instead, so that
MindInsight finds no queue data rather than zero batches.
With ``data_process``, pipeline samples become ``minddata_pipeline_raw_{r}.csv`` and
``pipeline_profiling_{r}.json`` (a MindSpore run without them gets one with no ops: MindInsight's CPU
page needs it), and the bottleneck op is named by the MindSpore Profiler guide's
queue-usage rules (``contract.readers.pipeline_bottlenecks``, the viewer's too).
The loading's CPU share (``loading_cpu_share``: its CPU time over its wall time) tells loading that computes
from loading that waits (a disk, the network): the advisor sizes the workers by it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ..contract import readers
from ..contract.columns import PIPELINE_HEADER
from ..contract.frameworks import profile_of
from ..contract.names import DATA_WAITS, DEVICE_QUEUE, ITERATOR_QUEUE, PIPELINE_PROFILING, PIPELINE_RAW, QUEUE_FILES, rank_file
from ..contract.pages import File, Page
from ..contract.readers import pipeline_bottlenecks
from ..writers import write_csv, write_json, write_text

if TYPE_CHECKING:
    from .run import Context
    from .rundata import RunData


def write(data: RunData, ctx: Context) -> dict[str, Any]:
    steps = data.window_steps
    sink = bool(data.meta.get("sink_mode"))
    lines = []
    for step in steps:
        ts = step["end"] // 1_000_000
        lines.append(f"0 0 {step['n']} {step.get('wait', 0) / 1e6:.4f} {ts}")
        lines.append(f"0 2 {step['n']} {(step['end'] - step['start']) / 1e6:.4f} {ts}")
    queue = [q for q in data.queue if q.get("kind", "iterator") == ("device_queue" if sink else "iterator")] or data.queue
    for q in queue:
        lines.append(f"1 {q.get('capacity', 0)} {q.get('step', 0)} {q.get('size', 0)} {q['ts'] // 1_000_000}")
    template = (DEVICE_QUEUE if sink else ITERATOR_QUEUE) if queue else DATA_WAITS
    name = rank_file(template, ctx.rank)
    if steps:
        write_text(ctx.path(template), lines)
    waits = sorted(s.get("wait", 0) / 1e6 for s in steps)
    result: dict[str, Any] = {"file": name if steps else None, "sink": sink,
              "empty_queue_ratio": (sum(1 for q in queue if q.get("size", 1) == 0) / len(queue)) if queue else None,
              "queue_samples": len(queue), "wait_ms": waits, "loading_cpu_share": loading_cpu_share(data)}
    result["pipeline"] = _write_pipeline(data, ctx)
    return result


def loading_cpu_share(data: RunData) -> float | None:
    """CPU time over wall time of the loading after the first step: without workers, the fetches' own (the
    fetching thread loads, ``wait_cpu``); with worker processes, the job's descendants' CPU over the workers'
    time. Near 1: each worker keeps a core busy; near 0: the loading waits. None where unmeasured."""
    steps = data.window_steps[1:]
    if not steps:
        return None
    if any("wait_cpu" in step for step in steps):
        wall = sum(step.get("wait", 0) for step in steps)
        return round(sum(step.get("wait_cpu", 0) for step in steps) / wall, 4) if wall else None
    profile = profile_of(data.meta.get("framework"))
    workers = int((data.meta.get("data_settings") or {}).get(profile.workers_setting) or 0) if profile else 0
    begin, end = steps[0]["start"], steps[-1]["end"]
    samples = [c for c in data.cpu if "pchildren" in c and c["ts"] - c["span"] >= begin and c["ts"] <= end]
    span = sum(c["span"] for c in samples)
    if not (profile and profile.workers_are_children and workers and span):
        return None
    cores = sum(c["pchildren"] / 100 * c["span"] for c in samples) * int(data.meta.get("cpus") or 1)  # ns of CPU
    return round(cores / (workers * span), 4)


def _queue_usage(op: Mapping[str, Any]) -> tuple[float, float]:
    capacity = op.get("queue_capacity") or 0
    sizes = op.get("sizes") or []
    average = sum(sizes) / len(sizes) if sizes else 0.0
    return average, (average / capacity if capacity else 0.0)


def bottleneck(ops: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first op the guide's rule marks, judged on the usage the pipeline file holds (4 decimals),
    as the viewer judges it."""
    marked = pipeline_bottlenecks([{"op_id": op["op_id"], "parent_id": op.get("parent_id", -1), "children": op.get("children_id") or [],
                                             "queue_usage": round(_queue_usage(op)[1], 4)} for op in ops])
    return next(op for op in ops if op["op_id"] == marked[0]["op_id"]) if marked else None


def _write_pipeline(data: RunData, ctx: Context) -> dict[str, Any] | None:
    if not data.pipeline:
        profile = profile_of(data.meta.get("framework"))
        if profile is not None and profile.empty_pipeline_file:
            write_json(ctx.path(PIPELINE_PROFILING), {"sampling_interval": ctx.sampling_interval_ms, "op_info": []}, ctx.pretty)
        return None
    ops: dict[int, dict[str, Any]] = {}  # op_id -> the op, with its samples' queue sizes and CPU shares
    for sample in data.pipeline:
        for sampled in sample.get("ops", []):
            entry = ops.setdefault(sampled["op_id"], dict(sampled, sizes=[], cpu_user=[], cpu_sys=[]))
            if sampled.get("queue_size") is not None:
                entry["sizes"].append(sampled["queue_size"])
            entry["cpu_user"].append(sampled.get("cpu_user", 0.0))
            entry["cpu_sys"].append(sampled.get("cpu_sys", 0.0))
    ordered = [ops[k] for k in sorted(ops)]
    interval = ctx.sampling_interval_ms
    rows = []
    for op in ordered:
        average, usage = _queue_usage(op)
        rows.append([op["op_id"], op["op_type"], op.get("num_workers", 1), orjson.dumps(op["sizes"]).decode(), round(average, 4),
                     op.get("queue_capacity", 0), round(usage, 4), interval, op.get("parent_id", -1),
                     orjson.dumps(op.get("children_id") or []).decode()])
    write_csv(ctx.path(PIPELINE_RAW), PIPELINE_HEADER, rows)
    write_json(ctx.path(PIPELINE_PROFILING), {
        "sampling_interval": interval,
        "op_info": [{"op_id": op["op_id"], "op_type": op["op_type"], "num_workers": op.get("num_workers", 1),
                     "metrics": {"output_queue": {"size": op["sizes"], "length": op.get("queue_capacity", 0)}},
                     "children": op.get("children_id") or []} for op in ordered],
    }, ctx.pretty)
    slow = bottleneck(ordered)
    return {"ops": [{"op_id": op["op_id"], "op_type": op["op_type"], "num_workers": op.get("num_workers", 1),
                     "queue_usage": round(_queue_usage(op)[1], 4)} for op in ordered],
            "bottleneck": slow and {"op_id": slow["op_id"], "op_type": slow["op_type"]}, "op_cpu": ordered}


PAGE = Page("data_prep", (File("queue", QUEUE_FILES, readers.read_queue), File("pipeline", (PIPELINE_RAW,), readers.read_pipeline, tuple(PIPELINE_HEADER)),
                          File("pipeline_profiling", (PIPELINE_PROFILING,))), write, {})
