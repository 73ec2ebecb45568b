"""The timeline download: one Trace Event JSON array (Perfetto / chrome://tracing) from chosen ranks.

The seed's filters, as applied to our ``*_timeline_display_{r}.json`` files:
- ranks: every chosen rank's events go in one file, each rank's processes renumbered and named
  ``Rank r: <name>`` so ranks never share a track;
- kind ``detail``: every event; ``summary``: only the step-level processes (those whose ``process_name``
  metadata mentions step, overlap, communication, hccl, data or queue), so a long run stays small;
- merge subgraphs: the step-level processes' threads (one per graph) collapse into one track.
"""
import os
import re

import orjson

from .data import timeline_file

_SUMMARY_PROCESS = re.compile(r"step|overlap|communicat|hccl|data|queue", re.I)


def _process_names(events):
    names = {}
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "M" and event.get("name") == "process_name":
            names[event.get("pid")] = str((event.get("args") or {}).get("name", ""))
    return names


def _load(path):
    with open(path, "rb") as handle:
        events = orjson.loads(handle.read())
    if isinstance(events, dict):  # the object form {"traceEvents": [...]} is valid Trace Event JSON too
        events = events.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError("not a Trace Event array")
    return events


def build(run, ranks, kind="summary", merge=False):
    """Return (events, problems): the merged array and a list of per-rank reasons something was left out."""
    out, problems = [], []
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
        names = _process_names(events)
        summary_pids = {pid for pid, pname in names.items() if _SUMMARY_PROCESS.search(pname)}
        pid_map = {}
        for event in events:
            if not isinstance(event, dict):
                continue
            pid = event.get("pid")
            if kind == "summary" and pid not in summary_pids:
                continue
            if pid not in pid_map:
                pid_map[pid] = next_pid
                next_pid += 1
            event = dict(event)
            event["pid"] = pid_map[pid]
            if event.get("ph") == "M" and event.get("name") == "process_name":
                event["args"] = {"name": f"Rank {rank}: {names.get(pid, '')}"}
            if merge and pid in summary_pids:
                if event.get("ph") == "M" and event.get("name") == "thread_name":
                    event["args"] = {"name": "all graphs"}
                event["tid"] = 0
            out.append(event)
        if merge:  # one thread_name per merged process is enough
            seen, kept = set(), []
            for event in out:
                key = (event.get("pid"), event.get("tid")) if event.get("ph") == "M" and event.get("name") == "thread_name" else None
                if key is not None and key in seen:
                    continue
                if key is not None:
                    seen.add(key)
                kept.append(event)
            out = kept
    return out, problems


def dumps(events):
    return orjson.dumps(events)
