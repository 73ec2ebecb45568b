"""The headline: ``summary_{r}.json``, the verdict, tuning suggestions with the numbers behind each,
and the short table printed on stderr at exit.

Suggestion thresholds are MindInsight's (step interval > 0.5 ms, empty data queue > 30 %, CPU busy
> 80 %, pipeline queue usage 0.8 / 0.6) plus ours where the data supports them.
"""
import numpy as np

from .. import contract, log
from ..options import not_applicable
from ..writers import write_json
from . import warmup

PIPELINE_ADVICE = {
    "GeneratorOp": "increase num_parallel_workers of the GeneratorDataset or replace it with MindRecordDataset",
    "MapOp": "increase num_parallel_workers of the map; if it maps a Python function, optimise that function",
    "BatchOp": "adjust prefetch_size (mindspore.dataset.config.set_prefetch_size)",
}


def _percentiles(values):
    if not values:
        return None
    array = np.asarray(values, dtype=np.float64)
    return {"mean": round(float(array.mean()), 4), "p50": round(float(np.percentile(array, 50)), 4),
            "p90": round(float(np.percentile(array, 90)), 4), "max": round(float(array.max()), 4)}


def verdict(share, wait_share, comm_share):
    """One word a CI log can carry: which stage owns the step time."""
    if wait_share >= 0.3:
        return "data-bound"
    if comm_share >= 0.3:
        return "communication-bound"
    if share.get("fp_and_bp", 0) >= 0.6:
        return "compute-bound"
    if share.get("iteration_interval", 0) - wait_share + share.get("tail", 0) >= 0.4:
        return "host-bound"
    return "balanced"


def suggestions(stages_ms, wait_ms, data_prep, cpu, ops, step_ms):
    out = []
    interval = stages_ms.get("iteration_interval", 0.0)
    if interval > 0.5:
        out.append({"id": "step_interval", "text": f"Step interval averages {interval:.2f} ms (threshold 0.5 ms): the step waits "
                    f"for data or host work before computing; {wait_ms:.2f} ms of it is the wait for data. Check data preparation.",
                    "evidence": {"iteration_interval_ms": interval, "data_wait_ms": wait_ms}})
    ratio = data_prep.get("empty_queue_ratio")
    if ratio is not None and ratio > 0.3:
        out.append({"id": "empty_queue", "text": f"The data queue was empty at {ratio:.0%} of fetches (threshold 30 %): "
                    "data preparation cannot keep up; speed up the dataset pipeline.", "evidence": {"empty_queue_ratio": ratio}})
    if cpu and cpu["machine_busy_mean"] > 80:
        out.append({"id": "cpu_busy", "text": f"The machine's CPUs were {cpu['machine_busy_mean']:.0f} % busy on average (threshold 80 %): "
                    "reduce worker threads or move work off the host.", "evidence": {"machine_busy_mean": cpu["machine_busy_mean"]}})
    pipeline = data_prep.get("pipeline") or {}
    slow = pipeline.get("bottleneck")
    if slow:
        advice = PIPELINE_ADVICE.get(slow["op_type"], "increase its num_parallel_workers")
        usage = {op["op_type"]: op["queue_usage"] for op in pipeline.get("ops", [])}
        out.append({"id": "pipeline_bottleneck", "text": f"Dataset op {slow['op_type']} (id {slow['op_id']}) looks like the pipeline's "
                    f"bottleneck by queue usage: {advice}.", "evidence": {"queue_usage": usage}})
    if step_ms and wait_ms / step_ms["mean"] > 0.1:
        out.append({"id": "data_wait", "text": f"Waiting for data takes {wait_ms:.1f} ms of a {step_ms['mean']:.1f} ms step "
                    f"({wait_ms / step_ms['mean']:.0%}): use more DataLoader / dataset workers or prefetch.",
                    "evidence": {"data_wait_ms": wait_ms, "step_time_ms": step_ms["mean"]}})
    if ops and ops[0]["percent"] > 0.5:
        out.append({"id": "dominant_op", "text": f"One op type, {ops[0]['op_type']}, takes {ops[0]['percent']:.0%} of op time: "
                    "it is the first place to optimise.", "evidence": {"op_type": ops[0]["op_type"], "percent": ops[0]["percent"]}})
    if step_ms and step_ms["p90"] > 1.5 * step_ms["p50"]:
        out.append({"id": "jitter", "text": f"Step time p90 {step_ms['p90']:.1f} ms is over 1.5x p50 {step_ms['p50']:.1f} ms: "
                    "some steps are much slower; look at those steps in the timeline.", "evidence": {"p50": step_ms["p50"], "p90": step_ms["p90"]}})
    return out


def machine_speed(probes):
    """The machine's speed over the run from its two probes (``collectors.cpu.speed_probe``): the host's
    loop speed (the better of the two), times the share of the job's runnable time it spent on a CPU
    rather than waiting for one between them (1 without schedstat). Runs on one idle host score alike."""
    by_time = {p.get("at"): p for p in probes if p.get("mips")}
    if not by_time:
        return None
    mips = max(p["mips"] for p in by_time.values())
    start, end = by_time.get("start", {}), by_time.get("end", {})
    share = 1.0
    if "run_ns" in start and "run_ns" in end:
        ran, waited = end["run_ns"] - start["run_ns"], end["wait_ns"] - start["wait_ns"]
        share = ran / (ran + waited) if ran + waited > 0 else 1.0
    return {"host_mips": mips, "cpu_share": round(share, 4), "speed": round(mips * share, 3),
            "how": "pure-Python loop speed (million iterations/s, best of start and end) x the share of the job's runnable time "
                   "spent on a CPU, not waiting for one (schedstat)"}


