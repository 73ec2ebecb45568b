"""The headline: ``summary_{r}.json``, the diagnosis's findings and verdict (``diagnosis.advice``), and the
short table printed on stderr at exit. ``suggestions`` (id, text, evidence) is the findings' text for
older readers.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import log
from ..contract import readers
from ..contract.columns import IDLE_WORDS, PYTHON_HOT_SPOTS_HEADER
from ..contract.names import PYTHON_HOT_SPOTS, SUMMARY
from ..contract.pages import File, Page
from ..contract.summary import NO_END_RECORD, SUMMARY_VERSION, Summary
from ..options import not_applicable
from ..records import KIND
from ..writers import write_csv, write_json
from . import communication, warmup
from .diagnosis import advice, verdict
from .diagnosis.breakdown import collective_ms
from .stats import percentiles

if TYPE_CHECKING:
    from ..records import End, Pause, Probe
    from .run import Context
    from .rundata import RunData


def machine_speed(probes: Sequence[Probe]) -> dict[str, Any] | None:
    """The machine's speed over the run from its two probes (``collectors.cpu.speed_probe``): the host's
    loop speed (the better of the two), times the share of the job's runnable time it spent on a CPU
    rather than waiting for one between them (1 without schedstat). Runs on one idle host score alike."""
    by_time = {p.get("at"): p for p in probes if p.get("mips")}
    if not by_time:
        return None
    mips = max(p["mips"] for p in by_time.values())
    start: Probe | dict[str, Any] = by_time.get("start", {})
    end: Probe | dict[str, Any] = by_time.get("end", {})
    share = 1.0
    if "run_ns" in start and "run_ns" in end:
        ran, waited = end["run_ns"] - start["run_ns"], end["wait_ns"] - start["wait_ns"]
        share = ran / (ran + waited) if ran + waited > 0 else 1.0
    return {"host_mips": mips, "cpu_share": round(share, 4), "speed": round(mips * share, 3),
            "how": "pure-Python loop speed (million iterations/s, best of start and end) x the share of the job's runnable time "
                   "spent on a CPU, not waiting for one (schedstat)"}


def build(data: RunData, ctx: Context, results: dict[str, Any]) -> Summary:
    window = results["step_trace"]["rows"]
    rows = warmup.steady(window, ctx.warmup)  # every figure here is of the steady steps
    totals = [r["total"] / 1e6 for r in rows]
    step_ms = percentiles(totals)
    stages_ms: dict[str, float] = {}
    share: dict[str, float] = {}
    if rows:
        for key, column in (("iteration_interval", "interval"), ("fp_and_bp", "fp_and_bp"), ("tail", "tail")):
            stages_ms[key] = round(float(np.mean([r[column] for r in rows])) / 1e6, 4)
        total = sum(stages_ms.values()) or 1.0
        share = {k: round(v / total, 4) for k, v in stages_ms.items()}
    waits = [r["wait"] / 1e6 for r in rows]
    comm = results.get("communication")
    diagnosis = advice.advise(data, results, ctx.warmup)
    ops = results["operators"]["types"]
    all_steps = [(s["end"] - s["start"]) / 1e6 for s in data.steps]
    meta = data.meta
    summary: Summary = {
        "summary_version": SUMMARY_VERSION, "rank_id": ctx.rank, "framework": meta.get("framework"), "device_target": meta.get("device_target", "CPU"),
        "profiler_dir": ctx.profiler_dir, "steps_profiled": len(window), "steps_total": len(data.steps),
        "step_range": [window[0]["n"], window[-1]["n"]] if window else None, "steady_steps": len(rows), "step_time_ms": step_ms,
        "run_step_time_ms": percentiles(all_steps), "stages_ms": stages_ms, "stage_share": share,
        "step_points": {key: results["step_trace"][key] for key in ("fp_start", "bp_end", "fp_rule", "bp_rule")},
        "data_wait_ms": percentiles(waits), "top_op_types": [{"op_type": o["op_type"], "total_ms": o["total_ms"], "percent": o["percent"]} for o in ops[:20]],
        "ops_recorded": data.op_count, "flops": results.get("flops"), "shapes": data.shapes, "memory": results.get("memory"),
        "device": results.get("device"), "cpu": results.get("cpu"),
        "communication": comm, "verdict": diagnosis["verdict"], "verdict_basis": diagnosis["verdict_basis"],
        "findings": diagnosis["findings"],
        "suggestions": advice.suggestions(diagnosis["findings"]),
        "step_breakdown_ms": diagnosis["breakdown_ms"], "step_breakdown_mean_ms": diagnosis["breakdown_mean_ms"], "python_hot_spots": diagnosis["hot_spots"],
        "annotations": results["operators"].get("annotations", []),
        "timeline": results.get("timeline"), "notes": list(ctx.notes) + [n.get("text", "") for n in data.notes] + _pause_notes(data.pauses)
                 + _lost_notes(data.end) + diagnosis["notes"],
        "windows": [{k: v for k, v in w.items() if k not in (KIND, "event")} for w in data.windows if w.get("event") == "collected"],
        "not_applicable": not_applicable(data.options, meta.get("device_target", "CPU")),
        "end_reason": (data.end or {}).get("reason", NO_END_RECORD),
        "host": meta.get("host"), "rank_size": meta.get("rank_size", 1), "collectives": communication.collectives(data),
        "per_step_ms": dict(results["step_trace"]["per_step_ms"], **_per_step_cluster(data, window)),
        "warmup_steps": ctx.warmup, "warmup_rule": warmup.RULE, "machine_speed": machine_speed(data.probes),
        "exports": (results.get("export") or {}).get("dirs", []),
    }
    device = results.get("device")
    if device:
        if device.get("top_ops"):  # a GPU profile leads with the device's time, by the op that launched it
            summary["top_op_types"] = [{k: o[k] for k in ("op_type", "total_ms", "percent")} for o in device["top_ops"]]
        if device.get("memory", {}).get("peak_allocated_mb") is not None:
            summary["memory"] = dict(summary["memory"] or {}, peak_allocated_mb=device["memory"]["peak_allocated_mb"],
                                     peak_reserved_mb=device["memory"]["peak_reserved_mb"], source=device["memory"]["source"])
    if diagnosis["hot_spots"]:
        write_csv(ctx.path(PYTHON_HOT_SPOTS), PYTHON_HOT_SPOTS_HEADER,
                  [[*spot["steps"], spot["function"], spot["self_ms"], spot["total_ms"], spot["self_ms_per_step"]] for spot in diagnosis["hot_spots"]])
    write_json(ctx.path(SUMMARY), summary, ctx.pretty)
    return summary


def _per_step_cluster(data: RunData, window: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Per window step, what the cluster step compares across ranks: time in collectives (ms) and the step's end (epoch ns)."""
    in_collectives = collective_ms(data.comm)
    return {"communication": [round(in_collectives.get(r["n"], 0.0), 4) for r in window], "end_ns": [r["end"] for r in window]}


