"""A PyTorch-style trace per rank for HolisticTraceAnalysis: ``{dir}/{host}_{pid}.rank{r}.pt.trace.json``.

``{"schemaVersion": 1, "distributedInfo": {...}, "traceEvents": [...]}`` with host ops as ``cpu_op``,
one ``ProfilerStep#N`` (``user_annotation``) per profiled step on the main thread, and the collectives,
on the same time base as our timeline (``timeline.time_base``, its ``time_base`` metadata event). The directory
holds only these traces: HTA reads every JSON there.

A CUDA run's trace carries what kineto's own does (its ``ChromeTraceLogger``), so HTA's temporal, idle-time and
kernel breakdowns run on it: each device activity as ``kernel``, ``gpu_memcpy`` or ``gpu_memset`` on ``pid`` the
device index and ``tid`` its stream, the CUDA runtime and driver calls (``contract.cuda.is_runtime_call``) as
``cuda_runtime`` on the host thread, each activity and the call that launched it sharing a ``correlation`` (HTA keeps
only the kernels whose launch it finds), an ``ac2g`` flow from the call to the activity, and ``deviceProperties``.
The links are ``DeviceActivity.calls``: from the store's launch records, or, in stores without them, guessed by
pairing launches and activities in time order (``correlation_source`` in what ``write`` returns says which).
``External id`` is the runtime call's enclosing op's (its index + 1), but the ``cpu_op`` events, written from
templates, carry no per-op id. The host's annotations projected on the device are left out: no device work.
Within ``timeline_limit`` the device part goes first, its longest activities (each with its launch) first, and the
host ops fill what is left, the shortest dropped first as in the timeline.
"""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ..analysis import DEVICE_PID, OPS_PID, DeviceActivity, OpEvents, fixed_events, parents, time_base, write_trace
from ..contract.cuda import activity_kind, is_runtime_call
from ..contract.names import HTA_TRACE
from .base import hta_dir
from .layouts import layout_of

if TYPE_CHECKING:
    from ..analysis import Run
    from ..analysis.rundata import RunData

NAME = "hta"


def _main_thread(data: RunData) -> Any:
    """The thread the steps run on: the one with most ops (thread 1 when there are none)."""
    if not data.op_count:
        return 1
    tid_id = int(np.bincount(data.ops["tid_id"]).argmax())
    return data.ops.code_values["tid"][tid_id]


def target(run: Run) -> str | None:
    return hta_dir(run) if layout_of(run.data).hta_trace else None


def write(run: Run, directory: str) -> dict[str, Any]:
    data, stages = run.data, run.results["step_trace"]["rows"]
    meta = data.meta
    rank, world = data.rank, int(meta.get("rank_size") or 1)
    tid = _main_thread(data)
    base = time_base(data, stages)
    steps = [{"ph": "X", "name": f"ProfilerStep#{row['n']}", "cat": "user_annotation", "pid": OPS_PID, "tid": tid,
              "ts": round((row["start"] - base) / 1000.0, 3), "dur": round((row["end"] - row["start"]) / 1000.0, 3), "args": {"step": row["n"]}}
             for row in stages]
    distributed = json.dumps({"backend": "gloo" if world > 1 else "", "rank": rank, "world_size": world})  # '"rank": r' spaced: HTA finds it by regex
    events = OpEvents(data, OPS_PID, DEVICE_PID, base, category="cpu_op") if data.op_count else None
    cuda = bool(data.op_count) and bool(data.ops.on_device.any())
    properties = orjson.dumps(_device_properties(data)) if cuda else b"[]"
    head = (b'{"schemaVersion": 1, "distributedInfo": %s, "deviceProperties": %s, "displayTimeUnit": "ms",\n"traceEvents": %s'
            % (distributed.encode(), properties, orjson.dumps(fixed_events(data, base) + steps)[:-1]))  # the ops and "]}" follow
    limit_mb = data.options.timeline_limit
    device, host_ops, written = _device_part(data, base, limit_mb * 1_000_000 - len(head) - 2) if cuda else (b"", None, {})
    head += device
    name = HTA_TRACE.format(host=meta.get("host", "localhost"), pid=meta.get("pid", 0), rank=rank)
    _, kept, size = write_trace(os.path.join(directory, name), head, b"]}", events, data.ops["dur"] if events else None, limit_mb, host_ops)
    return {"file": name, "ops": kept, "steps": len(steps), "bytes": size, **written}


# CUPTI's ids run high; HTA 0.6 (under pandas 3) stores the column in the smallest integer type its values fit and
# then fails to write event indices into it, so ours start past int16's range as theirs do
FIRST_CORRELATION = 1 << 16
_CATEGORIES = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}  # kineto's, by ``activity_kind``


