"""The diagnosis of one rank: its findings ranked, the verdict, the step breakdown's figures and the Python hot spots
(``advise``, what the summary carries).

Findings come ranked by what they cost (``verdict.RULE``: a memory growth by when it would exhaust the
memory left); the verdict is ``VERDICT_OF`` the first finding's category (warm-up never: it is a one-off cost), with
``verdict.basis`` saying why and how sure. Every diagnosis but warm-up reads only the steady steps: the
window's warm-up steps are ``warmup``'s.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import gpu_rules
from .breakdown import STAGES, compiled_regions, graph_mode, mean_of, median_of, stage_figures, step_breakdown
from .data_wait import cpu_contention_finding, data_finding
from .findings import MIN_STAKE_MS, VERDICT_OF, Finding
from .hot_spots import hot_spots
from .memory_growth import judge_memory
from .patterns import attribute, beat, even_on_the_device, jitter_finding, warmup_finding
from .stage_rules import communication_finding, compute_finding, host_finding, mfu_finding, near_misses, runtime_finding
from .verdict import basis, consequence, memory_left, rank
from .words import stake_words

if TYPE_CHECKING:
    from ...contract.summary import WarmupStep


def _within_the_step(findings: list[Finding], step_ms: float) -> None:
    """The findings' times at stake, in order, never add up to more than the mean steady step: a later
    one keeps only what the earlier ones left (its evidence keeps its own figures)."""
    left = step_ms
    for finding in findings:
        if finding["ms_per_step"] > left:
            finding["ms_per_step"] = round(max(left, 0.0), 1)
            finding["at_stake"] = stake_words(finding["ms_per_step"])
        left -= finding["ms_per_step"]


def advise(data: Any, results: dict[str, Any], warmup: Sequence[WarmupStep]) -> dict[str, Any]:
    """Findings (ordered), the verdict, the per-step breakdown (means and medians), the Python hot
    spots and notes on what went unjudged; ``warmup`` is the window's warm-up steps (``warmup.detect``)."""
    rows = results["step_trace"]["rows"]
    meta = data.meta
    framework = meta.get("framework")
    warm = [w["step"] for w in warmup]
    breakdown = step_breakdown(data, rows)
    steady = [r for r in breakdown if r["n"] not in warm] or breakdown
    if not steady:
        return {"findings": [], "verdict": None, "verdict_basis": None, "breakdown_ms": None, "breakdown_mean_ms": None, "hot_spots": [],
                "notes": []}
    step_ms, step_p50 = stage_figures(steady, "total")
    spots = hot_spots(data, steady)
    warm_spots = hot_spots(data, [r for r in breakdown if r["n"] in warm])
    stages = [data_finding(steady, step_ms, results.get("data_prep") or {}, meta, results.get("cpu"))]
    device = results.get("device") or {}
    if device:  # a GPU: its own timeline says what bounds the step, not the host's clock
        stages += gpu_rules.findings(device, meta)
    if data.op_count and "busy_share" not in device:  # no ops recorded: compute, runtime and host unknown
        stages += [host_finding(steady, step_ms, step_p50, spots, meta, graph_mode(data) or bool(len(compiled_regions(data)))),
                   runtime_finding(steady, step_ms, step_p50, meta),
                   compute_finding(steady, step_ms, step_p50, results.get("operators") or {}, meta)]
    found = [f for f in stages if f]
    pattern = beat(steady)
    if pattern is not None and even_on_the_device(pattern, device):
        pattern = None
    if pattern is not None:
        attribute(pattern, found, steady, meta)
        if pattern["stage"] != "wait" or not any(f["id"] == "data_wait" for f in found):
            found += [f for f in [jitter_finding(steady, pattern, meta)] if f]
    memory, unjudged = judge_memory(data, steady, framework)
    if memory is not None:
        consequence(memory, memory_left(data.cpu, steady[-1]["end"], meta.get("memory_bytes")), step_ms, steady[-1]["n"], meta.get("planned_steps"))
    found += [f for f in (memory, warmup_finding(breakdown, warm, step_ms), communication_finding(steady, step_ms, step_p50)) if f]
    waiting = any(f["category"] in ("data", "host") for f in found)
    compute_bound = any(f["id"] in ("hot_ops", "gpu_bound") for f in found)
    found += [f for f in (cpu_contention_finding(results.get("cpu"), waiting), mfu_finding(results.get("flops"), compute_bound)) if f]
    findings = rank(found)
    _within_the_step(findings, step_ms)
    known = ("wait", "communication") if not data.op_count else STAGES + ("communication",)
    host_stages = bool(data.op_count) and "busy_share" not in device  # on a GPU the host's stages decide nothing
    missed = near_misses(steady, step_ms, step_p50, results.get("operators") or {}, {f["id"] for f in found}, host_stages)
    return {"findings": findings, "verdict": verdict(findings), "verdict_basis": basis(findings, VERDICT_OF, missed, MIN_STAKE_MS),
            "hot_spots": spots + warm_spots, "notes": [unjudged] if unjudged else [],
            "breakdown_ms": {key: round(median_of([r[key] for r in steady]), 3) if key in known or key == "total" else None
                             for key in ("total",) + STAGES + ("communication",)},
            "breakdown_mean_ms": {key: round(mean_of([r[key] for r in steady]), 3) if key in known or key == "total" else None
                                  for key in ("total",) + STAGES + ("communication",)}}


def verdict(findings: list[Finding]) -> str:
    """The first finding's category through ``VERDICT_OF``; warm-up is skipped; no finding: balanced."""
    return next((VERDICT_OF[f["category"]] for f in findings if f["category"] in VERDICT_OF), "balanced")


def suggestions(findings: list[Finding]) -> list[dict[str, Any]]:
    """The older ``suggestions`` list (id, text, evidence) the existing readers show, from the findings."""
    return [{"id": f["id"], "text": f"{f['text']}: {f['action']}.", "evidence": f["evidence"]} for f in findings]
