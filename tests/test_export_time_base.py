"""Every rank of a job counts its traces (timeline, trace_view.json, the HTA trace) from one base, so the
ranks line up in the tools that read several at once, even when their first events fall in different
hours (or, analysed together, different days). Synthetic raw stores, no framework."""
import calendar
import glob
import json
import os

import pytest

from msprof_agent.frameworks.mindspore.profiler_files import op_batches
from msprof_agent.pipeline import analyse_rank, offline_analyse
from msprof_agent.records import FORMAT
from msprof_agent.store import EventWriter

pytestmark = pytest.mark.unit
MS = 1_000_000
STEP_MS, OP_MS, COMM_MS = 10, 3, 2


def _epoch_ns(text):
    """'2026-03-01 10:59:59.500' (UTC) as epoch ns."""
    whole, millis = text.split(".")
    return calendar.timegm(tuple(int(x) for x in whole.replace("-", " ").replace(":", " ").split()) + (0, 0, 0)) * 10**9 + int(millis) * MS


def _store(profiler_dir, rank, started):
    """A torch rank of 2 that starts at ``started`` (epoch ns): 3 steps, each one op then one all_reduce right after it."""
    writer = EventWriter(profiler_dir, rank, started)
    writer.add({"k": "meta", "format": FORMAT, "pid": 100 + rank, "rank_id": rank, "rank_size": 2, "framework": "torch", "device_target": "CPU",
                "started_ns": started, "host": "node", "cpus": 2, "memory_bytes": 16 << 30, "options": {}})
    ops = {"name": [], "type": [], "start": [], "dur": [], "tid": []}
    for n in range(1, 4):
        begin = started + n * STEP_MS * MS
        writer.add({"k": "step", "n": n, "start": begin, "end": begin + STEP_MS * MS, "wait": 0, "waits": [], "fp": None, "bp": None, "win": True})
        writer.add({"k": "comm", "step": n, "name": "all_reduce", "start": begin + OP_MS * MS, "dur": COMM_MS * MS, "bytes": 4096})
        for column, value in (("name", "aten::mm"), ("type", "aten::mm"), ("start", begin), ("dur", OP_MS * MS), ("tid", 1)):
            ops[column].append(value)
    for record in op_batches(ops, "test"):
        writer.add(record)
    writer.add({"k": "end", "reason": "exit"})
    writer.close()


def _traces(out):
    """{rank: {file kind: parsed events}} of every trace the analysis wrote under ``out``."""
    found = {}
    for kind, pattern in (("timeline", "profiler/cpu_timeline_display_*.json"), ("trace_view", "*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"),
                          ("hta", "hta_trace/*.json")):
        for path in glob.glob(os.path.join(out, pattern)):
            events = json.load(open(path))
            events = events["traceEvents"] if isinstance(events, dict) else events
            found.setdefault(_rank_of(path), {})[kind] = events
    return found


def _rank_of(path):
    """The rank a trace is of, from its name (or its Ascend directory's ``profiler_info_{rank}.json``)."""
    name = os.path.basename(path)
    if name.startswith("cpu_timeline_display_"):
        return int(name.rsplit("_", 1)[1].split(".")[0])
    if ".rank" in name:
        return int(name.split(".rank")[1].split(".")[0])
    return int(glob.glob(os.path.join(os.path.dirname(os.path.dirname(path)), "profiler_info_*.json"))[0].rsplit("_", 1)[1].split(".")[0])


@pytest.mark.parametrize("starts, together", [
    (("2026-03-01 10:59:59.500", "2026-03-01 11:00:00.200"), False),  # each rank analysed alone, as at exit: an hour apart
    (("2026-03-01 23:59:59.500", "2026-03-02 00:00:00.200"), True),  # a day apart: `analyse` of both gives them the job's
])
def test_ranks_straddling_a_boundary_share_one_time_base(tmp_path, starts, together):
    out = str(tmp_path)
    profiler_dir = os.path.join(out, "profiler")
    started = [_epoch_ns(s) for s in starts]
    for rank, start in enumerate(started):
        _store(profiler_dir, rank, start)
    if together:
        offline_analyse(out, export_type="text")
    else:
        for rank in (0, 1):
            analyse_rank(profiler_dir, rank, export_type="text")
    traces = _traces(out)
    assert sorted(traces) == [0, 1] and all(sorted(t) == ["hta", "timeline", "trace_view"] for t in traces.values())
    bases = {e["args"]["epoch_ns"] for t in traces.values() for events in t.values() for e in events if e.get("name") == "time_base"}
    assert len(bases) == 1
    (base,) = bases
    for rank, by_kind in traces.items():
        first_step = started[rank] + STEP_MS * MS
        for kind, events in by_kind.items():  # every trace's step 1 (and its op) sits at its real time from the shared base
            ops = [e for e in events if e.get("ph") == "X" and e.get("name") == "aten::mm"]
            assert round(min(e["ts"] for e in ops) * 1000) + base == first_step, (rank, kind)
        overlap = [e for e in by_kind["trace_view"] if e.get("cat") == "overlap" and e["args"]["step"] == 1]
        free = next(e for e in overlap if e["name"] == "Free")  # after the op and the all_reduce that follows it
        assert round(free["ts"] * 1000) + base == first_step + (OP_MS + COMM_MS) * MS
