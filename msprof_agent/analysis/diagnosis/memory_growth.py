"""The memory rule: a steady rise of the job's memory step after step, net of the profiler's own buffer."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..intervals import covered
from .actions import action
from .breakdown import Row
from .findings import MEMORY_MIN_BYTES_PER_STEP, MEMORY_MIN_GROWTH, Finding, make_finding
from .verdict import margin
from .words import steps_words

MIN_SAMPLES = 4  # samples (and steady steps) a line is fitted through


def _net_of_profiler_buffer(data: Any, times: np.ndarray, values: np.ndarray, before: str, after: str) -> np.ndarray:
    """Memory minus what the framework's profiler held at each sample: per profiler session (the device
    session's ``buffer`` records: its span, the memory before and after its stop, the events it held), the
    bytes per event it measured times the events recorded so far in that session. ``before`` / ``after``:
    the record's pair, ``heap_*`` (bytes in use: exact) or ``rss_*``."""
    if not data.op_count or not data.buffers:
        return values
    op_starts = data.ops["start"]
    net = values.copy()
    for session in data.buffers:
        if before not in session:
            continue
        first, last = np.searchsorted(op_starts, [session["start"], session["stop"]])
        kept = int(last - first)
        if kept <= 0:
            continue
        per_op = max(session[before] - session[after], 0) / kept  # each kept op's share of the buffer
        inside = (times >= session["start"]) & (times <= session["stop"])
        net[inside] -= per_op * (np.searchsorted(op_starts, times[inside]) - first)
    return net


def _memory_series(data: Any) -> tuple[list[tuple[int, float]], str, str | None]:
    """The samples memory growth is judged on, their source in words, and the buffer records' fields to
    take the profiler's own bytes out with (None: nothing to take out). The framework allocator's counters
    where ``profile_memory`` gave them; else the heap's bytes in use, the C heap's and Python's small objects'
    (``collectors/heap.py``: RSS keeps
    the freed holes a profiler's small allocations leave between a step's big ones, 4 MiB a step on the
    accelerate loop with op_time on, none of it the job's); else RSS."""
    allocated = [(m["ts"], m.get("allocated", 0)) for m in data.mem]
    if allocated:
        return allocated, "framework allocator", None
    in_use = _heap_series(data.cpu)
    if in_use:
        netted = any("heap_before" in b for b in data.buffers)
        words = "heap in use (C and Python's small objects)"
        return in_use, f"{words} net of the profiler's buffer" if netted else words, "heap" if netted else None
    rss = [(c["ts"], c["rss"]) for c in data.cpu]
    return rss, "process RSS net of the profiler's buffer" if data.buffers else "process RSS", "rss" if data.buffers else None


def _hand_over_readings(data: Any, buffer_fields: str | None, steady: list[Row]) -> list[tuple[int, float]]:
    """(step number, bytes) read at each profiler hand-over once the session's events were freed, where the job
    waited between two steady steps (the stop inside the hand-over's pause): the job's own memory at the end of the
    session's last step, read anyway for the netting, so free samples (a short window's periodic reads are few:
    each costs more as Python's objects pile up, ``heap.COST_SHARE``). A session stopped at the job's exit is left
    out: the job's own code ran after its last step."""
    if buffer_fields is None:
        return []
    steady_numbers = {r["n"] for r in steady}
    field = f"{buffer_fields}_after"
    ended = [b for b in data.buffers if field in b and b.get("steps") and b["first_step"] + b["steps"] - 1 in steady_numbers]
    return [(b["first_step"] + b["steps"] - 1, b[field]) for b, paused in zip(ended, _in_pauses([b["stop"] for b in ended], data.pauses))
            if paused]


def _in_pauses(times: list[int], pauses: list[Any]) -> np.ndarray:
    """Which of TIMES fall inside one of the agent's pauses of the job."""
    spans = sorted((p["start"], p["end"]) for p in pauses)
    return covered(np.array([a for a, _ in spans], dtype=np.int64), np.array([b for _, b in spans], dtype=np.int64),
                   np.array(times, dtype=np.int64))


def _heap_series(cpu: list[Any]) -> list[tuple[int, float]]:
    """The heap samples, Python's small objects in each interpolated between their counts (``small``: counted at
    their own, slower cadence; between, a sample holds the last count, and a leak of small objects would read as
    stairs); samples after the last count are left out. A store without counts reads ``heap`` as is."""
    samples = sorted((c for c in cpu if "heap" in c), key=lambda c: c["ts"])
    counts = [(c["ts"], c["small"]) for c in samples if "small" in c]
    if not counts:
        return [(c["ts"], c["heap"]) for c in samples]
    times, small = np.array([t for t, _ in counts], dtype=np.int64), np.array([v for _, v in counts], dtype=np.float64)
    series, held = [], None
    for c in samples:
        held = c.get("small", held)
        if held is not None and c["ts"] <= times[-1]:
            series.append((c["ts"], c["heap"] - held + float(np.interp(c["ts"], times, small))))
    return series


