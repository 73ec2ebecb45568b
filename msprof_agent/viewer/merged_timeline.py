"""The timeline download: one Trace Event JSON array (Perfetto / chrome://tracing) of a job's ranks, within a size budget.

What it holds (``download``):
- every rank: a ``Rank r: Step Trace`` process with a Steps lane, a Stages lane (Step Interval, where the wait for
  data falls; Forward+Backward; Tail, the optimizer's and what follows backward) and a Communication counter (the
  step's time in collectives, ms), from the rank's step trace and hccl files, so a thousand ranks cost a few
  events a step each; when the ranks' steps would pass their ``LANES_SHARE`` of ``BUDGET_BYTES``, one step in k is kept, its args giving
  the mean and max step time of the k steps it stands for, and the file's ``merged_timeline`` event says so;
- the ranks asked for (the Cluster page's default: the slow ranks and the lowest): their own timeline files in place
  of those lanes, with the MindSpore Profiler guide's filters: kind ``detail``, every event; ``summary``, only the
  step-level processes (those whose ``process_name`` mentions step, overlap, communication, hccl, data or queue);
  merge subgraphs, the step-level threads named after a graph ("graph 0", ...) collapse into one track. They share
  what the lanes leave of ``BUDGET_BYTES``; one that does not fit keeps its longest slices (the steps first).
Each rank's processes are renumbered in rank order and named ``Rank r: <name>``, so ranks never share a track; the
metadata comes first, then every event by time. Each file's times count from its own base
(``contract.timebase.time_base_event``); the merged file's count from the earliest of them (the lanes' from the
start of the day of the earliest step, as the analysis counts them), recorded once, so ranks line up and stay exact.
Ranks on different hosts count on different clocks: each host's ranks are moved by its clock offset from the job's
cluster summary (``contract.timebase.clock_shifts_ns``, from the roll-up's own offsets), so a collective ends at one instant on every host.
``build`` merges chosen ranks' own timelines whole, for the step timelines the pages draw.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ..contract.names import timeline_file
from ..contract.timebase import clock_shifts_ns, day_base, rebase, time_base_event, timeline_base
from .sections import cluster_summary, load_section

if TYPE_CHECKING:
    from .sections import Run

_SUMMARY_PROCESS = re.compile(r"step|overlap|communicat|hccl|data|queue", re.I)
_GRAPH_THREAD = re.compile(r"graph", re.I)

# Perfetto's UI parses a JSON trace whole in the browser tab (the text, then its own tables, several times the
# file's size in the tab's memory): at this size it opens in seconds, past a few hundred MB the tab runs out of memory.
BUDGET_BYTES = 64_000_000
LANES_SHARE = 0.25  # what every rank's step lanes may take of the budget; the asked ranks' op detail has the rest
INFO_RESERVE = 16_000  # held back (at most an eighth of the budget) for the ``merged_timeline`` event: what the file holds and left out
DOWNLOAD_INFO = "merged_timeline"  # that metadata event's name (viewers ignore metadata names they do not know)
STEP_PROCESS = "Step Trace"  # the rank timelines' names (analysis.timeline): a rank's lanes read as its own file's
STAGE_SLICES = (("Step Interval", "start", "fp"), ("Forward+Backward", "fp", "bp"), ("Tail", "bp", "end"))
COMMUNICATION_COUNTER = "Communication (ms)"
Encoded = tuple[tuple[int, int, int], bytes, bool]  # (sort key: metadata first, then by ts, longer first, in ns; its JSON; a slice)


def _metadata_names(events: list[Any], kind: str) -> dict[Any, str]:
    """The names the metadata events of KIND give: a process's by pid, a thread's by (pid, tid)."""
    names: dict[Any, str] = {}
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "M" and event.get("name") == kind:
            key = event.get("pid") if kind == "process_name" else (event.get("pid"), event.get("tid"))
            names[key] = str((event.get("args") or {}).get("name", ""))
    return names


def _load(path: str) -> list[Any]:
    with open(path, "rb") as handle:
        return _events(handle.read())


def _parsed(text: bytes) -> tuple[list[Any], int]:
    """A timeline's events and their time base, from its text."""
    events = _events(text)
    return events, timeline_base(events)


