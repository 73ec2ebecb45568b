"""Warm-up steps: the leading steps of a window that are slow for reasons only they have (graph
compile, first-iteration allocation, torch's kernel and allocator warm-up), told apart from the run
itself so they do not drive the figures of the steady steps.

The rule (``RULE``): the steady time is the median of the window's later half, which warm-up never
reaches; leading steps are warm-up while each takes more than ``FACTOR`` x that median and more than
``MIN_EXCESS_MS`` beyond it, at most half the window, and only with ``MIN_STEPS`` steps or more.
The first step that is not stops the run of warm-up steps, so a slow step later on stays in.
Warm-up belongs to the run, not to a window: ``of_window`` looks for it among the run's own first
steps (a window opened at step 5 of a warm job has none), each step's time net of the agent's own
pauses (the profiler's start-up at a window's first step is ours, not the job's warming up).
Warm-up steps stay in the step trace CSV and the timeline; the summary's means, percentiles,
verdict and suggestions, MFU, and compare's noise read the steady steps only.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .stats import median

if TYPE_CHECKING:
    from ..contract.summary import WarmupStep
    from .rundata import RunData

FACTOR = 1.5
MIN_EXCESS_MS = 1.0
MIN_STEPS = 4
RULE = (f"leading steps each over {FACTOR:g}x the median of the window's later half and over {MIN_EXCESS_MS:g} ms "
        f"beyond it (at most half the window, {MIN_STEPS}+ steps)")

Row = TypeVar("Row", bound=Mapping[str, Any])  # a step trace row or a step record: anything with ``n``


def detect(numbers: Sequence[int], totals_ms: Sequence[float]) -> list[WarmupStep]:
    """The warm-up steps among a window's steps (their numbers and total times, in order) as
    ``[{"step", "ms", "why"}]``."""
    if len(totals_ms) < MIN_STEPS:
        return []
    steady = median(totals_ms[len(totals_ms) // 2:])
    found: list[WarmupStep] = []
    for n, ms in zip(numbers[:len(totals_ms) // 2], totals_ms):
        if ms <= FACTOR * steady or ms - steady <= MIN_EXCESS_MS:
            break
        found.append({"step": n, "ms": round(float(ms), 3),
                      "why": f"{ms / steady:.1f}x the steady median {steady:.2f} ms ("
                             + ("graph compile / first-iteration allocation" if not found else "still warming up") + ")"})
    return found


def of_window(data: RunData) -> list[WarmupStep]:
    """The warm-up steps of the run (``data.steps``, from its first step) that lie in the window."""
    run = data.steps
    if not run or run[0]["n"] != 1:  # the run's first steps were not recorded: no leading steps to judge
        return []
    window = {s["n"] for s in data.window_steps}
    totals = [(s["end"] - s["start"] - data.paused_ns(s["start"], s["end"])) / 1e6 for s in run]
    found = [w for w in detect([s["n"] for s in run], totals) if w["step"] in window]
    return found or _profiler_first_step(data)


def _profiler_first_step(data: RunData) -> list[WarmupStep]:
    """On a GPU, a window's first step carries CUPTI's own start (its first launches run slowly), the profiler's
    cost and not the job's: left out like a warm-up step when it is slow by the same rule."""
    steps = data.window_steps
    if data.meta.get("device_target") != "GPU" or len(steps) < MIN_STEPS:
        return []
    totals = [(s["end"] - s["start"] - data.paused_ns(s["start"], s["end"])) / 1e6 for s in steps]
    steady_ms = median(totals[1:])
    if totals[0] <= FACTOR * steady_ms or totals[0] - steady_ms <= MIN_EXCESS_MS:
        return []
    return [{"step": steps[0]["n"], "ms": round(totals[0], 3),
             "why": f"{totals[0] / steady_ms:.1f}x the steady median {steady_ms:.2f} ms (the GPU profiler's first step: CUPTI starting)"}]


def steady(rows: Iterable[Row], warmup: Iterable[WarmupStep]) -> list[Row]:
    """The rows (dicts with ``n``) that are not warm-up steps."""
    left_out = {w["step"] for w in warmup}
    return [r for r in rows if r["n"] not in left_out] if left_out else list(rows)
