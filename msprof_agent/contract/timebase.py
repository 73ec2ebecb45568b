"""The timelines' time base: every trace of a job counts ``ts`` in microseconds from the start of the
UTC day the job began, recorded in a ``time_base`` metadata event; and the one clock of a job's hosts."""
from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

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


def clock_shifts_ns(cluster_summary: Mapping[str, Any]) -> dict[str, int]:
    """What to add to the instants of each host's ranks (ns) to put every host on one clock, from the clock offsets
    the cluster summary records (``analysis.cluster.clock_offsets``): the clock of the host furthest ahead (its shift 0),
    so no instant moves earlier; {} for one host."""
    offsets = {h["host"]: h["clock_offset_ms"] for h in cluster_summary.get("hosts") or []
               if isinstance(h, dict) and isinstance(h.get("clock_offset_ms"), (int, float))}
    ahead = max(offsets.values(), default=0.0)
    return {host: round((ahead - offset) * 1e6) for host, offset in offsets.items()}