def _lost_notes(end: End | None) -> list[str]:
    """Steps whose raw records a failed write (a full disk) lost: their time and ops are in no figure here."""
    lost = (end or {}).get("lost_steps")
    return [f"the raw records of {lost} steps were lost ({end.get('lost_because')}): the figures are of the other steps"] if end and lost else []


def _pause_notes(pauses: Sequence[Pause]) -> list[str]:
    """Time the agent spent on itself (profiler start-ups, torch.profiler hand-overs), said once per kind, with the
    profiler's own stop and start apart from the agent's reading of its events where the pauses say it."""
    kinds: dict[str, list[tuple[int, int | None]]] = {}  # each kind's pauses: (span ns, the profiler's own ns or None)
    for pause in pauses:
        kinds.setdefault(pause.get("what", "agent pause"), []).append((pause["end"] - pause["start"], pause.get("profiler_ns")))
    notes = []
    for what, spans in kinds.items():
        total = sum(span for span, _ in spans)
        split = ""
        if all(own is not None for _, own in spans):
            own = sum(own or 0 for _, own in spans)
            split = f" ({own / 1e9:.2f} s in the profiler's own stop and start, {max(total - own, 0) / 1e9:.2f} s reading and freeing its events)"
        notes.append(f"{what} x{len(spans)}: {total / 1e9:.2f} s in all{split}, the agent's own (left out of the findings)")
    return notes