def _events(text: bytes) -> list[Any]:
    events = orjson.loads(text)
    if isinstance(events, dict):  # the object form {"traceEvents": [...]} is valid Trace Event JSON too
        events = events.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError("not a Trace Event array")
    return events


def _graph_tracks(events: list[Any], pids: Collection[Any]) -> dict[tuple[Any, Any], Any]:
    """For merging: (pid, tid) of each graph-named thread in ``pids`` -> the first such tid of its process."""
    target: dict[tuple[Any, Any], Any] = {}
    for (pid, tid), tname in sorted(_metadata_names(events, "thread_name").items(), key=repr):
        if pid in pids and _GRAPH_THREAD.search(tname):
            first = next((t for (p, _), t in target.items() if p == pid), tid)
            target[(pid, tid)] = first
    return target


def _load_rank(run: Run, rank: int) -> tuple[list[Any], int] | str:
    """The rank's timeline events and their time base, or why they could not be read."""
    directory = run.ranks[rank]
    name = timeline_file(directory, rank)
    if name is None:
        return f"rank {rank}: no timeline file"
    path = os.path.join(directory, name)
    if not os.path.realpath(path).startswith(os.path.realpath(directory) + os.sep):
        return f"rank {rank}: refused {name}: it links outside the profiler directory"
    try:
        events = _load(path)
    except Exception as exc:
        return f"rank {rank}: {name}: {type(exc).__name__}: {exc}"
    return events, timeline_base(events)


def _summary_events(events: list[Any]) -> list[Any]:
    """The events of the timeline's step-level processes (its metadata names them), without its ops."""
    names = _metadata_names(events, "process_name")
    summary_pids = {pid for pid, pname in names.items() if _SUMMARY_PROCESS.search(pname)}
    return [e for e in events if isinstance(e, dict) and e.get("pid") in summary_pids]


def _renumbered(rank: int, events: list[Any], kind: str, merge: bool, first_pid: int) -> tuple[list[dict[str, Any]], int]:
    """The rank's (rebased) events with its processes renumbered from ``first_pid`` and named ``Rank r: <name>``,
    filtered by ``kind`` and with its graph threads merged if asked; returns them and the next free pid."""
    names = _metadata_names(events, "process_name")
    summary_pids = {pid for pid, pname in names.items() if _SUMMARY_PROCESS.search(pname)}
    merged = _graph_tracks(events, summary_pids) if merge else {}
    pid_map: dict[Any, int] = {}  # the rank's pid -> its pid in the merged file
    out = []
    for event in events:
        if not isinstance(event, dict):
            continue
        pid, tid = event.get("pid"), event.get("tid")
        if kind == "summary" and pid not in summary_pids:
            continue
        is_thread_name = event.get("ph") == "M" and event.get("name") == "thread_name"
        if (pid, tid) in merged:
            if is_thread_name and merged[(pid, tid)] != tid:
                continue  # the merged track keeps one name
            event = dict(event, tid=merged[(pid, tid)])
            if is_thread_name:
                event["args"] = {"name": "all graphs"}
        if pid not in pid_map:
            pid_map[pid] = first_pid + len(pid_map)
        event = dict(event, pid=pid_map[pid])
        if event.get("ph") == "M" and event.get("name") == "process_name":
            event["args"] = {"name": f"Rank {rank}: {names.get(pid, '')}"}
        out.append(event)
    return out, first_pid + len(pid_map)


