"""The verdict: the finding that costs most, by one rule (``RULE``), and how sure it is (``basis``).

A time finding costs its mean time at stake per steady step. A memory growth costs by its consequence
(``consequence``): the step at which it would have taken all the memory left (the machine's available
memory, or its cgroup's limit less its usage where that is less), and the hours until then at the mean
steady step. It heads only when that falls within the job's horizon: its planned steps where the framework
tells them (MindSpore's ``Model.train``: epochs x the dataset's batches), else ``DEFAULT_HORIZON_H`` of
training; beyond it the growth ranks after the time findings and says so. A growth that would not end the
job is a risk to watch, not what limits its speed.

The verdict does not flip on noise unseen: ``basis`` gives the top finding's margin over its own trigger
(``margin`` in its evidence: 1.0 on the line) and the runner-up's cost, the runner-up being a finding of
another category or a cause just under its trigger (a near miss: noise lifts it over in another run); a
runner-up costing ``CLOSE`` or more of the top's, or within the noise (``noise_ms``) of it, is named beside
it (``close_to``): the two are even within the run's noise, and either may win another run.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .findings import Finding

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
DEFAULT_HORIZON_H = 24.0  # a day of training where the job's planned steps are unknown
CLOSE = 0.8  # a runner-up costing this share of the top finding's time or more is named beside it
NEAR = 1.25  # a margin under this: the finding is near its trigger, and the verdict says so
RULE = (f"the finding that costs most: a memory growth that would exhaust the memory left within the job's horizon (its planned "
        f"steps where known, else {DEFAULT_HORIZON_H:.0f} h at the mean steady step) first, then the mean time at stake per steady "
        f"step, then severity; warm-up is never the verdict; a runner-up of another category (a finding, or a cause just under its "
        f"trigger) costing {CLOSE:.0%} or more of the top's time, or within the noise of it, is named beside it")


def _heads(finding: Finding) -> bool:
    """A memory growth that would end the job within its horizon (or whose memory left is unknown)."""
    return finding["category"] == "memory" and bool(finding["evidence"].get("within_horizon", True))


def rank(findings: Sequence[Finding]) -> list[Finding]:
    """The findings by ``RULE``: memory that ends the job, time at stake, then the findings costing no time."""
    return sorted(findings, key=lambda f: (0 if _heads(f) else 1 if f["ms_per_step"] > 0 else 2, -f["ms_per_step"],
                                           SEVERITY_ORDER[f["severity"]]))


def memory_left(samples: Sequence[Mapping[str, Any]], until: int, physical: int | None) -> tuple[int, str] | None:
    """(bytes, where from) the job could still take at its last sample up to ``until`` (ns): the smaller of the
    machine's available memory and its cgroup's room; the machine's memory where neither was recorded."""
    last = next((s for s in reversed(samples) if "avail" in s and s["ts"] <= until), None)
    if last is None:
        return (physical, "the machine's memory (no reading of what was left)") if physical else None
    if last.get("cg_left") is not None and last["cg_left"] < last["avail"]:
        return int(last["cg_left"]), "its cgroup's limit less its usage"
    return int(last["avail"]), "the machine's available memory"


def hours_words(hours: float) -> str:
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.0f} days"