def print_table(summary: Summary) -> None:
    """The short stderr table a person or a CI log reads at a glance."""
    say = log.say
    say(f"profiled {summary['steps_profiled']} of {summary['steps_total']} steps (rank {summary['rank_id']}, "
        f"{summary['framework'] or 'no framework'} on {summary['device_target']}) -> {summary['profiler_dir']}")
    step = summary["step_time_ms"]
    if summary["warmup_steps"]:
        say("  warm-up     " + ", ".join(f"step {w['step']} {w['ms']:.1f} ms" for w in summary["warmup_steps"])
            + " (left out of the figures below)")
    if step:
        say(f"  step time   mean {step['mean']:.2f} ms   p50 {step['p50']:.2f} ms   p90 {step['p90']:.2f} ms   max {step['max']:.2f} ms")
        share, stages = summary["stage_share"], summary["stages_ms"]
        say(f"  stages      mean interval {stages['iteration_interval']:.2f} ms ({share['iteration_interval']:.0%}) | "
            f"fwd+bwd {stages['fp_and_bp']:.2f} ms ({share['fp_and_bp']:.0%}) | tail {stages['tail']:.2f} ms ({share['tail']:.0%})")
    device = summary.get("device") or {}
    if device.get("device_step_ms"):
        timed = device["device_step_ms"]
        say(f"  on the GPU  step mean {timed['mean']:.2f} ms   p50 {timed['p50']:.2f} ms (CUDA events, {device['device_steps_timed']} steps)")
    if "busy_share" in device:
        idle = ", ".join(f"{IDLE_WORDS[c]} {ms:.1f} ms" for c, ms in device["idle_ms"].items() if ms >= 0.05)
        say(f"  GPU busy    {device['busy_share']:.0%} of the window's steps ({device['busy_ms']:.1f} of {device['step_ms']:.1f} ms); idle {idle or 'never'}")
    if device.get("memory", {}).get("peak_allocated_mb") is not None:
        say(f"  GPU memory  peak allocated {device['memory']['peak_allocated_mb']:.0f} MiB, reserved {device['memory']['peak_reserved_mb']:.0f} MiB "
            f"of {device['memory']['total_mb']:.0f} MiB")
    if summary["top_op_types"]:
        label = "top kernels" if device.get("top_ops") else "top ops    "
        say(f"  {label} " + ", ".join(f"{o['op_type'][:60]} {o['percent']:.0%}" for o in summary["top_op_types"][:4]))
    mfu = (summary["flops"] or {}).get("mfu")
    if mfu:
        outside = f"; {mfu['unprofiled']['ratio']:.2%} over the {mfu['unprofiled']['steps']} steps without the profiler" if mfu.get("unprofiled") else ""
        say(f"  MFU         {mfu['ratio']:.2%} of {mfu['peak_gflops']:.0f} GFLOPS ({mfu['peak_source']}){outside}")
    if summary["verdict"]:
        say(f"  verdict     {verdict.words(summary['verdict'], summary.get('verdict_basis'))}")
    shown = [f for f in summary["findings"] if f["id"] != "warm_up" or not summary["warmup_steps"]]  # the warm-up line says it
    for finding in shown[:3]:
        say(f"  finding     {finding['at_stake']} at stake: {finding['text']}")
    for note in summary["notes"] + summary["not_applicable"]:
        say(f"  note        {note}")


PAGE = Page("summary", (File("summary", (SUMMARY,), readers.read_json),))
