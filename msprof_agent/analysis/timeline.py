"""Timeline: Trace Event JSON (``{cpu,gpu,ascend}_timeline_display_{r}.json``) that Perfetto opens.

Tracks: step trace (steps and their three stages), ops per thread, device activities per stream (with an arrow
from each launch, where the launch records link them), data waits, CPU counters, communication calls, host disk /
network counters and the user's mstx marks and ranges.
``timeline_limit`` (MB) is honoured by dropping the shortest ops first, the
least useful detail, and the summary says how many went. The op events, millions of them, are
formatted in blocks (``opevents``) and streamed into a temporary file that replaces the timeline
once complete: neither their texts nor the whole file are ever held in memory.

Times are microseconds from the start of the UTC day the job began (``contract.timebase.day_base``, recorded
in a ``time_base`` metadata event; the same on every rank of a job), written from integer nanoseconds with three decimals: a parser's
double holds them exactly, so slices that touch on a track stay touching, not overlapping.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import orjson

from ..contract import readers
from ..contract.names import MINDINSIGHT_HOST_TIMELINE, TIMELINE_DISPLAY, TIMELINE_SUMMARY, rank_file, timeline_device, timeline_summaries
from ..contract.pages import File, Page
from ..contract.timebase import day_base, time_base_event
from ..writers import replacing, write_json
from . import host_io, mstx
from .device import DeviceActivity
from .opevents import Keep, OpEvents, Segment
from .workers import Job, in_background

if TYPE_CHECKING:
    from ..records import Stack
    from .run import Context
    from .rundata import RunData

STEP_PID, OPS_PID, DATA_PID, CPU_PID, COMM_PID, DEVICE_PID, PYTHON_PID, HOST_IO_PID, MSTX_PID = 1, 2, 3, 4, 5, 6, 7, 8, 9
TRACK_NAMES = {STEP_PID: "Step Trace", OPS_PID: "Host Ops", DATA_PID: "Data Wait", CPU_PID: "CPU Utilization",
               COMM_PID: "Communication", DEVICE_PID: "Device Kernels", PYTHON_PID: "Python Stack (sampled)",
               HOST_IO_PID: "Host Disk / Network", MSTX_PID: "User Marks (mstx)"}


def _us(ns: int, base: int) -> float:
    """Epoch ns as us from ``base``, rounded to the ns (the division alone could leave a last-digit error)."""
    return round((ns - base) / 1000.0, 3)


def time_base(data: RunData, stages: Sequence[dict[str, Any]]) -> int:
    """The epoch ns a run's traces count ``ts`` from (the timeline's and the exports'): the start of the
    UTC day holding the job's start (``job_started_ns``, set when several ranks are analysed together;
    else the rank's own start), or any earlier event. Every rank of a job gets the same base, so their
    traces line up in the tools that read several ranks at once (HTA, msprof-analyze)."""
    meta = data.meta
    started = meta.get("job_started_ns") or meta.get("started_ns")
    candidates = [int(started)] if started else []
    candidates += [stages[0]["start"]] if stages else []
    if data.op_count:
        candidates.append(int(data.ops["start"].min()))
    candidates += [p["start"] for p in data.pauses] + [c["start"] for c in data.comm] + [m["start"] for m in data.mstx]
    candidates += [s["ts"] for s in list(data.cpu) + list(data.host_io) + list(data.stacks)]
    return day_base(min(candidates, default=0))


def fixed_events(data: RunData, base: int) -> list[dict[str, Any]]:
    """Every event but the ops and the per-step tracks, as dicts."""
    events = [time_base_event(base, STEP_PID)]
    events += [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}} for pid, name in TRACK_NAMES.items()]
    events += [{"ph": "M", "name": "thread_name", "pid": STEP_PID, "tid": 1, "args": {"name": "Steps"}},
               {"ph": "M", "name": "thread_name", "pid": STEP_PID, "tid": 2, "args": {"name": "Stages"}}]
    for pause in data.pauses:  # the agent's own work between two steps, in no step's time
        events.append({"ph": "X", "name": pause.get("what", "agent pause"), "cat": "agent", "pid": STEP_PID, "tid": 1,
                       "ts": _us(pause["start"], base), "dur": _us(pause["end"] - pause["start"], 0)})
    for sample in data.cpu:
        events.append({"ph": "C", "name": "CPU %", "pid": CPU_PID, "tid": 0, "ts": _us(sample["ts"], base),
                       "args": {"machine busy": round(100 - sample.get("idle", 0), 1), "process": round(sample.get("puser", 0) + sample.get("psys", 0), 1)}})
    events += _stack_events(data.stacks, base)
    for call in data.comm:
        events.append({"ph": "X", "name": call.get("name", "comm"), "cat": "communication", "pid": COMM_PID, "tid": 1,
                       "ts": _us(call["start"], base), "dur": _us(call["dur"], 0), "args": {"step": call.get("step"), "bytes": call.get("bytes")}})
    return events


FLOW_SHARE = 0.1  # of ``timeline_limit``: the most the launch arrows may take, the longest activities' kept first


def device_tracks(data: RunData, base: int, budget: int) -> list[dict[str, Any]]:
    """Each stream's track name and an arrow (a flow, ``s`` at the launching runtime call, ``f`` at the activity) from
    each launch to its device activity, where the launch records link them, within ``budget`` bytes."""
    if not data.op_count:
        return []
    cuda = data.ops.on_device
    if not cuda.any():
        return []
    streams = sorted({s for s in data.ops.code_values["stream"][np.unique(data.ops["stream_id"][cuda])].tolist() if s is not None})
    events: list[dict[str, Any]] = [{"ph": "M", "name": "thread_name", "pid": DEVICE_PID, "tid": s, "args": {"name": f"Stream {s}"}}
                                    for s in streams]
    activity = DeviceActivity(data)
    calls, source = activity.calls(data)
    if source != "launch records":  # a guess is no arrow to draw
        return events
    ops = data.ops
    linked = np.flatnonzero(calls >= 0)
    linked = linked[np.argsort(-(activity.ends - activity.starts)[linked], kind="stable")]
    tids, stream_of = ops.code_values["tid"][ops["tid_id"]], ops["stream"]
    used = 0
    for k in linked.tolist():
        op, call = int(activity.index[k]), int(calls[k])
        flow = {"id": (data.rank << 32) + k + 1, "cat": "launch", "name": "launch"}  # unique across ranks: the viewer merges them
        pair = [{"ph": "s", "pid": OPS_PID, "tid": tids[call], "ts": _us(int(ops["start"][call]), base), **flow},
                {"ph": "f", "bp": "e", "pid": DEVICE_PID, "tid": stream_of[op] if stream_of[op] is not None else tids[op],
                 "ts": _us(int(activity.starts[k]), base), **flow}]
        used += len(orjson.dumps(pair))
        if used > budget:
            break
        events += pair
    return events


_STEP_EVENT = b',{"ph":"X","name":"%s","cat":"%s","pid":%d,"tid":%d,"ts":%d.%03d,"dur":%d.%03d,"args":{"step":%d}}'


def step_events(data: RunData, stages: Sequence[dict[str, Any]], base: int) -> tuple[bytes, int]:
    """The step, stage and data-wait tracks, a few events per step, as bytes: formatted from a
    template (fixed names, numbers only) rather than as dicts, which cost kilobytes per step."""
    events = []
    for row in stages:
        n = row["n"]
        events.append(_STEP_EVENT % (b"Step %d" % n, b"step", STEP_PID, 1, *divmod(row["start"] - base, 1000), *divmod(row["total"], 1000), n))
        for name, begin, length in ((b"Step Interval", row["start"], row["interval"]), (b"Forward+Backward", row["fp"], row["fp_and_bp"]),
                                    (b"Tail", row["bp"], row["tail"])):
            if length > 0:
                events.append(_STEP_EVENT % (name, b"stage", STEP_PID, 2, *divmod(begin - base, 1000), *divmod(length, 1000), n))
    for step in data.window_steps:
        for begin, end in step.get("waits") or ():
            events.append(_STEP_EVENT % (b"data wait", b"data", DATA_PID, 1, *divmod(begin - base, 1000), *divmod(end - begin, 1000), step["n"]))
    return b"".join(events), len(events)


def _stack_events(samples: Sequence[Stack], base: int) -> list[dict[str, Any]]:
    """Sampled Python stacks as a flame chart: a frame lasts from the sample where it appeared to the
    first sample without it (samples are only taken when the stack changed)."""
    events: list[dict[str, Any]] = []
    open_frames: list[tuple[str, int]] = []  # (frame text, start ns), outermost first
    for sample in sorted(samples, key=lambda s: s["ts"]):
        frames, now = sample["frames"], sample["ts"]
        same = 0
        while same < min(len(open_frames), len(frames)) and open_frames[same][0] == frames[same]:
            same += 1
        for name, begin in reversed(open_frames[same:]):
            events.append({"ph": "X", "name": name, "cat": "python", "pid": PYTHON_PID, "tid": 1, "ts": _us(begin, base), "dur": _us(now - begin, 0)})
        open_frames = open_frames[:same] + [(frame, now) for frame in frames[same:]]
    return events


def _select_within(lengths: np.ndarray, durations: np.ndarray, budget: int, among: np.ndarray | None = None) -> Keep:
    """Which op events stay under the byte budget: all of them (a slice, no index array) when they
    fit, else the indices of the longest ops that do; ``among``: only these ops (sorted indices) are candidates."""
    if among is None:
        if lengths.sum() <= budget:
            return slice(None)
        order = np.argsort(-durations, kind="stable")
    else:
        if lengths[among].sum() <= budget:
            return among
        order = among[np.argsort(-durations[among], kind="stable")]
    return np.sort(order[np.cumsum(lengths[order]) <= budget])


class Trace(NamedTuple):
    """A trace file laid out (``plan_trace``), to write with ``write_planned``."""
    keep: Keep  # the kept ops
    kept: int  # how many
    size: int  # the file's bytes
    blocks: list[Segment]  # where their events go (``OpEvents.layout``)


def plan_trace(head: bytes, tail: bytes, events: OpEvents | None, durations: np.ndarray | None, limit_mb: int,
               among: np.ndarray | None = None) -> Trace:
    """The layout of a file of ``head``, the op events that fit in ``limit_mb`` (longest first kept) and ``tail``;
    ``among``: the ops that may go in (default: every op). ``head`` ends inside an array holding at least one
    event: each op event starts with its comma."""
    keep: Keep = slice(0)
    kept = 0
    if events is not None and durations is not None:  # the callers pass both or neither
        keep = _select_within(events.lengths, durations, limit_mb * 1_000_000 - len(head) - len(tail), among)
        kept = len(events.lengths) if isinstance(keep, slice) else len(keep)
    size = len(head) + len(tail) + (events.size(keep) if events is not None and kept else 0)
    return Trace(keep, kept, size, events.layout(keep, head) if events is not None and kept else [])


def write_planned(path: str, head: bytes, tail: bytes, events: OpEvents | None, trace: Trace) -> None:
    """Write the file ``plan_trace`` laid out, atomically."""
    with replacing(path, trace.size) as handle:
        if events is not None and trace.kept:
            events.write_file(handle.fileno(), head, trace.blocks, tail, trace.size)
        else:
            handle.write(head + tail)


def write_trace(path: str, head: bytes, tail: bytes, events: OpEvents | None, durations: np.ndarray | None,
                limit_mb: int, among: np.ndarray | None = None) -> tuple[Keep, int, int]:
    """``plan_trace`` and ``write_planned`` in one; returns (the kept ops, how many, the file's size)."""
    trace = plan_trace(head, tail, events, durations, limit_mb, among)
    write_planned(path, head, tail, events, trace)
    return trace.keep, trace.kept, trace.size


def write(data: RunData, ctx: Context, stages: list[dict[str, Any]]) -> tuple[dict[str, Any], Job[None]]:
    """The timeline's summary files and figures now, and its file being written on a thread of its own: numpy and
    pwrite format and write its hundreds of megabytes beside the other pages (``Run.timeline_written`` waits)."""
    device = timeline_device(data.meta.get("device_target", "CPU"))
    limit_mb = data.options.timeline_limit
    base = time_base(data, stages)
    events = OpEvents(data, OPS_PID, DEVICE_PID, base) if data.op_count else None
    fixed = (fixed_events(data, base) + host_io.counter_events(data, HOST_IO_PID, ctx.sampling_interval_ms, base)
             + mstx.events(data, MSTX_PID, base) + device_tracks(data, base, int(limit_mb * 1_000_000 * FLOW_SHARE)))
    steps, step_count = step_events(data, stages, base)
    payload = orjson.dumps(fixed, option=orjson.OPT_INDENT_2 if ctx.pretty else 0)[:-1] + steps + b"]"
    ops = data.ops
    name = rank_file(TIMELINE_DISPLAY, ctx.rank, device=device)
    trace = plan_trace(payload[:-1], payload[-1:], events, ops["dur"] if events else None, limit_mb)
    keep, kept, size = trace.keep, trace.kept, trace.size
    ctx.step_level_timeline = payload  # the file is this with the ops inserted before its "]"
    threads = np.count_nonzero(np.bincount(ops["tid_id"][keep])) if kept else 0
    names = data.op_names[np.unique(ops["name_id"][keep][:10000])].tolist() if kept else []
    dropped_text = None
    if kept < data.op_count:  # noted by ``Run.timeline_written``, after the other pages' notes
        shortest_kept = float(ops["dur"][keep].min()) / 1000.0 if kept else 0.0
        dropped_text = (f"timeline_limit {limit_mb} MB: dropped the {data.op_count - kept} shortest ops (each no longer than {shortest_kept:.1f} us); "
                        "the op tables still count every op")
    span = (stages[-1]["end"] - stages[0]["start"]) / 1e6 if stages else 0.0
    summary = {"total_time": round(span, 3), "num_of_streams": threads, "num_of_ops": kept,
               "op_exe_times": kept, "max_scope_name_num": max((n.count("/") + 1 for n in names), default=0)}
    for named in {device, MINDINSIGHT_HOST_TIMELINE if device == "cpu" else device}:
        write_json(ctx.path(TIMELINE_SUMMARY, device=named), summary, ctx.pretty)
    writing = in_background("msprof-agent-timeline", write_planned, ctx.path(TIMELINE_DISPLAY, device=device), payload[:-1], payload[-1:],
                            events, trace)
    return {"file": name, "events": len(fixed) + step_count + kept, "bytes": size, "truncated": kept < data.op_count, "dropped": dropped_text}, writing


PAGE = Page("timeline", (File("timeline", timeline_summaries(), readers.read_json), File("timeline_display", (TIMELINE_DISPLAY,))))
