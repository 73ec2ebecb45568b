"""The rules across steps: warm-up (the window's first, slower steps: a one-off cost) and a periodic beat of slow
steps (jitter).

Slow steps are attributed to stages before a pattern is called jitter (``attribute``): recurring waits are the
data finding's evidence; recurring host, op or runtime time is periodic work, jitter, which the stage's finding
then leaves out.
"""
from __future__ import annotations

from typing import Any

from ...contract.frameworks import TORCH, profile_of
from .actions import action
from .breakdown import STAGE_WORDS, STAGES, Row, mad_of, mean_of, median_of
from .findings import JITTER_MIN_BEATS, JITTER_MIN_MS, MIN_SHARE, STAGE_FINDING, Finding, make_finding
from .words import ms_words, ranges, stake_words, steps_words


def _periodic(excess: dict[int, float], slow: list[int]) -> tuple[int, list[int], float]:
    """The period k >= 2 whose beat explains the most excess time. A candidate beat (a period and an
    anchor among the slow steps ``slow``) holds at least ``JITTER_MIN_BEATS`` slow steps and half of the
    slow steps' excess, at 3/4 or more of the places it predicts (three slow steps fit some period by
    chance too often); it scores the least-squares share of the excess it explains, (sum of the excess
    at its places)^2 / places. Counting slow steps instead let load-made slow steps on alternate steps
    outvote a 100 ms pause every 4 steps. ``excess`` is every steady step's time over the median (ms, >= 0).
    Returns (period, slow steps on the beat, score), or (0, [], 0.0)."""
    best: tuple[int, list[int], float] = (0, [], 0.0)
    slow_excess = sum(excess[n] for n in slow)
    for period in range(2, max(len(excess) // JITTER_MIN_BEATS, 2) + 1):
        for anchor in slow:
            on_beat = [n for n in slow if (n - anchor) % period == 0]
            places = range(on_beat[0], on_beat[-1] + 1, period)
            if len(on_beat) < max(JITTER_MIN_BEATS, 0.75 * len(places)) or sum(excess[n] for n in on_beat) < 0.5 * slow_excess:
                continue
            score = sum(excess.get(n, 0.0) for n in places) ** 2 / len(places)
            if score > best[2]:
                best = (period, on_beat, score)
    return best


def beat(steady: list[Row]) -> dict[str, Any] | None:
    """Slow steps recurring with a period, in the step time or in its host part (where GC, checkpoints
    and logging land; on a shared machine the ops' own time is the noisier series), with the stage
    (``STAGES``) that holds most of their excess over the stages' medians."""
    found: dict[str, Any] | None = None
    for key, label in (("total", "step time"), ("host", "host time")):
        values = [r[key] for r in steady]
        median, mad = median_of(values), mad_of(values)
        over = {r["n"]: max(r[key] - median, 0.0) for r in steady}
        slow = sorted(n for n, ms in over.items() if ms >= max(JITTER_MIN_MS, 3 * mad))
        period, on_beat, score = _periodic(over, slow)
        if period and (found is None or score > found["score"]):
            found = {"period": period, "steps": on_beat, "excess": [over[n] for n in on_beat], "series": label, "score": score}
    if found is None:
        return None
    by_step = {r["n"]: r for r in steady}
    medians = {stage: median_of([r.get(stage, 0.0) for r in steady]) for stage in STAGES}
    split = {stage: sum(max(by_step[n].get(stage, 0.0) - medians[stage], 0.0) for n in found["steps"]) for stage in STAGES}
    found["stage"] = max(split, key=lambda stage: split[stage]) if any(split.values()) else "host"
    found["excess_by_stage_ms"] = {stage: round(ms / len(found["steps"]), 3) for stage, ms in split.items() if ms > 0}
    return found


def pattern_words(found: dict[str, Any], meta: dict[str, Any]) -> str:
    """A beat as evidence in words: "every 2nd step waits 80.3 ms more (data wait; steps 4, 6, 8-20)"."""
    period, excess = found["period"], median_of(found["excess"])
    workers = (meta.get("data_settings") or {}).get((profile_of(meta.get("framework")) or TORCH).workers_setting)
    why = f" (the {workers} workers' batches arrive together)" if found["stage"] == "wait" and workers == period else ""
    return f"every {period}{'nd' if period == 2 else 'rd' if period == 3 else 'th'} step takes {ms_words(excess)} more in " \
           f"{STAGE_WORDS[found['stage']]}{why}: {steps_words(found['steps'])}"


def jitter_finding(steady: list[Row], found: dict[str, Any] | None = None, meta: dict[str, Any] | None = None) -> Finding | None:
    """The beat (``beat``) as a finding of its own: excess that no stage's finding explains."""
    found = found if found is not None else beat(steady)
    if found is None:
        return None
    period, on_beat, excess = found["period"], found["steps"], found["excess"]
    ms = sum(excess) / len(steady)
    step_ms = mean_of([r["total"] for r in steady])
    evidence = {"period": period, "steps": on_beat, "excess_ms": round(median_of(excess), 3), "series": found["series"],
                "stage": found.get("stage"), "excess_by_stage_ms": found.get("excess_by_stage_ms"), "step_ms": round(step_ms, 3)}
    text = f"Jitter: every {period} steps a step runs {ms_words(median_of(excess))} longer ({found['series']}; {steps_words(on_beat, 6)})"
    words = [pattern_words(found, meta or {}) if found.get("stage") else f"{steps_words(on_beat)} run longer",
             f"{ms_words(sum(excess))} in all over {len(steady)} steady steps"]
    return make_finding("periodic_pause", "jitter", "high" if ms >= MIN_SHARE * step_ms else "medium", ms, evidence, words, text,
                        action("periodic_pause", None, period=period))


def warmup_finding(rows: list[Row], warm: list[int], steady_ms: float) -> Finding | None:
    """The window's warm-up steps (``warmup.detect``) over a mean steady step: a one-off cost, never the verdict."""
    if not warm:
        return None
    extra = [r["total"] - steady_ms for r in rows if r["n"] in warm]
    evidence = {"steps": ranges(warm), "extra_ms": round(sum(extra), 3), "steady_step_ms": round(steady_ms, 3)}
    words = [f"{steps_words(warm)} took {ms_words(sum(extra))} more than a mean steady step of {ms_words(steady_ms)}"]
    text = f"Warm-up: {steps_words(warm)} took {ms_words(sum(extra))} more than steady steps"
    return make_finding("warm_up", "warm-up", "low", 0.0, evidence, words, text, action("warm_up", None))


def attribute(pattern: dict[str, Any], found: list[Finding], steady: list[Row], meta: dict[str, Any]) -> None:
    """A beat is attributed to the stage holding most of its excess before it is called jitter. Data
    waits that recur are the data finding's own evidence (a pipeline that cannot keep up delivers in
    bursts: with w workers, w batches arrive together). Elsewhere (host, ops, runtime) a beat is
    periodic work of its own (GC, checkpoints, evaluation) and stays jitter; the stage's finding then
    counts only its time off the beat, so that the two never count the same time."""
    owner = next((f for f in found if f["id"] == STAGE_FINDING.get(pattern["stage"])), None)
    if owner is None:
        return
    words = pattern_words(pattern, meta)
    owner["evidence"]["pattern"] = {key: pattern[key] for key in ("period", "steps", "stage")}
    if pattern["stage"] == "wait":
        owner["evidence_text"] += "; " + words
        return
    on_beat = pattern["excess_by_stage_ms"].get(pattern["stage"], 0.0) * len(pattern["steps"]) / len(steady)
    owner["ms_per_step"] = round(max(owner["ms_per_step"] - on_beat, 0.0), 1)
    owner["at_stake"] = stake_words(owner["ms_per_step"])
    owner["evidence_text"] += f"; {ms_words(on_beat)} a step of it recurs on a beat, counted as jitter ({words})"


def even_on_the_device(pattern: dict[str, Any], device: dict[str, Any]) -> bool:
    """A periodic slow step on the host's clock that the device's own step times (CUDA events) do not show: the host
    waited at a sync (a ``loss.item()`` every N steps) for work the device had queued, which no step lost."""
    times = dict(device.get("device_step_ms_by_step") or [])
    slow = [times[n] for n in pattern.get("steps", []) if n in times]
    rest = [v for n, v in times.items() if n not in set(pattern.get("steps", []))]
    return bool(slow and rest) and median_of(slow) - median_of(rest) < JITTER_MIN_MS / 2