def consequence(finding: Finding, left: tuple[int, str] | None, step_ms: float, last_step: int, planned_steps: int | None) -> None:
    """A memory growth's cost in its evidence and text: when it would exhaust the memory ``left`` at its rate,
    and whether that falls within the job's horizon (``planned_steps`` where known, else ``DEFAULT_HORIZON_H``);
    beyond it, its severity drops to medium. Memory left unknown: it stays a leak within the horizon."""
    evidence = finding["evidence"]
    if left is None:
        finding["text"] += "; the memory left was not recorded"
        return
    room, source = left
    rate = max(evidence["bytes_per_step"], 1)
    steps = room // rate
    hours = steps * step_ms / 3.6e6
    if planned_steps and planned_steps >= last_step:
        horizon, within = f"the job's {planned_steps} planned steps", last_step + steps <= planned_steps
    else:
        horizon, within = f"{DEFAULT_HORIZON_H:.0f} h of training (the job's planned steps unknown)", hours <= DEFAULT_HORIZON_H
    evidence.update(memory_left_bytes=room, memory_left_source=source, exhaust_at_step=last_step + steps,
                    exhaust_after_hours=round(hours, 3), horizon=horizon, within_horizon=within)
    said = f"would exhaust the {room / (1 << 30):.1f} GiB left ({source}) at step {last_step + steps} ({hours_words(hours)} at this rate)"
    finding["evidence_text"] += f"; {said}"
    if within:
        finding["text"] += f"; it {said}, within {horizon}"
    else:
        finding["severity"] = "medium"
        finding["text"] += f"; it {said}, beyond {horizon}, so ranked after the time findings"


def margin(figure: float, line: float) -> float:
    """How far a finding's figure is over its trigger's line: 1.0 on it."""
    return round(figure / line, 2) if line > 0 else float("inf")


def basis(findings: Sequence[Finding], verdict_of: Mapping[str, str], near_misses: Sequence[Finding] = (),
          noise_ms: float = 0.0) -> dict[str, Any] | None:
    """Why the verdict is what it is: ``RULE``, the top finding, its ``cost`` in words and its margin, the runner-up and its
    time over the top's (``runner_up_share``; ``runner_up_margin`` under 1 for a near miss: ``near_misses``, each an id,
    category, ms_per_step, at_stake and margin), and ``close_to`` (another verdict within ``CLOSE`` or ``noise_ms``);
    ``confidence``: clear, close, or near its trigger (its margin under ``NEAR``). None where no finding gives a verdict."""
    ranked = [f for f in findings if f["category"] in verdict_of]
    if not ranked:
        return None
    top = ranked[0]
    out: dict[str, Any] = {"rule": RULE, "finding": top["id"], "cost": f"{top['at_stake']} at stake", "margin": top["evidence"].get("margin"),
                           "confidence": "clear"}
    if top["category"] == "memory":
        step = top["evidence"].get("exhaust_at_step")
        out["cost"] = f"would exhaust memory at step {step}" if step else "a leak, the memory left unknown"
    others = [f for f in list(ranked[1:]) + list(near_misses) if f["ms_per_step"] > 0 and f["category"] != top["category"]]
    if others:
        runner = max(others, key=lambda f: f["ms_per_step"])
        share = runner["ms_per_step"] / top["ms_per_step"] if top["ms_per_step"] > 0 else 0.0
        out.update(runner_up=runner["id"], runner_up_cost=f"{runner['at_stake']} at stake", runner_up_share=round(share, 2))
        if runner in near_misses:
            out["runner_up_margin"] = runner["margin"]
        if top["ms_per_step"] > 0 and (share >= CLOSE or top["ms_per_step"] - runner["ms_per_step"] < noise_ms):
            out.update(close_to=verdict_of[runner["category"]], confidence="close")
    if out["confidence"] == "clear" and out["margin"] is not None and out["margin"] < NEAR:
        out["confidence"] = "near its trigger"
    return out


def words(verdict: str, why: Mapping[str, Any] | None) -> str:
    """The verdict line: "data-bound (mean 60.5 ms/step at stake; next runtime_overhead, mean 23.5 ms/step at stake)"."""
    if not why:
        return verdict
    if why.get("close_to"):
        return f"{verdict}, close to {why['close_to']} ({why['cost']} against {why['runner_up_cost']}: either may lead another run)"
    near = f"; {why['margin']:.2f}x its trigger" if why["confidence"] == "near its trigger" else ""
    then = f"; next {why['runner_up']}, {why['runner_up_cost']}" if why.get("runner_up") else ""
    return f"{verdict} ({why['cost']}{near}{then})"