def _clock_shifts(run: Run) -> tuple[dict[int, int], str | None]:
    """Each rank's shift onto one clock (ns, from the job's cluster summary; none without one of several hosts), and in
    words whose clock that is, for the download's info."""
    section = cluster_summary(run) if len(run.ranks) > 1 else None
    rolled = section["data"] if section and section["status"] == "ok" and isinstance(section["data"], dict) else {}
    by_host = clock_shifts_ns(rolled)
    shifts = {r["rank_id"]: by_host[r["host"]] for r in rolled.get("ranks") or [] if isinstance(r, dict) and r.get("host") in by_host}
    if not any(shifts.values()):
        return {}, None
    return shifts, (f"on the clock of host {min(h for h, ns in by_host.items() if not ns)}: the other hosts' ranks moved by their clock offsets "
                    "(cluster_summary.json, hosts)")


def build(run: Run, ranks: list[int], kind: str = "summary", merge: bool = False) -> tuple[list[Any], list[str]]:
    """Return (events, problems): RANKS' own timelines merged, whole, and a list of per-rank reasons something was left out."""
    loaded: list[tuple[int, list[Any], int]] = []  # (rank, its events, their time base)
    problems: list[str] = []
    for rank in ranks:
        known = run.step_level_timelines.get(rank) if kind == "summary" else None  # the step-level events are all a summary keeps
        read = _load_rank(run, rank) if known is None else _parsed(known)
        if isinstance(read, str):
            problems.append(read)
        else:
            loaded.append((rank, *read))
    shifts = _clock_shifts(run)[0] if len(loaded) > 1 else {}
    base = day_base(min(b + shifts.get(rank, 0) for rank, _, b in loaded)) if loaded else 0
    out: list[Any] = [time_base_event(base, 1)] if base else []
    next_pid = 1  # Perfetto treats pid 0 as the kernel's idle task
    for rank, events, own_base in loaded:
        if kind == "summary":  # the op events, nearly all of a timeline, are dropped before they are rebased
            events = _summary_events(events)
        renumbered, next_pid = _renumbered(rank, rebase(events, own_base + shifts.get(rank, 0), base), kind, merge, next_pid)
        out += renumbered
    return out, problems


def default_ranks(run: Run, slow_ranks: Sequence[Any]) -> list[int]:
    """The ranks whose op detail the download holds when none are asked for: the slow ranks and the lowest rank."""
    return sorted({min(run.ranks), *(r for r in slow_ranks if r in run.ranks)})


def _us(ns: int) -> bytes:
    """Nanoseconds as the microseconds of a trace, written exactly (``ns`` is never negative: the base is the earliest)."""
    return b"%d.%03d" % divmod(ns, 1000)


def _lane_steps(directory: str, rank: int) -> tuple[list[dict[str, Any]], dict[int, float]] | str:
    """The rank's steps (exact ns) and its communication ms by step (none where not recorded), or why not."""
    steps = load_section(directory, rank, "step_points")
    if steps["status"] != "ok":
        return f"rank {rank}: {steps['file']}: {steps['error'] or 'missing'}"
    hccl = load_section(directory, rank, "hccl")
    communication = {s["step"]: s["communication_ms"] for s in hccl["data"]["steps"] if s["communication_ms"] is not None} if hccl["status"] == "ok" else {}
    return steps["data"], communication


_STEP = b'{"ph":"X","name":"Step %d","cat":"step","pid":%d,"tid":1,"ts":%s,"dur":%s,"args":{"step":%d%s}}'
_STAGE = b'{"ph":"X","name":"%s","cat":"stage","pid":%d,"tid":2,"ts":%s,"dur":%s,"args":{"step":%d}}'
_COUNTER = b'{"ph":"C","name":"%s","pid":%d,"tid":0,"ts":%s,"args":{"ms":%s}}'


