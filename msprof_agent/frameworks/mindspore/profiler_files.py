"""Readers for the files MindSpore's own CPU profiler and dataset profiler write, turned into raw records.

Formats (MindSpore 2.10, see docs/../shared notes):
- ``cpu_op_execute_timestamp_{r}.txt``: ``full_op_name;HostCpuOps;start_ns,dur_ms,tid start_ns,dur_ms,tid ...``
  with epoch nanoseconds (the ``time.time_ns`` clock).
- ``cpu_framework_{r}.txt``: one line per executed op, in execution order:
  ``op_type;short_op_name;graph_id;input_1:[32, 1, 32, 32];input_2:NoShape;``. It names ops only by
  their short name (``Conv2D-op0`` is both convolutions of LeNet), so shapes are matched to executions
  per short name, in start order.
- ``cpu_ms_memory_record_{r}.txt``: ``Timestamp(ns),Total Allocated(Byte),Total Reserved(Byte),Total Active(Byte)``.
- dataset profiler: ``dataset_iterator_profiling_{r}.txt`` / ``device_queue_profiling_{r}.txt`` lines
  ``1 <capacity> <step> <size> <ts_ms>`` (steady clock, milliseconds) and ``pipeline_profiling_{r}.json``.
"""
from __future__ import annotations

import glob
import json
import os
import re
import time

from ...records import KIND, MEM, OPS, PIPELINE, QUEUE
from ...store import coded

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, Literal

    from ...records import Mem, Pipeline, PipelineOp, Queue

    OpColumns = dict[str, list[Any]]  # parallel columns, one entry per execution: name, type, start, dur, tid (and shape)

OPS_PER_RECORD = 50_000
_SHAPE = re.compile(r"input_\d+:(\[[^\]]*\]|NoShape)")


def op_type_of(full_name: str) -> str:
    """``.../Grad_MatMul/MatMul-op1`` -> ``MatMul``, as MindSpore's own cpu_op_detail_info does."""
    return full_name.rsplit("/", 1)[-1].split("-", 1)[0]


def find(directory: str, pattern: str) -> str | None:
    """The first file matching ``pattern`` anywhere under ``directory`` (the public API nests its output)."""
    hits = sorted(glob.glob(os.path.join(directory, "**", pattern), recursive=True))
    return hits[0] if hits else None


def read_op_executions(path: str) -> OpColumns:
    """All executions as parallel lists (name, type, start ns, dur ns, tid), sorted by start."""
    rows = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            parts = line.rstrip("\n").split(";", 2)
            if len(parts) < 3:
                continue
            name, _kind, times = parts
            op_type = op_type_of(name)
            for item in times.split():
                fields = item.split(",")
                if len(fields) < 3:
                    continue
                rows.append((int(fields[0]), name, op_type, round(float(fields[1]) * 1e6), fields[2]))
    rows.sort()
    return {
        "name": [r[1] for r in rows], "type": [r[2] for r in rows], "start": [r[0] for r in rows],
        "dur": [r[3] for r in rows], "tid": [_tid(r[4]) for r in rows],
    }