def build(data, ctx, results):
    window = results["step_trace"]["rows"]
    rows = warmup.steady(window, ctx.warmup)  # every figure here is of the steady steps
    totals = [r["total"] / 1e6 for r in rows]
    step_ms = _percentiles(totals)
    stages_ms, share = {}, {}
    if rows:
        for key, column in (("iteration_interval", "interval"), ("fp_and_bp", "fp_and_bp"), ("tail", "tail")):
            stages_ms[key] = round(float(np.mean([r[column] for r in rows])) / 1e6, 4)
        total = sum(stages_ms.values()) or 1.0
        share = {k: round(v / total, 4) for k, v in stages_ms.items()}
    waits = [r["wait"] / 1e6 for r in rows]
    wait_ms = float(np.mean(waits)) if waits else 0.0
    comm = results.get("communication")
    comm_share = (comm["mean_ms"] / step_ms["mean"]) if comm and step_ms else 0.0
    ops = results["operators"]["types"]
    all_steps = [(s["end"] - s["start"]) / 1e6 for s in data.steps]
    meta = data.meta
    summary = {
        "rank_id": ctx.rank, "framework": meta.get("framework"), "device_target": meta.get("device_target", "CPU"),
        "profiler_dir": ctx.profiler_dir, "steps_profiled": len(window), "steps_total": len(data.steps),
        "step_range": [window[0]["n"], window[-1]["n"]] if window else None, "steady_steps": len(rows), "step_time_ms": step_ms,
        "run_step_time_ms": _percentiles(all_steps), "stages_ms": stages_ms, "stage_share": share,
        "step_points": {key: results["step_trace"][key] for key in ("fp_start", "bp_end", "fp_rule", "bp_rule")},
        "data_wait_ms": _percentiles(waits), "top_op_types": [{"op_type": o["op_type"], "total_ms": o["total_ms"], "percent": o["percent"]} for o in ops[:20]],
        "ops_recorded": data.op_count, "flops": results.get("flops"), "memory": results.get("memory"), "cpu": results.get("cpu"),
        "communication": comm, "verdict": verdict(share, wait_ms / step_ms["mean"] if step_ms else 0.0, comm_share) if rows else None,
        "suggestions": suggestions(stages_ms, wait_ms, results["data_prep"], results.get("cpu"), ops, step_ms),
        "timeline": results.get("timeline"), "notes": list(ctx.notes) + [n.get("text", "") for n in data.notes] + _pause_notes(data.pauses),
        "windows": [{k: v for k, v in w.items() if k not in ("k", "event")} for w in data.windows if w.get("event") == "collected"],
        "not_applicable": not_applicable(meta.get("options") or {}, meta.get("device_target", "CPU")),
        "end_reason": (data.end or {}).get("reason", "killed (no end record)"),
        "per_step_ms": results["step_trace"]["per_step_ms"],
        "warmup_steps": ctx.warmup, "warmup_rule": warmup.RULE, "machine_speed": machine_speed(data.probes),
    }
    write_json(ctx.path(contract.SUMMARY), summary, ctx.pretty)
    return summary


def _pause_notes(pauses):
    """Time the agent spent between steps (torch.profiler hand-overs): outside every step, said once."""
    if not pauses:
        return []
    seconds = sum(p["end"] - p["start"] for p in pauses) / 1e9
    return [f"{pauses[0].get('what', 'agent pause')} x{len(pauses)}: {seconds:.2f} s in all, between steps (in no step's time)"]


def print_table(summary):
    """The short stderr table a person or a CI log reads at a glance."""
    say = log.say
    say(f"profiled {summary['steps_profiled']} of {summary['steps_total']} steps (rank {summary['rank_id']}, "
        f"{summary['framework'] or 'no framework'} on {summary['device_target']}) -> {summary['profiler_dir']}")
    step = summary["step_time_ms"]
    if summary["warmup_steps"]:
        say("  warm-up     " + ", ".join(f"step {w['step']} {w['ms']:.1f} ms" for w in summary["warmup_steps"])
            + " (left out of the figures below)")
    if step:
        say(f"  step time   p50 {step['p50']:.2f} ms   p90 {step['p90']:.2f} ms   max {step['max']:.2f} ms")
        share, stages = summary["stage_share"], summary["stages_ms"]
        say(f"  stages      interval {stages['iteration_interval']:.2f} ms ({share['iteration_interval']:.0%}) | "
            f"fwd+bwd {stages['fp_and_bp']:.2f} ms ({share['fp_and_bp']:.0%}) | tail {stages['tail']:.2f} ms ({share['tail']:.0%})")
    if summary["top_op_types"]:
        say("  top ops     " + ", ".join(f"{o['op_type']} {o['percent']:.0%}" for o in summary["top_op_types"][:4]))
    mfu = (summary["flops"] or {}).get("mfu")
    if mfu:
        say(f"  MFU         {mfu['ratio']:.2%} of {mfu['peak_gflops']:.0f} GFLOPS ({mfu['peak_source']})")
    if summary["verdict"]:
        say(f"  verdict     {summary['verdict']}")
    for item in summary["suggestions"][:3]:
        say(f"  suggestion  {item['text']}")
    for note in summary["notes"] + summary["not_applicable"]:
        say(f"  note        {note}")
