"""The timeline download: one Trace Event JSON array (Perfetto / chrome://tracing) from chosen ranks.

The MindSpore Profiler guide's timeline filters, as applied to our ``*_timeline_display_{r}.json`` files:
- ranks: every chosen rank's events go in one file, each rank's processes renumbered and named
  ``Rank r: <name>`` so ranks never share a track;
- kind ``detail``: every event; ``summary``: only the step-level processes (those whose ``process_name``
  metadata mentions step, overlap, communication, hccl, data or queue), so a long run stays small;
- merge subgraphs: in the step-level processes, the threads named after a graph ("graph 0", "graph 1", ...)
  collapse into one track; other threads (steps, stages) stay as they are.
Each file's times count from its own base (``contract.timebase.time_base_event``); the merged file's count from
the earliest of them, recorded once, so ranks line up and stay exact.
"""
from __future__ import annotations

import os
import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import orjson

from ..contract.names import timeline_file
from ..contract.timebase import rebase, time_base_event, timeline_base

if TYPE_CHECKING:
    from .sections import Run

_SUMMARY_PROCESS = re.compile(r"step|overlap|communicat|hccl|data|queue", re.I)
_GRAPH_THREAD = re.compile(r"graph", re.I)


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
        events = orjson.loads(handle.read())
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


def build(run: Run, ranks: list[int], kind: str = "summary", merge: bool = False) -> tuple[list[Any], list[str]]:
    """Return (events, problems): the merged array and a list of per-rank reasons something was left out."""
    loaded: list[tuple[int, list[Any], int]] = []  # (rank, its events, their time base)
    problems: list[str] = []
    next_pid = 1  # Perfetto treats pid 0 as the kernel's idle task
    for rank in ranks:
        directory = run.ranks[rank]
        name = timeline_file(directory, rank)
        if name is None:
            problems.append(f"rank {rank}: no timeline file")
            continue
        path = os.path.join(directory, name)
        if not os.path.realpath(path).startswith(os.path.realpath(directory) + os.sep):
            problems.append(f"rank {rank}: refused {name}: it links outside the profiler directory")
            continue
        try:
            events = _load(path)
        except Exception as exc:
            problems.append(f"rank {rank}: {name}: {type(exc).__name__}: {exc}")
            continue
        loaded.append((rank, events, timeline_base(events)))
    base = min((b for *_, b in loaded), default=0)
    out = [time_base_event(base, 1)] if base else []
    for rank, events, own_base in loaded:
        names = _metadata_names(events, "process_name")
        summary_pids = {pid for pid, pname in names.items() if _SUMMARY_PROCESS.search(pname)}
        if kind == "summary":  # the op events, nearly all of a timeline, are dropped before they are re-counted
            events = [e for e in events if isinstance(e, dict) and e.get("pid") in summary_pids]
        events = rebase(events, own_base, base)
        merged = _graph_tracks(events, summary_pids) if merge else {}
        pid_map: dict[Any, int] = {}  # the rank's pid -> its pid in the merged file
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
                pid_map[pid] = next_pid
                next_pid += 1
            event = dict(event, pid=pid_map[pid])
            if event.get("ph") == "M" and event.get("name") == "process_name":
                event["args"] = {"name": f"Rank {rank}: {names.get(pid, '')}"}
            out.append(event)
    return out, problems


def dumps(events: list[Any]) -> bytes:
    return orjson.dumps(events)
