"""The rules on a step's stages past its data wait: host work, runtime gaps in compiled graphs, hot ops (and their
utilisation), communication; and the stage findings just under their trigger (``near_misses``).

A stage's finding triggers on its typical (median) cost and is worth its mean: a cost of only some steps is a
pattern (``patterns``), not a stage's.
"""
from __future__ import annotations

from typing import Any

from ...contract.frameworks import TORCH, profile_of
from .actions import ACTIONS, action
from .breakdown import Row, mean_of, median_of, stage_figures
from .findings import LOW_MFU, MIN_SHARE, MIN_STAKE_MS, STAGE_FINDING, Finding, make_finding, share_severity
from .verdict import NEAR, margin
from .words import ms_words, ranges, stake_words, steps_words


def _typical(steady: list[Row], key: str, step_p50: float) -> bool:
    """A stage has a finding when it costs a typical step (its median) MIN_STAKE_MS and MIN_SHARE of it:
    a cost of only some steps is a pattern (jitter), not a stage's."""
    return _typical_margin(steady, key, step_p50) >= 1.0


def _typical_margin(steady: list[Row], key: str, step_p50: float) -> float:
    """``_typical``'s figure over its line: 1.0 on it."""
    return margin(median_of([r[key] for r in steady]), max(MIN_STAKE_MS, MIN_SHARE * step_p50))


def host_finding(steady: list[Row], step_ms: float, step_p50: float, hot_spots: list[Row], meta: dict[str, Any],
                 compiled: bool) -> Finding | None:
    """Time a typical step runs no op and waits for no data: Python around the ops, named by the hot spots where sampled
    (else the action says how to have them named); ``compiled``: the step runs compiled graphs, whose advice differs."""
    if not _typical(steady, "host", step_p50):
        return None
    host, median = stage_figures(steady, "host")
    where = [r["n"] for r in steady if r["host"] >= 0.5 * median]
    compute = mean_of([r["compute"] for r in steady])
    evidence: dict[str, Any] = {"host_ms": round(host, 3), "host_p50_ms": round(median, 3), "step_ms": round(step_ms, 3),
                                "share": round(host / step_ms, 4), "compute_ms": round(compute, 3), "steps": ranges(where),
                                "margin": _typical_margin(steady, "host", step_p50)}
    words = [f"host time in {steps_words(where)}: mean {ms_words(host)}, p50 {ms_words(median)}; ops run a mean {ms_words(compute)}"]
    named = ""
    if hot_spots:
        evidence["hot_spots"] = [{"function": spot["function"], "self_ms_per_step": spot["self_ms_per_step"]} for spot in hot_spots[:3]]
        named = f"; top Python hot spot {hot_spots[0]['function']} ({ms_words(hot_spots[0]['self_ms_per_step'])} a step)"
        words.append("Python hot spots: " + ", ".join(f"{s['function']} {ms_words(s['self_ms_per_step'])} a step" for s in hot_spots[:3]))
    text = f"Host-bound: a median {ms_words(median)} of each step runs no op and waits for no data ({median / step_p50:.0%} of the median step){named}"
    options = meta.get("options") or {}
    unnamed = "" if hot_spots or options.get("with_stack") or options.get("profile_framework") else ACTIONS["host_work_unnamed"]
    return make_finding("host_work", "host", share_severity(host / step_ms), host, evidence, words, text,
                        unnamed + action("host_work_compiled" if compiled else "host_work", meta.get("framework")))


def runtime_finding(steady: list[Row], step_ms: float, step_p50: float, meta: dict[str, Any]) -> Finding | None:
    """Gaps between the ops of a compiled graph: the runtime's cost per op, which no Python change removes."""
    if not _typical(steady, "runtime", step_p50):
        return None
    runtime, median = stage_figures(steady, "runtime")
    compute = mean_of([r["compute"] for r in steady])
    where = [r["n"] for r in steady if r["runtime"] >= 0.5 * median]
    region = (profile_of(meta.get("framework")) or TORCH).compiled_region
    evidence = {"runtime_ms": round(runtime, 3), "runtime_p50_ms": round(median, 3), "compute_ms": round(compute, 3),
                "step_ms": round(step_ms, 3), "share": round(runtime / step_ms, 4), "steps": ranges(where),
                "margin": _typical_margin(steady, "runtime", step_p50)}
    words = [f"gaps between the ops inside {region} in {steps_words(where)}: mean {ms_words(runtime)}, p50 {ms_words(median)}; "
             f"ops run a mean {ms_words(compute)}"]
    text = f"Runtime overhead: a median {ms_words(median)} of each step lies between the ops inside {region} " \
           f"({median / step_p50:.0%} of the median step)"
    # medium whatever its share: the model's structure, not a mistake in the job (a clean run has no high finding)
    return make_finding("runtime_overhead", "runtime", "medium", runtime, evidence, words, text,
                        action("runtime_overhead", meta.get("framework"), jit_level=meta.get("jit_level") or "not set"))


