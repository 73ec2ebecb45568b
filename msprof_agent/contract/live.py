"""The live record's contract: its columns, its reader, the hang rule over the ranks' records, the all-rank
capture request. The standard library (and orjson) only: a rank's live thread (``live.py``) runs it inside the training process,
where importing numpy and the analysis (~100-300 ms holding the interpreter) would stall a step of the job;
the findings that need them are drawn by the readers (``analysis/live.py``: ``top``, the viewer).
"""
from __future__ import annotations

import math
import time

import orjson

from . import names

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    from typing import Any

    StepTuple = tuple[int, int, int, int, int | None, int | None, int]  # (n, start, end, wait, fp, bp, ns in collectives)

FORMAT = 1
RECENT_STEPS = 5  # "now": the median of the last few steps
FRESH_S = 5.0  # a running rank's record older than this is stale (the rank, or its writer thread, stopped)
HANG_MIN_S = 10.0  # the default hang threshold: HANG_STEPS median steps, at least this
HANG_STEPS = 30
STACK_AFTER_SHARE = 0.5  # a step open for this share of the threshold puts the training thread's stack in the record
CAPTURE_LEAD_S = 2.5  # an all-rank capture starts this far ahead (in the job's steps): every rank reads the request first
CAPTURE_MIN_LEAD = 3
CAPTURE_ROUND = 5


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def step_columns(steps: list[tuple[int, int, int, int, int | None, int | None, int]]) -> dict[str, list[Any]]:
    """The live record's steps as columns: number, end (ns) and the stages in ms (before_fp, fp_bp, after_bp: None without marks)."""
    columns: dict[str, list[Any]] = {key: [] for key in ("n", "end_ns", "ms", "wait_ms", "comm_ms", "before_fp_ms", "fp_bp_ms", "after_bp_ms")}
    for n, start, end, wait, fp, bp, comm in steps:
        columns["n"].append(n)
        columns["end_ns"].append(end)
        columns["ms"].append(round((end - start) / 1e6, 3))
        columns["wait_ms"].append(round(wait / 1e6, 3))
        columns["comm_ms"].append(round(comm / 1e6, 3))
        columns["before_fp_ms"].append(round(max(fp - start - wait, 0) / 1e6, 3) if fp else None)
        columns["fp_bp_ms"].append(round((bp - fp) / 1e6, 3) if fp and bp and bp >= fp else None)
        columns["after_bp_ms"].append(round((end - bp) / 1e6, 3) if bp else None)
    return columns


def default_hang_after_s(steps: list[StepTuple]) -> float:
    """No step for HANG_STEPS median steps (of the recent ones), and at least HANG_MIN_S."""
    times = [(end - start) / 1e9 for _, start, end, *_ in steps[1:]]
    return round(max(HANG_MIN_S, HANG_STEPS * median(times) if times else 0.0), 1)


def recent_step_s(ms: list[float]) -> float | None:
    """The step time now in seconds: the median of the last RECENT_STEPS (in ms), or the last step where slower (a
    slowdown has begun); None before a second step."""
    return max(median(ms[1:][-RECENT_STEPS:]), ms[-1]) / 1e3 if len(ms) > 1 else None


