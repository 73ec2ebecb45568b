"""Memory: host RSS over the run (always sampled with CPU) and the framework allocator's figures
with ``profile_memory``; peak and per step. Files: ``memory_usage_summary_{r}.json`` (GiB, as the
contract) and ``memory_usage_details_{r}.json``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..contract import readers
from ..contract.names import MEMORY_DETAILS, MEMORY_SUMMARY
from ..contract.pages import File, Page
from ..writers import write_json

if TYPE_CHECKING:
    from ..records import Step
    from .run import Context
    from .rundata import RunData

GIB = float(1 << 30)


def _per_step_peaks(steps: Sequence[Step], times_ns: Sequence[int], values: Sequence[int]) -> list[int | None]:
    peaks: list[int | None] = []
    j = 0
    for step in steps:
        while j < len(times_ns) and times_ns[j] < step["start"]:
            j += 1
        k = j
        peak: int | None = None
        while k < len(times_ns) and times_ns[k] <= step["end"]:
            peak = values[k] if peak is None else max(peak, values[k])
            k += 1
        peaks.append(peak)
    return peaks


def write(data: RunData, ctx: Context) -> dict[str, Any] | None:
    rss = [(s["ts"], s["rss"]) for s in data.cpu]
    devices = {m.get("device", "cpu") for m in data.mem}
    device = "cuda" if "cuda" in devices else "cpu"  # one series: the accelerator's when there is one
    alloc = sorted((m["ts"], m.get("allocated", 0)) for m in data.mem if m.get("device", "cpu") == device)
    if not rss and not alloc:
        return None
    series = alloc or rss
    times, values = [t for t, _ in series], [v for _, v in series]
    peak = max(values)
    allocations = sum(1 for a, b in zip(values, values[1:]) if b > a)
    deallocations = sum(1 for a, b in zip(values, values[1:]) if b < a)
    source = "framework allocator" if alloc else "process RSS"
    capacity = data.meta.get("memory_bytes")  # the profiled machine's (None where it could not be read)
    write_json(ctx.path(MEMORY_SUMMARY), {
        "capacity": round(capacity / GIB, 4) if capacity else None, "allocations": allocations, "deallocations": deallocations,
        "peak_mem": round(peak / GIB, 6), "static_mem": round(values[0] / GIB, 6), "source": source,
    }, ctx.pretty)
    step_peaks = _per_step_peaks(data.window_steps, times, values)
    write_json(ctx.path(MEMORY_DETAILS), {"0": {
        "graph_id": 0, "static_mem": round(values[0] / GIB, 6),
        "lines": [round(v / (1 << 20), 3) for v in values], "time_stamp_ns": times,
        "nodes": [], "fp_start": None, "bp_end": None, "breakdowns": [],
        "step_peak_mb": [None if p is None else round(p / (1 << 20), 3) for p in step_peaks],
    }}, ctx.pretty)
    return {"peak_rss_mb": round(max(v for _, v in rss) / (1 << 20), 2) if rss else None,
            "peak_allocated_mb": round(max(v for _, v in alloc) / (1 << 20), 2) if alloc else None, "source": source}


PAGE = Page("memory", (File("memory_summary", (MEMORY_SUMMARY,), readers.read_json),
                       File("memory_details", (MEMORY_DETAILS,), readers.read_memory_details)), write)