def _tid(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def read_shapes(path: str) -> dict[str, list[str]]:
    """Per short op name, the input shapes of its executions in order, as JSON lists of lists."""
    shapes: dict[str, list[str]] = {}
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            parts = line.rstrip("\n").split(";")
            if len(parts) < 3:
                continue
            dims: list[list[int]] = []
            for match in _SHAPE.finditer(line):
                text = match.group(1)
                dims.append([] if text == "NoShape" else [int(d) for d in text.strip("[]").split(",") if d.strip()])
            shapes.setdefault(parts[1], []).append(json.dumps(dims))
    return shapes


def attach_shapes(ops: OpColumns, shapes: dict[str, list[str]]) -> OpColumns:
    """Give each execution its shapes when the counts per short name agree; otherwise leave None."""
    column: list[str | None] = [None] * len(ops["name"])
    seen: dict[str, list[int]] = {}
    for index, name in enumerate(ops["name"]):
        short = name.rsplit("/", 1)[-1]
        seen.setdefault(short, []).append(index)
    for short, indices in seen.items():
        listed = shapes.get(short)
        if listed is not None and len(listed) == len(indices):
            for index, shape in zip(indices, listed):
                column[index] = shape
    if any(s is not None for s in column):
        ops["shape"] = column
    return ops


def op_batches(ops: OpColumns, source: str) -> Iterator[dict[str, Any]]:
    """Split the columns into ``ops`` records (``records.Ops``) of at most OPS_PER_RECORD rows."""
    total = len(ops["start"])
    for lo in range(0, total, OPS_PER_RECORD):
        batch: dict[str, Any] = {key: values[lo:lo + OPS_PER_RECORD] for key, values in ops.items()}
        for column in ("name", "type"):
            batch[column + "_codes"], batch[column + "_table"] = coded(batch.pop(column))
        batch.update({KIND: OPS, "source": source, "device": "cpu"})
        yield batch


def memory_records(path: str) -> list[Mem]:
    records: list[Mem] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.strip().split(",")
            if len(fields) < 4 or not fields[0].isdigit():
                continue
            records.append({KIND: MEM, "ts": int(fields[0]), "allocated": int(fields[1]),
                            "reserved": int(fields[2]), "active": int(fields[3]), "device": "cpu"})
    return records


def steady_ms_to_epoch_ns() -> int:
    """Offset from the dataset profiler's steady-clock milliseconds to epoch nanoseconds."""
    return time.time_ns() - time.monotonic_ns()


def queue_records(path: str, kind: Literal["iterator", "device_queue"]) -> list[Queue]:
    """``1 <capacity> <step> <size> <ts_ms>`` lines (queue samples; ``0 ...`` lines are timings)."""
    offset = steady_ms_to_epoch_ns()
    records: list[Queue] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) != 5 or fields[0] != "1":
                continue
            capacity, step, size, ts_ms = (int(f) for f in fields[1:])
            records.append({KIND: QUEUE, "ts": ts_ms * 1_000_000 + offset, "step": step, "size": size,
                            "capacity": capacity, "kind": kind})
    return records


def pipeline_records(path: str, cpu_path: str | None = None) -> list[Pipeline]:
    """One ``pipeline`` record per sample: each dataset op with its workers and output-queue size then.

    Sample times and per-op CPU come from ``minddata_cpu_utilization_{r}.json`` (same sampler, steady
    clock ms) when it is there; otherwise samples are spaced by the sampling interval back from now.
    """
    with open(path, encoding="utf-8") as handle:
        info = json.load(handle)
    cpu: dict[str, Any] = {}  # JSON
    if cpu_path is not None:
        with open(cpu_path, encoding="utf-8") as handle:
            cpu = json.load(handle)
    op_cpu = {op.get("op_id"): op.get("metrics") or {} for op in cpu.get("op_info", [])}
    parents = {child: op.get("op_id") for op in info.get("op_info", []) for child in op.get("children", []) or []}
    ops = info.get("op_info", [])
    samples = max([len(((op.get("metrics") or {}).get("output_queue") or {}).get("size", [])) for op in ops] or [0])
    interval_ns = int(info.get("sampling_interval", 1000)) * 1_000_000
    offset = steady_ms_to_epoch_ns()
    stamps = cpu.get("time_stamp") or []
    now = time.time_ns()
    records: list[Pipeline] = []
    for i in range(samples):
        ts = stamps[i] * 1_000_000 + offset if len(stamps) == samples else now - (samples - 1 - i) * interval_ns
        entries: list[PipelineOp] = []
        for op in ops:
            queue = (op.get("metrics") or {}).get("output_queue") or {}
            sizes = queue.get("size", [])
            metrics = op_cpu.get(op.get("op_id"), {})
            entries.append({
                "op_id": op.get("op_id"), "op_type": op.get("op_type"), "num_workers": op.get("num_workers"),
                "queue_size": sizes[i] if i < len(sizes) else None, "queue_capacity": queue.get("length"),
                "parent_id": parents.get(op.get("op_id"), -1), "children_id": op.get("children", []) or [],
                "cpu_user": _at(metrics.get("user_utilization"), i), "cpu_sys": _at(metrics.get("sys_utilization"), i),
            })
        records.append({KIND: PIPELINE, "ts": ts, "ops": entries})
    return records


def _at(values: list[float] | None, index: int) -> float | None:
    return values[index] if values and index < len(values) else None
