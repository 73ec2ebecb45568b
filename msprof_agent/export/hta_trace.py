"""A PyTorch-style trace per rank for HolisticTraceAnalysis: ``{dir}/{host}_{pid}.rank{r}.pt.trace.json``.

``{"schemaVersion": 1, "distributedInfo": {...}, "traceEvents": [...]}`` with host ops as ``cpu_op``,
one ``ProfilerStep#N`` (``user_annotation``) per profiled step on the main thread, and the collectives,
on the same time base as our timeline (``timeline.time_base``, its ``time_base`` metadata event). The directory
holds only these traces: HTA reads every JSON there.
"""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ..analysis import DEVICE_PID, OPS_PID, OpEvents, fixed_events, time_base, write_trace
from ..contract.names import HTA_TRACE
from . import framework_profile, hta_dir

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
    return hta_dir(run) if framework_profile(run.data).hta_trace else None


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
    head = (b'{"schemaVersion": 1, "distributedInfo": %s, "deviceProperties": [], "displayTimeUnit": "ms",\n"traceEvents": %s'
            % (distributed.encode(), orjson.dumps(fixed_events(data, base) + steps)[:-1]))  # the ops and "]}" follow
    limit_mb = data.options.timeline_limit
    name = HTA_TRACE.format(host=meta.get("host", "localhost"), pid=meta.get("pid", 0), rank=rank)
    _, kept, size = write_trace(os.path.join(directory, name), head, b"]}", events, data.ops["dur"] if events else None, limit_mb)
    return {"file": name, "ops": kept, "steps": len(steps), "bytes": size}
