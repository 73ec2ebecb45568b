"""``summary_{rank}.json``, the most-read file: its schema (``Summary``), its version, and its readers.

``compare``, the viewer and the cluster roll-up read a summary through here. ``SUMMARY_VERSION`` is
written into every summary (``summary_version``); it goes up when a key changes meaning or goes away.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any, TypedDict

import orjson

from .columns import STAGES
from .names import STEP_TRACE, SUMMARY, rank_file, summary_ranks
from .readers import read_step_trace

SUMMARY_VERSION = 1
NO_END_RECORD = "killed (no end record)"  # end_reason of a rank whose process ended without closing its store


class Percentiles(TypedDict):
    mean: float
    p50: float
    p90: float
    max: float


class WarmupStep(TypedDict):
    step: int
    ms: float
    why: str  # how far over the steady median it was (``analysis.warmup.detect``)


class Summary(TypedDict, total=False):
    """One rank's summary (``analysis.summary.build``); ms unless a key says otherwise."""
    summary_version: int
    rank_id: int
    framework: str | None
    device_target: str
    profiler_dir: str
    steps_profiled: int
    steps_total: int
    step_range: list[int] | None
    steady_steps: int
    step_time_ms: Percentiles | None  # the steady steps'
    run_step_time_ms: Percentiles | None  # every step's, warm-up and steps outside the window included
    stages_ms: dict[str, float]  # iteration_interval, fp_and_bp, tail: the steady steps' means
    stage_share: dict[str, float]
    step_points: dict[str, Any]  # fp_start, bp_end and the rules that chose them
    data_wait_ms: Percentiles | None
    top_op_types: list[dict[str, Any]]  # op_type, total_ms, percent: the 20 largest
    ops_recorded: int
    flops: dict[str, Any] | None
    # torch: sessions (the profiler sessions), sessions_with_shapes (steps, events, because), steps_filled,
    # steps_not_filled ([first, last] runs) and the fill rule (analysis/shapefill.py); None where every session had shapes
    shapes: dict[str, Any] | None
    memory: dict[str, Any] | None
    device: dict[str, Any] | None  # the GPU's own view (analysis/device.py): busy and idle by cause, kernels, memory
    cpu: dict[str, Any] | None
    communication: dict[str, Any] | None
    verdict: str | None
    verdict_basis: dict[str, Any] | None  # why (analysis/diagnosis/verdict.py): rule, finding, cost, margin, runner_up(_cost, _share), close_to, confidence
    findings: list[dict[str, Any]]  # id, category, severity, ms_per_step, text, evidence, action, ...
    suggestions: list[dict[str, Any]]
    step_breakdown_ms: dict[str, Any]  # each stage's median over the steady steps
    step_breakdown_mean_ms: dict[str, Any]  # ... and its mean (the findings' times at stake)
    python_hot_spots: list[dict[str, Any]]
    annotations: list[dict[str, Any]]
    timeline: dict[str, Any] | None
    notes: list[str]
    windows: list[dict[str, Any]]
    not_applicable: list[str]
    end_reason: str
    host: str | None  # the machine's name: the cluster step groups ranks by it
    rank_size: int
    collectives: dict[str, Any]  # per communication group: ranks, last sequence number entered and completed, the last entered
    per_step_ms: dict[str, list[float]]  # step, total, iteration_interval, fp_and_bp, tail, communication (ms in collectives),
    # end_ns (the step's end, epoch ns): one entry per profiled step
    warmup_steps: list[WarmupStep]
    warmup_rule: str
    machine_speed: dict[str, Any] | None
    exports: list[str]  # the export folders written beside profiler/ (export_type), each once


def read_summary(profiler_dir: str, rank: int | str) -> Summary:
    with open(os.path.join(profiler_dir, rank_file(SUMMARY, rank)), "rb") as handle:
        summary: Summary = orjson.loads(handle.read())
    return summary


def summaries(profiler_dir: str) -> Iterator[tuple[int, Summary]]:
    """(rank, summary) of every readable ``summary_{rank}.json`` in the directory, in rank order."""
    for rank in summary_ranks(profiler_dir):
        try:
            yield rank, read_summary(profiler_dir, rank)
        except (OSError, orjson.JSONDecodeError):
            continue


def warmup_step_numbers(summary: Mapping[str, Any]) -> set[int]:
    """The numbers of the steps the summary names as warm-up (left out of every steady figure)."""
    return {w["step"] for w in summary.get("warmup_steps") or ()}


def step_samples(profiler_dir: str, rank: int | str, summary: Mapping[str, Any]) -> dict[str, list[float]]:
    """Per-step total and stage times (ms) of one rank's steady steps (warm-up left out): the summary's
    ``per_step_ms``; for summaries written before it (released versions), the step trace file beside it."""
    per_step = summary.get("per_step_ms")
    if per_step is None:
        path = os.path.join(profiler_dir, rank_file(STEP_TRACE, rank))
        with open(path, "rb") as handle:
            steps = read_step_trace(handle.read())["steps"]
        per_step = {key: [step[key] for step in steps] for key in ("step", "total") + STAGES}
    warm = warmup_step_numbers(summary)
    keep = [i for i, n in enumerate(per_step["step"]) if n not in warm]
    return {key: [per_step[key][i] for i in keep] for key in ("total",) + STAGES}