class MemoryJudgement(NamedTuple):
    """The memory rule's answer: its finding, or why it could not judge (one series built for both)."""

    finding: Finding | None
    unjudged: str | None


def judge_memory(data: Any, steady: list[Row], framework: str | None) -> MemoryJudgement:
    """A steady rise of memory step after step (allocator bytes with profile_memory, else the C heap's
    bytes in use or RSS, net of the profiler's own buffer, and the readings of each profiler hand-over; none
    taken while the agent paused the job, whose reading of a session's events holds ~2 KB an event); where
    the window had the steps but too few samples fell in them (the heap is read at most ``heap.COST_SHARE``'s
    share of a core: on a short window, a few times), the note that says so."""
    if len(steady) < MIN_SAMPLES:
        return MemoryJudgement(None, None)
    samples, source, buffer_fields = _memory_series(data)
    first, last = steady[0]["start"], steady[-1]["end"]
    inside = [(t, v) for t, v in samples if first <= t <= last]
    paused = _in_pauses([t for t, _ in inside], data.pauses)
    inside = [sample for sample, out in zip(inside, paused) if not out]
    hand_overs = _hand_over_readings(data, buffer_fields, steady)
    found = len(inside) + len(hand_overs)
    if found < MIN_SAMPLES:
        return MemoryJudgement(None, f"Memory growth not judged: {found} memory sample{'' if found == 1 else 's'} in the "
                                     f"{len(steady)} steady steps, {MIN_SAMPLES} needed (a longer window gives more)")
    return MemoryJudgement(_growth_finding(data, steady, inside, hand_overs, source, buffer_fields, framework), None)


def _growth_finding(data: Any, steady: list[Row], inside: list[tuple[int, float]], hand_overs: list[tuple[int, float]],
                    source: str, buffer_fields: str | None, framework: str | None) -> Finding | None:
    """The line fitted through the steady steps' samples and the hand-overs' readings, a finding where it rises
    steadily enough."""
    starts = np.array([r["start"] for r in steady], dtype=np.int64)
    times = np.array([t for t, _ in inside], dtype=np.int64)
    values = np.array([v for _, v in inside], dtype=np.float64)
    if buffer_fields:
        values = _net_of_profiler_buffer(data, times, values, f"{buffer_fields}_before", f"{buffer_fields}_after")
    step_of = np.searchsorted(starts, times, side="right") - 1
    numbers = np.array([r["n"] for r in steady], dtype=np.float64)[step_of]
    numbers = np.concatenate([numbers, np.array([n for n, _ in hand_overs], dtype=np.float64)])
    values = np.concatenate([values, np.array([v for _, v in hand_overs], dtype=np.float64)])
    order = np.argsort(numbers, kind="stable")
    numbers, values = numbers[order], values[order]
    if np.ptp(numbers) == 0:
        return None
    slope, intercept = np.polyfit(numbers, values, 1)
    fitted = slope * numbers + intercept
    spread = float(((values - values.mean()) ** 2).sum()) or 1.0
    r2 = 1.0 - float(((values - fitted) ** 2).sum()) / spread
    growth = slope * (numbers[-1] - numbers[0])
    if slope < MEMORY_MIN_BYTES_PER_STEP or growth < MEMORY_MIN_GROWTH or r2 < 0.8:
        return None
    span = [[int(numbers[0]), int(numbers[-1])]]
    evidence = {"bytes_per_step": int(slope), "growth_bytes": int(growth), "r2": round(r2, 4), "steps": span, "source": source,
                "margin": min(margin(slope, MEMORY_MIN_BYTES_PER_STEP), margin(growth, MEMORY_MIN_GROWTH))}
    words = [f"{slope / (1 << 20):.1f} MiB a step over {steps_words(span)} ({growth / (1 << 20):.0f} MiB in all, {source}, "
             f"linear fit R² {r2:.2f})"]
    text = f"Memory grows {slope / (1 << 20):.1f} MiB every step ({steps_words(span)}, {growth / (1 << 20):.0f} MiB in all, " \
           f"{source}): a leak signature"
    return make_finding("memory_growth", "memory", "high", 0.0, evidence, words, text, action("memory_growth", framework))