def _device_part(data: RunData, base: int, budget: int) -> tuple[bytes, np.ndarray, dict[str, Any]]:
    """The device activities, the runtime calls and the flows between them as kineto writes them (each event's text
    after a comma), the longest activities with their launches first while they fit in ``budget`` bytes, then the other
    runtime calls (syncs, event records); the host ops left to the ``cpu_op`` templates (neither device events nor
    runtime calls); what was written, for ``write``."""
    ops, names = data.ops, data.op_names
    activity = DeviceActivity(data)
    calls, source = activity.calls(data)
    device_index = int(data.meta.get("device_id") or 0)
    on_host = ~ops.on_device
    runtime = np.array([is_runtime_call(str(n)) for n in names], dtype=bool)[ops["name_id"]] & on_host
    runtime_ops = np.flatnonzero(runtime)
    # correlation ids: an activity's is its launching call's; every runtime call gets one, as in kineto
    correlation = np.zeros(len(ops["start"]), dtype=np.int64)
    correlation[runtime_ops] = np.arange(FIRST_CORRELATION, FIRST_CORRELATION + len(runtime_ops))
    parent = parents(ops)
    streams, tids = ops["stream"], ops.code_values["tid"][ops["tid_id"]]

    def runtime_call(i: int) -> bytes:
        return b"," + orjson.dumps({"ph": "X", "cat": "cuda_runtime", "name": str(names[ops["name_id"][i]]), "pid": OPS_PID, "tid": tids[i],
                                    "ts": _us(int(ops["start"][i]), base), "dur": _us(int(ops["dur"][i]), 0),
                                    "args": {"External id": int(parent[i]) + 1, "correlation": int(correlation[i])}})

    texts = [b"," + orjson.dumps({"ph": "M", "name": "process_name", "pid": device_index, "tid": 0, "args": {"name": f"GPU {device_index}"}})]
    used, written, linked, shown = len(texts[0]), 0, 0, set()
    for k in np.argsort(activity.starts - activity.ends, kind="stable").tolist():  # the longest first
        i, call = int(activity.index[k]), int(calls[k])
        name, stream = str(names[ops["name_id"][i]]), int(streams[i] if streams[i] is not None else 0)
        ts = _us(int(ops["start"][i]), base)
        args: dict[str, Any] = {"device": device_index, "stream": stream}
        text = b""
        if call >= 0:
            args.update({"correlation": int(correlation[call]), "External id": int(parent[call]) + 1})
            if call not in shown:  # a graph launch queues many activities: its call and arrow once
                flow = {"id": int(correlation[call]), "cat": "ac2g", "name": "ac2g"}
                text = runtime_call(call) + b"," + orjson.dumps(
                    [{"ph": "s", "pid": OPS_PID, "tid": tids[call], "ts": _us(int(ops["start"][call]), base), **flow},
                     {"ph": "f", "bp": "e", "pid": device_index, "tid": stream, "ts": ts, **flow}])[1:-1]
        text += b"," + orjson.dumps({"ph": "X", "cat": _CATEGORIES[activity_kind(name)], "name": name, "pid": device_index, "tid": stream,
                                     "ts": ts, "dur": _us(int(ops["dur"][i]), 0), "args": args})
        if used + len(text) > budget:
            break
        texts.append(text)
        used, written, linked = used + len(text), written + 1, linked + (call >= 0)
        shown.add(call)
    for i in runtime_ops[np.argsort(-ops["dur"][runtime_ops], kind="stable")].tolist():
        if i not in shown:
            text = runtime_call(i)
            if used + len(text) > budget:
                break
            texts.append(text)
            used += len(text)
    found = {"device_activities": written, "linked": linked, "correlation_source": source}
    if written < len(activity.index):
        found["device_activities_dropped"] = len(activity.index) - written  # timeline_limit: the shortest went
    return b"".join(texts), np.flatnonzero(on_host & ~runtime), found


def _device_properties(data: RunData) -> list[dict[str, Any]]:
    """kineto's ``deviceProperties`` for the run's device: what the store's meta and the allocator's peaks say of it."""
    meta = data.meta
    properties: dict[str, Any] = {"id": int(meta.get("device_id") or 0), "name": meta.get("device_name") or "CUDA device"}
    if data.gpu_peaks:
        properties["totalGlobalMem"] = int(max(p["total"] for p in data.gpu_peaks))
    capability = meta.get("device_capability")
    if capability:
        properties["computeMajor"], properties["computeMinor"] = int(capability[0]), int(capability[1])
    return [properties]


def _us(ns: int, base: int) -> float:
    """Epoch ns as us from ``base``, to the ns."""
    return round((ns - base) / 1000.0, 3)