def _lanes(rank: int, pid: int, steps: list[dict[str, Any]], communication: dict[int, float], every: int, base: int) -> list[Encoded]:
    """The rank's Step Trace process: a Steps and a Stages lane and the Communication counter, one step in ``every``
    (formatted from templates, fixed names and numbers only: a thousand ranks' steps are a million events)."""
    out = _encoded([{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"Rank {rank}: {STEP_PROCESS}"}},
                    {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
                    {"ph": "M", "name": "thread_name", "pid": pid, "tid": 1, "args": {"name": "Steps"}},
                    {"ph": "M", "name": "thread_name", "pid": pid, "tid": 2, "args": {"name": "Stages"}}])
    for first in range(0, len(steps), every):
        group = steps[first:first + every]
        step, n = group[0], group[0]["step"]
        start, length = step["start"] - base, step["end"] - step["start"]
        more = b""
        if every > 1:
            totals = [(s["end"] - s["start"]) / 1e6 for s in group]
            more = b',"stands_for":"steps %d-%d","mean_ms":%s,"max_ms":%s' % (n, group[-1]["step"], orjson.dumps(round(sum(totals) / len(totals), 3)),
                                                                             orjson.dumps(round(max(totals), 3)))
        out.append(((1, start, -length), _STEP % (n, pid, _us(start), _us(length), n, more), True))
        for name, begin, end in STAGE_SLICES:
            if step[begin] is not None and step[end] is not None and step[end] > step[begin]:
                at, span = step[begin] - base, step[end] - step[begin]
                out.append(((1, at, -span), _STAGE % (name.encode(), pid, _us(at), _us(span), n), True))
        if n in communication:
            out.append(((1, start, 0), _COUNTER % (COMMUNICATION_COUNTER.encode(), pid, _us(start), orjson.dumps(communication[n])), False))
    return out


def _encoded(events: list[dict[str, Any]]) -> list[Encoded]:
    """Events as JSON with their sort keys (times in integer ns)."""
    out = []
    for event in events:
        meta = event.get("ph") == "M"
        ts, dur = event.get("ts"), event.get("dur")
        key = (0 if meta else 1, round(ts * 1000) if isinstance(ts, (int, float)) and not meta else 0,
               -round(dur * 1000) if isinstance(dur, (int, float)) else 0)
        out.append((key, orjson.dumps(event), event.get("ph") == "X"))
    return out


def _size(encoded: Sequence[Encoded]) -> int:
    return sum(len(text) + 1 for _, text, _ in encoded)  # each with its comma


def _clipped(rank: int, encoded: list[Encoded], share: int) -> tuple[list[Encoded], str | None]:
    """The rank's events within ``share`` bytes: all of them, or every one but its slices and the longest slices
    that fit (a slice's children are never longer, so what is kept still nests); none when the rest alone is over."""
    if _size(encoded) <= share:
        return encoded, None
    slices = sorted((e for e in encoded if e[2]), key=lambda e: e[0][2])  # longest first
    kept = [e for e in encoded if not e[2]]
    room = share - _size(kept)
    if room < 0:
        return [], f"rank {rank}: its timeline's events other than slices alone are over its share of the budget ({share} bytes); its lanes only"
    taken = 0
    for event in slices:
        if len(event[1]) + 1 > room:
            break
        room -= len(event[1]) + 1
        taken += 1
    shortest = f", none shorter than {-slices[taken - 1][0][2] / 1000:.3f} us" if taken else ""
    return kept + slices[:taken], f"rank {rank}: op detail clipped to the budget: kept the longest {taken} of {len(slices)} slices{shortest}"