def capture_start(done: int, step_s: float | None) -> int:
    """The step an all-rank capture starts at: CAPTURE_LEAD_S of the job's steps now (STEP_S each) past step DONE, at
    least CAPTURE_MIN_LEAD, rounded up to a multiple of CAPTURE_ROUND, so ranks a step apart asking at once mostly agree
    (where not, the request written last stands: every rank arms it, a second after it was written, before its start)."""
    lead = max(CAPTURE_MIN_LEAD, math.ceil(CAPTURE_LEAD_S / max(step_s, 1e-3)) if step_s else CAPTURE_MIN_LEAD)
    return -(-(done + lead) // CAPTURE_ROUND) * CAPTURE_ROUND


def read_request(path: str) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as handle:
            value = orjson.loads(handle.read())
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


def pending_request(path: str, done: int) -> bool:
    """Whether the job's capture request at PATH has steps still ahead of step DONE."""
    request = read_request(path)
    return request is not None and int(request.get("start", 0)) + int(request.get("steps", 0)) > done


def read_records(paths: list[str]) -> list[dict[str, Any]]:
    """The live records at PATHS that can be read (one being replaced is skipped; the next look finds it)."""
    found = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                record = orjson.loads(handle.read())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and "rank" in record:
            record["path"] = path
            found.append(record)
    return sorted(found, key=lambda r: (r["rank"], -r["updated_ns"]))


def job_records(path: str) -> list[dict[str, Any]]:
    """Every rank's live record under PATH (an output path, a profiler directory or a job of rank folders)."""
    return read_records(names.live_records(path))


def latest_by_rank(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each rank's newest record of the newest job: a record last written before the newest one's process started is an
    earlier job's in the same folder (one of more ranks than this job has, say) and left out."""
    newest_start = max((int(r.get("started_ns") or 0) for r in records), default=0)
    latest: dict[int, dict[str, Any]] = {}
    for record in records:
        if int(record.get("updated_ns") or 0) >= newest_start:
            latest.setdefault(record["rank"], record)
    return latest


def state_of(record: dict[str, Any], now: int) -> str:
    """running, ended, or stale (a running record not rewritten for FRESH_S)."""
    state = str(record.get("state", "running"))
    return "stale" if state == "running" and (now - int(record.get("updated_ns", 0))) / 1e9 > FRESH_S else state


def is_running(path: str) -> bool:
    """Whether a job under PATH is running now (a rank's live record fresh and not ended)."""
    now = time.time_ns()
    return any(state_of(r, now) == "running" for r in job_records(path))


def hang(records: list[dict[str, Any]], now: int) -> dict[str, Any] | None:
    """No rank has finished a step for the threshold (the ranks' largest): per group, the ranks that entered its latest
    collective (waiting) and the members that never did (missing), the group with both first; without entries, the
    ranks behind the others' step count (or with no record) are missing. None where no rank is missing: every rank
    stopped at the same place is a pause of the job's own (an evaluation, a checkpoint), not a hang to name."""
    latest = latest_by_rank(records)
    if not latest or any(state_of(r, now) == "ended" for r in latest.values()):
        return None
    rank_size = max([int(r.get("rank_size") or 1) for r in latest.values()] + [len(latest)])
    ends = [(r.get("steps") or {}).get("end_ns", [None])[-1] for r in latest.values()]
    ends = [e for e in ends if e is not None]
    threshold = max(float(r.get("hang_after_s") or 0.0) for r in latest.values())
    if not ends or not threshold:
        return None
    idle = (now - max(ends)) / 1e9
    if idle <= threshold:
        return None
    fresh = [rank for rank, r in sorted(latest.items()) if state_of(r, now) == "running"]
    hang: dict[str, Any] = {"idle_s": round(idle, 1), "since_ns": max(ends), "threshold_s": threshold, "fresh": fresh,
                            "stacks": {str(r): latest[r]["stack"] for r in sorted(latest) if latest[r].get("stack")}}
    groups: dict[str, dict[int, dict[str, Any]]] = {}
    for rank, record in latest.items():
        for group, state in (record.get("collectives") or {}).items():
            groups.setdefault(group, {})[rank] = state
    for group, states in sorted(groups.items()):
        members = next((s["ranks"] for s in states.values() if s.get("ranks")), None) or list(range(rank_size))
        top = max(s["seq"] for s in states.values())
        waiting = sorted(r for r in members if r in states and states[r]["seq"] == top)
        missing = sorted(r for r in members if r not in states or states[r]["seq"] < top)
        if waiting and missing:
            last = states[waiting[0]]
            return dict(hang, group=group, seq=top, step=last["step"], collective=f"{last['name']} #{top} of group {group}",
                        waiting=waiting, missing=missing,
                        missing_steps_done={str(r): latest[r].get("steps_done") if r in latest else None for r in missing})
    most = max(int(r.get("steps_done", 0)) for r in latest.values())
    behind = sorted([rank for rank, r in latest.items() if int(r.get("steps_done", 0)) < most] + [r for r in range(rank_size) if r not in latest])
    if not behind:
        return None
    return dict(hang, group=None, seq=None, step=most + 1, collective=None, waiting=[], missing=behind,
                missing_steps_done={str(r): latest[r].get("steps_done") if r in latest else None for r in behind})


def hang_lines(hang: dict[str, Any]) -> list[str]:
    """The hang in words: one line, then each rank's stack (continuation lines, indented)."""
    head = f"hang: no rank has finished a step for {hang['idle_s']:g} s (threshold {hang['threshold_s']:g} s; the job is left alone): "
    missing = ", ".join(f"{r} (after step {hang['missing_steps_done'].get(str(r))})" for r in hang["missing"]) or "none"
    if hang["collective"]:
        head += f"rank(s) {', '.join(map(str, hang['waiting']))} wait in {hang['collective']} at step {hang['step']}; rank(s) {missing} never entered it"
    else:
        head += f"rank(s) {missing} are behind"
    lines = [head]
    for rank, frames in hang["stacks"].items():
        role = "waits" if int(rank) in hang["waiting"] else "missing" if int(rank) in hang["missing"] else "rank"
        lines.append(f"  rank {rank} ({role}) stack: " + " > ".join(frames[-8:]))
    return lines