def compute_finding(steady: list[Row], step_ms: float, step_p50: float, operators: dict[str, Any], meta: dict[str, Any]) -> Finding | None:
    """Ops running half a typical step or more: worth the top op type's share of the op time, what a faster op saves."""
    compute, median = stage_figures(steady, "compute")
    types = (operators or {}).get("types") or []
    if not types or median < 0.5 * step_p50:
        return None
    top = types[0]
    hot = [{"op_type": t["op_type"], "percent": t["percent"], "ms_per_step": round(compute * t["percent"], 3)} for t in types[:5]]
    evidence = {"compute_ms": round(compute, 3), "compute_p50_ms": round(median, 3), "share": round(compute / step_ms, 4),
                "step_ms": round(step_ms, 3), "hot_ops": hot, "margin": margin(median, 0.5 * step_p50)}
    words = [f"ops run a mean {ms_words(compute)} of a mean {ms_words(step_ms)} step",
             "top op types: " + ", ".join(f"{h['op_type']} {h['percent']:.0%} ({ms_words(h['ms_per_step'])} a step)" for h in hot[:3])]
    text = f"Compute-bound: ops run {median / step_p50:.0%} of the median step; {top['op_type']} takes {top['percent']:.0%} of op time"
    return make_finding("hot_ops", "compute", "medium" if top["percent"] >= 0.5 else "low", compute * top["percent"], evidence, words,
                        text, action("hot_ops", meta.get("framework"), amp_level=meta.get("amp_level") or "not recorded"))


def mfu_finding(flops: dict[str, Any] | None, compute_bound: bool) -> Finding | None:
    """Ops reaching under ``LOW_MFU`` of the device's peak, said only where the ops bound the step (``compute_bound``)."""
    mfu = (flops or {}).get("mfu")
    if not mfu:
        return None
    ratio = (mfu.get("unprofiled") or mfu)["ratio"]  # the job's own, where its steps without the profiler were timed on the device
    if not compute_bound or ratio >= LOW_MFU:
        return None
    evidence = {"mfu": ratio, "peak_gflops": mfu["peak_gflops"], "peak_source": mfu["peak_source"], "margin": margin(LOW_MFU, max(ratio, 1e-9))}
    text = f"Low utilisation: the ops reach {ratio:.1%} of {mfu['peak_gflops']:.0f} GFLOPS"
    return make_finding("low_mfu", "utilisation", "low", 0.0, evidence, [f"{ratio:.1%} of a peak of {mfu['peak_gflops']:.0f} GFLOPS "
                                                                    f"({mfu['peak_source']})"], text, action("low_mfu", None))


def communication_finding(steady: list[Row], step_ms: float, step_p50: float) -> Finding | None:
    """Collectives taking a fifth of a typical step or more (and ``MIN_STAKE_MS``)."""
    ms, median = stage_figures(steady, "communication")
    if median < MIN_STAKE_MS or median < 0.2 * step_p50:
        return None
    evidence = {"communication_ms": round(ms, 3), "communication_p50_ms": round(median, 3), "share": round(ms / step_ms, 4),
                "margin": margin(median, max(MIN_STAKE_MS, 0.2 * step_p50))}
    words = [f"collectives take a mean {ms_words(ms)} (p50 {ms_words(median)}) of a mean {ms_words(step_ms)} step"]
    text = f"Communication-bound: collectives take a mean {ms_words(ms)} of a mean {ms_words(step_ms)} step"
    return make_finding("communication", "communication", share_severity(ms / step_ms), ms, evidence, words, text, action("communication", None))


def near_misses(steady: list[Row], step_ms: float, step_p50: float, operators: dict[str, Any], found: set[str], ops_known: bool) -> list[Finding]:
    """The stage findings not made whose figure came within ``NEAR`` of its trigger (margin 1/NEAR to 1): another
    run's noise lifts them over, so the verdict names one that costs about as much as its own (``verdict.basis``)."""
    wait = mean_of([r["wait"] for r in steady])
    candidates = [("data_wait", "data", wait, margin(wait, max(MIN_STAKE_MS, MIN_SHARE * step_ms)))]
    if ops_known:
        candidates += [(STAGE_FINDING[stage], stage, mean_of([r[stage] for r in steady]), _typical_margin(steady, stage, step_p50))
                       for stage in ("host", "runtime")]
        types = operators.get("types") or []
        if types:
            compute, median = stage_figures(steady, "compute")
            candidates.append(("hot_ops", "compute", compute * types[0]["percent"], margin(median, 0.5 * step_p50)))
    return [{"id": finding_id, "category": category, "ms_per_step": round(ms, 1), "at_stake": stake_words(round(ms, 1)), "margin": near}
            for finding_id, category, ms, near in candidates if finding_id not in found and 1 / NEAR <= near < 1]