def download(run: Run, ranks: list[int], kind: str = "detail", merge: bool = False, budget: int = BUDGET_BYTES) -> tuple[bytes, list[str]]:
    """The download's bytes (never over ``budget``) and a list of per-rank reasons something was left out or cut:
    every rank's step lanes, and RANKS' own timelines (filtered by ``kind`` and ``merge``) in place of theirs."""
    problems: list[str] = []
    timelines: dict[int, tuple[list[Any], int]] = {}
    for rank in ranks:
        read = _load_rank(run, rank)
        if isinstance(read, str):
            problems.append(read)
        else:
            timelines[rank] = read
    lane_data: dict[int, tuple[list[dict[str, Any]], dict[int, float]]] = {}
    for rank in sorted(run.ranks):
        lanes = _lane_steps(run.ranks[rank], rank)
        if isinstance(lanes, str):
            problems += [] if rank in timelines else [lanes]
        else:
            lane_data[rank] = lanes
    shifts, clock = _clock_shifts(run)
    firsts = ([b + shifts.get(r, 0) for r, (_, b) in timelines.items()]
              + [min(s["start"] for s in steps) + shifts.get(r, 0) for r, (steps, _) in lane_data.items() if steps])
    base = day_base(min(firsts)) if firsts else 0
    lane_base = {rank: base - shifts.get(rank, 0) for rank in lane_data}  # a lane's instants less this: on the one clock, from base
    pid_of: dict[int, int] = {}
    detail: dict[int, list[dict[str, Any]]] = {}
    next_pid = 1  # Perfetto treats pid 0 as the kernel's idle task
    for rank in sorted(run.ranks):  # pids in rank order, so the processes are listed by rank
        pid_of[rank] = next_pid
        if rank in timelines:
            events, own_base = timelines.pop(rank)
            detail[rank], next_pid = _renumbered(rank, rebase(events, own_base + shifts.get(rank, 0), base), kind, merge, next_pid)
        next_pid = max(next_pid, pid_of[rank] + 1)
    out: list[Encoded] = _encoded([time_base_event(base, 1)] if base else [])
    every, lanes_out, drawn, lanes_left_out = _all_lanes({r: d for r, d in lane_data.items() if r not in detail}, pid_of, lane_base, int(budget * LANES_SHARE))
    out += lanes_out
    problems += lanes_left_out
    reserve = min(INFO_RESERVE, budget // 8)
    remaining = budget - 2 - reserve - _size(out)
    order, detailed = sorted(detail), []
    for index, rank in enumerate(order):
        events = detail.pop(rank)
        events += [{"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
                   for pid in sorted({e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"})]
        kept, note = _clipped(rank, _encoded(events), remaining // (len(order) - index))  # an even share of what is left
        detailed += [rank] if kept else []
        if not kept and rank in lane_data:
            kept = _lanes(rank, pid_of[rank], *lane_data[rank], every, lane_base[rank])
            kept = kept if _size(kept) <= remaining else []
            drawn += [rank] if kept else []
        problems += [note] if note else []
        out += kept
        remaining -= _size(kept)
    if not out:
        return b"", problems
    out.append(((0, 0, 0), _info(budget, reserve, run, every, len(drawn), detailed, kind, clock, problems), False))
    out.sort(key=lambda e: e[0])
    return b"[" + b",".join(text for _, text, _ in out) + b"]", problems


def _all_lanes(lane_data: dict[int, tuple[list[dict[str, Any]], dict[int, float]]], pid_of: dict[int, int],
               base: dict[int, int], share: int) -> tuple[int, list[Encoded], list[int], list[str]]:
    """Every rank's lanes (its instants counted from ``base[rank]``) within ``share`` bytes, the stride of the steps they keep (1: every step), the ranks drawn
    and why the others were left out (where even one step a rank is over it). The stride is first guessed from one rank's bytes a step."""
    every = 1
    longest = max((len(steps) for steps, _ in lane_data.values()), default=1)
    sample = next((rank for rank, (steps, _) in sorted(lane_data.items()) if steps), None)
    if sample is not None:
        per_step = _size(_lanes(sample, pid_of[sample], *lane_data[sample], 1, base[sample])) / len(lane_data[sample][0])
        every = min(longest, max(1, math.ceil(per_step * sum(len(steps) for steps, _ in lane_data.values()) / share)))
    while True:
        per_rank = {rank: _lanes(rank, pid_of[rank], steps, communication, every, base[rank]) for rank, (steps, communication) in sorted(lane_data.items())}
        size = sum(map(_size, per_rank.values()))
        if size <= share or every >= longest:
            break
        every = min(longest, max(every + 1, math.ceil(every * size / share)))
    out: list[Encoded] = []
    drawn, left_out, used = [], [], 0
    for rank, encoded in per_rank.items():
        if used + _size(encoded) > share:
            left_out.append(f"rank {rank}: its lanes are past the lanes' share of the budget ({share} bytes)")
        else:
            out += encoded
            used += _size(encoded)
            drawn.append(rank)
    return every, out, drawn, left_out


def _info(budget: int, reserve: int, run: Run, every: int, lane_ranks: int, detail: list[int], kind: str, clock: str | None,
          problems: list[str]) -> bytes:
    """The ``merged_timeline`` metadata event: the budget, how the lanes were thinned, whose detail is in, whose clock, what was left out."""
    lanes = "every step" if every == 1 else f"one step in {every}, its args giving the mean and max step time of the {every} steps it stands for"
    for shown in range(len(problems), -1, -1):
        left_out = problems[:shown] + ([f"and {len(problems) - shown} more"] if shown < len(problems) else [])
        text = orjson.dumps({"ph": "M", "name": DOWNLOAD_INFO, "pid": 1, "tid": 0,
                             "args": {"budget_bytes": budget, "ranks": len(run.ranks), "lanes": {"ranks": lane_ranks, "every": every, "steps": lanes},
                                      "op_detail_ranks": detail, "kind": kind, **({"clock": clock} if clock else {}), "left_out": left_out}})
        if len(text) + 1 <= reserve:
            return text
    return text


TIMELINE_DRAW_MAX_BYTES = 64 << 20  # a larger timeline file is only offered as a download
TIMELINE_DRAW_MAX_EVENTS = 4000  # complete events drawn per page (steps first, then stages, waits, communication)


def step_timeline(run: Run, ranks: list[int]) -> dict[str, Any]:
    """The step-level complete events (steps, stages, data waits, communication) of RANKS' timeline files,
    as ``{"events": [{rank, track, name, ts, dur}], "left_out": n, "problems": [...]}``; ts and dur in us."""
    problems: list[str] = []
    readable: list[int] = []
    for rank in ranks:
        name = timeline_file(run.ranks[rank], rank)
        if name and os.path.getsize(os.path.join(run.ranks[rank], name)) > TIMELINE_DRAW_MAX_BYTES:
            problems.append(f"rank {rank}: {name} is over {TIMELINE_DRAW_MAX_BYTES >> 20} MB; download it to look at it")
        else:
            readable.append(rank)
    events, more = build(run, readable, kind="summary") if readable else ([], [])
    tracks: dict[Any, str] = {}  # process name by pid, thread name by (pid, tid)
    for event in events:
        if event.get("ph") == "M" and event.get("name") in ("process_name", "thread_name"):
            key = event.get("pid") if event["name"] == "process_name" else (event.get("pid"), event.get("tid"))
            tracks[key] = str((event.get("args") or {}).get("name", ""))
    drawn = []
    for event in events:
        if event.get("ph") != "X" or not isinstance(event.get("ts"), (int, float)) or not isinstance(event.get("dur"), (int, float)):
            continue
        process = tracks.get(event.get("pid"), "")
        rank_text, _, process = process.partition(": ")
        thread = tracks.get((event.get("pid"), event.get("tid")))
        drawn.append({"rank": rank_text, "track": f"{process} / {thread}" if thread else process, "name": str(event.get("name", "")),
                      "ts": event["ts"], "dur": event["dur"]})
    drawn.sort(key=lambda e: (not e["track"].startswith("Step Trace"), e["ts"]))  # past the cap, steps and stages stay
    return {"events": drawn[:TIMELINE_DRAW_MAX_EVENTS], "left_out": max(0, len(drawn) - TIMELINE_DRAW_MAX_EVENTS), "problems": problems + more}
