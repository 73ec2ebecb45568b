"""The advisor: findings, each with the time it costs per step, its evidence and what to change.

A finding is a dict: ``id``, ``category`` (one of ``CATEGORIES``), ``severity`` (high / medium / low),
``ms_per_step`` (how much a steady step would shrink without the cause; 0 where the cause costs no
step time, e.g. memory growth), ``evidence`` (numbers, steps, ops, functions) and ``action`` in the
words of the framework in use. Findings come ordered by severity, then time at stake; the verdict
is ``VERDICT_OF`` the first finding's category (warm-up never: it is a one-off cost).

Each step is split into data wait, compute (some op running: the union of the ops' intervals outside
the wait; annotation ranges and Python calls are not ops, see ``operators.op_kinds``) and host time
(the rest: Python between and around the ops, in the loop or inside the model's forward). Every
diagnosis but warm-up reads only the steady steps: the window's warm-up steps are ``warmup.detect``'s.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import frameworks
from .intervals import length_within, merge
from .operators import OP, op_kinds

Finding = dict[str, Any]
Row = dict[str, Any]

CATEGORIES = ("data", "host", "compute", "communication", "memory", "jitter", "warm-up", "straggler", "utilisation")
VERDICT_OF = {"data": "data-bound", "host": "host-bound", "compute": "compute-bound", "communication": "communication-bound",
              "straggler": "straggler-bound", "jitter": "jittery", "memory": "memory-growth", "utilisation": "underutilised"}
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}

MIN_STAKE_MS = 5.0  # below this a data or host cost is noise on a shared machine, whatever its share
MIN_SHARE = 0.10  # ... and below this share of the step it is not worth a change
JITTER_MIN_MS = 20.0  # a slow step is at least this much and 3 MADs above the median
JITTER_MIN_BEATS = 4  # slow steps on the period's beat
MEMORY_MIN_BYTES_PER_STEP = 256 << 10
MEMORY_MIN_GROWTH = 32 << 20
LOW_MFU = 0.10

# Actions in any framework's words; the framework-specific ones are its profile's advice (frameworks/<name>/profile.py).
ACTIONS = {
    "periodic_pause": "something runs every {period} steps (garbage collection, checkpointing, logging, evaluation): "
                      "make it rarer or asynchronous (gc.freeze() after setup, save checkpoints in a thread)",
    "warm_up": "one-off cost of compilation and first allocations; profile from a later step "
               "(start_step / schedule) so it does not skew the steady numbers",
    "cpu_contention": "other processes keep the machine's CPUs busy while the training waits on the host: "
                      "run fewer jobs or data workers per machine, or pin the training to its own cores",
    "low_mfu": "the ops reach a small share of the device's peak: raise the batch size, use lower "
               "precision, or larger fused ops",
    "straggler": "rank {rank} is slower ({kind} time): give it the same data shard size and host work as the others, "
                 "check its machine for other load, or rebalance the work across ranks",
    "communication": "communication takes much of the step: overlap it with compute (DDP bucket size, "
                     "gradient accumulation), or reduce what is exchanged (lower precision, fewer syncs)",
}


def action(finding_id: str, framework: str | None, **fields: Any) -> str:
    """The action for a finding in the words of the framework (a run naming none reads PyTorch's), else the generic one."""
    words = frameworks.profile_of(framework) or frameworks.TORCH
    return (words.advice.get(finding_id) or ACTIONS.get(finding_id, "")).format(**fields)


def _median(values: list[float]) -> float:
    return float(np.median(values)) if values else 0.0


def _mad(values: list[float]) -> float:
    """Median absolute deviation, scaled to a standard deviation for normal data."""
    if not values:
        return 0.0
    array = np.asarray(values, dtype=np.float64)
    return float(1.4826 * np.median(np.abs(array - np.median(array))))


def step_breakdown(data: Any, rows: list[Row]) -> list[Row]:
    """Per step (ms): total, data wait, compute (some op running, outside the wait), host (the rest) and
    communication (time in collectives, inside compute or host). Compute is the union of the ops'
    intervals (ops started in the step before and still running included) clipped to the step, less
    its part inside the step's waits: a few vectorised look-ups for all steps (``intervals``)."""
    ops = data.ops
    if data.op_count:
        select = (op_kinds(data) == OP) & ~ops.device_is("cuda")
        starts, durations = (ops["start"], ops["dur"]) if select.all() else (ops["start"][select], ops["dur"][select])
        busy_starts, busy_ends = merge(starts, starts + durations)
    else:
        busy_starts = busy_ends = np.zeros(0, dtype=np.int64)
    lo = np.array([row["start"] for row in rows], dtype=np.int64)
    hi = np.array([row["end"] for row in rows], dtype=np.int64)
    compute = length_within(busy_starts, busy_ends, lo, np.maximum(hi, lo))
    steps = {s["n"]: s for s in data.window_steps}
    owner, wait_lo, wait_hi = [], [], []
    for i, row in enumerate(rows):
        for a, b in steps.get(row["n"], {}).get("waits") or ():
            owner.append(i)
            wait_lo.append(min(max(a, row["start"]), row["end"]))
            wait_hi.append(max(min(b, row["end"]), wait_lo[-1]))
    np.subtract.at(compute, owner, length_within(busy_starts, busy_ends, wait_lo, wait_hi))  # ops run while fetching data are the wait's
    in_collectives: dict[int, float] = {}
    for call in data.comm:
        in_collectives[call.get("step", 0)] = in_collectives.get(call.get("step", 0), 0.0) + call["dur"] / 1e6
    out = []
    for row, ns in zip(rows, compute.tolist()):
        total, wait, busy_ms = row["total"] / 1e6, row.get("wait", 0) / 1e6, float(ns) / 1e6
        out.append({"n": row["n"], "start": row["start"], "end": row["end"], "total": total, "wait": wait, "compute": busy_ms,
                    "host": max(total - wait - busy_ms, 0.0), "communication": in_collectives.get(row["n"], 0.0)})
    return out


def _ranges(numbers: list[int]) -> list[list[int]]:
    """Step numbers as [first, last] runs."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return runs


def _finding(finding_id: str, category: str, severity: str, ms: float, evidence: dict[str, Any], text: str, act: str) -> Finding:
    return {"id": finding_id, "category": category, "severity": severity, "ms_per_step": round(float(ms), 3),
            "evidence": evidence, "text": text, "action": act}


def _share_severity(share: float) -> str:
    return "high" if share >= 0.3 else "medium"


def data_finding(steady: list[Row], step_ms: float, data_prep: dict[str, Any], framework: str | None) -> Finding | None:
    wait = _median([r["wait"] for r in steady])
    if wait < MIN_STAKE_MS or wait < MIN_SHARE * step_ms:
        return None
    slow = [r["n"] for r in steady if r["wait"] >= 0.5 * wait]
    evidence: dict[str, Any] = {"wait_ms": round(wait, 3), "step_ms": round(step_ms, 3), "share": round(wait / step_ms, 4),
                                "steps": _ranges(slow)}
    pipeline = (data_prep or {}).get("pipeline") or {}
    if pipeline.get("bottleneck"):
        evidence["dataset_op"] = pipeline["bottleneck"]
    if data_prep.get("empty_queue_ratio") is not None:
        evidence["empty_queue_ratio"] = round(data_prep["empty_queue_ratio"], 4)
    where = f", dataset op {evidence['dataset_op']['op_type']} is the pipeline's bottleneck" if "dataset_op" in evidence else ""
    text = f"Data-bound: each step waits {wait:.1f} ms for data ({wait / step_ms:.0%} of a {step_ms:.1f} ms step){where}"
    return _finding("data_wait", "data", _share_severity(wait / step_ms), wait, evidence, text, action("data_wait", framework))


def host_finding(steady: list[Row], step_ms: float, hot_spots: list[Row], framework: str | None) -> Finding | None:
    host = _median([r["host"] for r in steady])
    if host < MIN_STAKE_MS or host < MIN_SHARE * step_ms:
        return None
    evidence: dict[str, Any] = {"host_ms": round(host, 3), "step_ms": round(step_ms, 3), "share": round(host / step_ms, 4),
                                "compute_ms": round(_median([r["compute"] for r in steady]), 3),
                                "steps": _ranges([r["n"] for r in steady if r["host"] >= 0.5 * host])}
    named = ""
    if hot_spots:
        evidence["hot_spots"] = [{"function": spot["function"], "self_ms_per_step": spot["self_ms_per_step"]} for spot in hot_spots[:3]]
        named = f"; top Python hot spot {hot_spots[0]['function']} ({hot_spots[0]['self_ms_per_step']:.1f} ms a step)"
    text = f"Host-bound: {host:.1f} ms of each step runs no op and waits for no data ({host / step_ms:.0%} of the step){named}"
    return _finding("host_work", "host", _share_severity(host / step_ms), host, evidence, text, action("host_work", framework))


def compute_finding(steady: list[Row], step_ms: float, operators: dict[str, Any], steps: int, framework: str | None) -> Finding | None:
    compute = _median([r["compute"] for r in steady])
    types = (operators or {}).get("types") or []
    if not types or compute < 0.5 * step_ms:
        return None
    top = types[0]
    per_step = top["total_ms"] / max(steps, 1)
    evidence = {"compute_ms": round(compute, 3), "share": round(compute / step_ms, 4), "step_ms": round(step_ms, 3),
                "hot_ops": [{"op_type": t["op_type"], "percent": t["percent"], "ms_per_step": round(t["total_ms"] / max(steps, 1), 3)}
                            for t in types[:5]]}
    text = f"Compute-bound: ops run {compute / step_ms:.0%} of the step; {top['op_type']} takes {top['percent']:.0%} of op time"
    return _finding("hot_ops", "compute", "medium" if top["percent"] >= 0.5 else "low", per_step, evidence, text,
                    action("hot_ops", framework))


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


def jitter_finding(steady: list[Row]) -> Finding | None:
    """Slow steps recurring with a period, in the step time or in its host part (where GC, checkpoints
    and logging land; on a shared machine the ops' own time is the noisier series)."""
    found = None
    for key, label in (("total", "step time"), ("host", "host time")):
        values = [r[key] for r in steady]
        median, mad = _median(values), _mad(values)
        over = {r["n"]: max(r[key] - median, 0.0) for r in steady}
        slow = sorted(n for n, ms in over.items() if ms >= max(JITTER_MIN_MS, 3 * mad))
        period, beat, score = _periodic(over, slow)
        if period and (found is None or score > found[4]):
            found = (period, beat, [over[n] for n in beat], label, score)
    if found is None:
        return None
    period, beat, excess, label, _ = found
    ms = sum(excess) / len(steady)
    step_ms = _median([r["total"] for r in steady])
    evidence = {"period": period, "steps": beat, "excess_ms": round(_median(excess), 3), "series": label, "median_step_ms": round(step_ms, 3)}
    text = f"Jitter: every {period} steps a step runs {_median(excess):.0f} ms longer ({label}; steps {', '.join(map(str, beat[:6]))}" \
           f"{'...' if len(beat) > 6 else ''})"
    return _finding("periodic_pause", "jitter", "high" if ms >= MIN_SHARE * step_ms else "medium", ms, evidence, text,
                    action("periodic_pause", None, period=period))


def memory_finding(data: Any, steady: list[Row], framework: str | None) -> Finding | None:
    """A steady rise of memory step after step (allocator bytes with profile_memory, else RSS)."""
    if len(steady) < 4:
        return None
    first, last = steady[0], steady[-1]
    allocated = [(m["ts"], m.get("allocated", 0)) for m in data.mem]
    samples = allocated or [(c["ts"], c["rss"]) for c in data.cpu]
    starts = np.array([r["start"] for r in steady], dtype=np.int64)
    inside = [(t, v) for t, v in samples if first["start"] <= t <= last["end"]]
    if len(inside) < 4:
        return None
    times = np.array([t for t, _ in inside], dtype=np.int64)
    values = np.array([v for _, v in inside], dtype=np.float64)
    step_of = np.searchsorted(starts, times, side="right") - 1
    numbers = np.array([r["n"] for r in steady], dtype=np.float64)[step_of]
    if np.ptp(numbers) == 0:
        return None
    slope, intercept = np.polyfit(numbers, values, 1)
    fitted = slope * numbers + intercept
    spread = float(((values - values.mean()) ** 2).sum()) or 1.0
    r2 = 1.0 - float(((values - fitted) ** 2).sum()) / spread
    profile = frameworks.profile_of(framework)
    if not allocated and profile is not None and profile.profiler_bytes_per_event and data.op_count:
        # a profiler that holds each event in this process until its session stops (torch.profiler): RSS grows
        # with the events recorded per step, which is the profiler's buffer, not a leak of the job's
        recorded = np.count_nonzero(np.isin(data.ops["step"], [r["n"] for r in steady])) / len(steady)
        slope -= recorded * profile.profiler_bytes_per_event
    growth = slope * (numbers[-1] - numbers[0])
    if slope < MEMORY_MIN_BYTES_PER_STEP or growth < MEMORY_MIN_GROWTH or r2 < 0.8:
        return None
    evidence = {"bytes_per_step": int(slope), "growth_bytes": int(growth), "r2": round(r2, 4),
                "steps": [[int(numbers[0]), int(numbers[-1])]], "source": "framework allocator" if allocated else "process RSS"}
    text = f"Memory grows {slope / (1 << 20):.1f} MiB every step (steps {int(numbers[0])}-{int(numbers[-1])}, " \
           f"{growth / (1 << 20):.0f} MiB in all, {evidence['source']}): a leak signature"
    return _finding("memory_growth", "memory", "high", 0.0, evidence, text, action("memory_growth", framework))


def warmup_finding(rows: list[Row], warm: list[int], steady_ms: float) -> Finding | None:
    if not warm:
        return None
    extra = [r["total"] / 1e6 - steady_ms for r in rows if r["n"] in warm]
    evidence = {"steps": _ranges(warm), "extra_ms": round(sum(extra), 3), "steady_step_ms": round(steady_ms, 3)}
    text = f"Warm-up: step{'s' if len(warm) > 1 else ''} {', '.join(map(str, warm))} took {sum(extra):.0f} ms more than steady steps"
    return _finding("warm_up", "warm-up", "low", 0.0, evidence, text, action("warm_up", None))


def cpu_contention_finding(cpu: dict[str, Any] | None, cpus: int, host_or_data: bool) -> Finding | None:
    """Others' CPU use matters only when the training waits on the host or data, and is not its own."""
    keys = ("process_user_mean", "process_sys_mean", "machine_busy_mean")
    if not cpu or not host_or_data or any(cpu.get(key) is None for key in keys):  # None: no sample long enough
        return None
    own = (cpu["process_user_mean"] + cpu["process_sys_mean"]) / max(cpus, 1)
    others = cpu["machine_busy_mean"] - own
    if cpu["machine_busy_mean"] < 80 or others < 50:
        return None
    evidence = {"machine_busy_percent": cpu["machine_busy_mean"], "process_percent_of_machine": round(own, 2),
                "others_percent_of_machine": round(others, 2)}
    text = f"CPU contention: the machine was {cpu['machine_busy_mean']:.0f} % busy, {others:.0f} % of it not this training"
    return _finding("cpu_contention", "host", "low", 0.0, evidence, text, action("cpu_contention", None))


def mfu_finding(flops: dict[str, Any] | None, compute_bound: bool) -> Finding | None:
    mfu = (flops or {}).get("mfu")
    if not mfu or not compute_bound or mfu["ratio"] >= LOW_MFU:
        return None
    evidence = {"mfu": mfu["ratio"], "peak_gflops": mfu["peak_gflops"], "peak_source": mfu["peak_source"]}
    text = f"Low utilisation: the ops reach {mfu['ratio']:.1%} of {mfu['peak_gflops']:.0f} GFLOPS"
    return _finding("low_mfu", "utilisation", "low", 0.0, evidence, text, action("low_mfu", None))


def communication_finding(steady: list[Row], step_ms: float) -> Finding | None:
    ms = _median([r["communication"] for r in steady])
    if ms < MIN_STAKE_MS or ms < 0.2 * step_ms:
        return None
    evidence = {"communication_ms": round(ms, 3), "share": round(ms / step_ms, 4)}
    text = f"Communication-bound: collectives take {ms:.1f} ms of a {step_ms:.1f} ms step"
    return _finding("communication", "communication", _share_severity(ms / step_ms), ms, evidence, text, action("communication", None))


def straggler_finding(summaries: list[dict[str, Any]]) -> Finding | None:
    """The rank whose own work per step (its steady step minus its time in collectives, where the others
    wait for it) exceeds the other ranks' median by 5 ms and 10 %."""
    own = {}
    for summary in summaries:
        breakdown = summary.get("step_breakdown_ms") or {}
        if breakdown.get("total") is not None:
            own[summary.get("rank_id")] = breakdown["total"] - (breakdown.get("communication") or 0.0)
    if len(own) < 2:
        return None
    slow = max(own, key=lambda rank: own[rank])
    others = _median([ms for rank, ms in own.items() if rank != slow])
    extra = own[slow] - others
    if extra < MIN_STAKE_MS or extra < MIN_SHARE * max(others, 1e-9):
        return None
    by_rank = {s.get("rank_id"): s for s in summaries}
    breakdown = by_rank[slow]["step_breakdown_ms"]
    evidence = {"rank": slow, "extra_ms": round(extra, 3), "own_work_ms": {str(r): round(ms, 3) for r, ms in sorted(own.items())},
                "slow_rank_breakdown_ms": breakdown,
                "others_in_communication_ms": {str(r): s["step_breakdown_ms"].get("communication") for r, s in by_rank.items() if r != slow}}
    kind = max(("host", "compute", "wait"), key=lambda key: breakdown.get(key) or 0.0)
    text = f"Straggler: rank {slow} works {extra:.0f} ms more per step than the others (mostly {kind}), who wait for it in collectives"
    framework = by_rank[slow].get("framework")
    return _finding("straggler", "straggler", _share_severity(extra / max(others + extra, 1e-9)), extra, evidence, text,
                    action("straggler", framework, rank=slow, kind=kind))


def _folded(frame: str) -> str:
    """"function (file:line)" -> "function (file)": a function's lines as one row."""
    return frame.rsplit(":", 1)[0] + ")" if frame.endswith(")") and ":" in frame else frame


def hot_spots(data: Any, steady: list[Row], limit: int = 20) -> list[Row]:
    """Python time sampled in the consecutive steps ``steady``, as py-spy shows it: "function (file:line)",
    the line the function was executing, by self (innermost frame) and total (anywhere on the stack) time; a
    sample lasts until the next one. A function sampled at several lines also has one row "function (file)"
    of those lines folded (``lines``: how many), after the rows of the lines."""
    if not data.stacks or not steady:
        return []
    records = sorted(data.stacks, key=lambda s: s["ts"])
    first, last = steady[0]["start"], steady[-1]["end"]
    steady_numbers = {r["n"] for r in steady}
    starts = np.array([s["start"] for s in data.window_steps], dtype=np.int64)
    numbers = [s["n"] for s in data.window_steps]
    own: dict[str, float] = {}
    total: dict[str, float] = {}
    lines: dict[str, set[str]] = {}
    for record, following in zip(records, records[1:]):
        begin, end = max(record["ts"], first), min(following["ts"], last)
        frames = record.get("frames") or []
        if end <= begin or not frames:
            continue
        index = int(np.searchsorted(starts, begin, side="right")) - 1
        if index < 0 or numbers[index] not in steady_numbers:
            continue
        span = (end - begin) / 1e6
        innermost = frames[-1]
        function = _folded(innermost)
        lines.setdefault(function, set()).add(innermost)
        for name in {innermost, function}:
            own[name] = own.get(name, 0.0) + span
        for name in set(frames) | {_folded(frame) for frame in frames}:
            total[name] = total.get(name, 0.0) + span
    at_lines = sorted(((name, ms) for name, ms in own.items() if name not in lines or name in lines[name]), key=lambda item: -item[1])
    folded = sorted(((name, ms) for name, ms in own.items() if name in lines and len(lines[name]) > 1), key=lambda item: -item[1])
    count = len(steady)
    ranked = at_lines[:limit] + folded[:limit]  # the lines first: the top hot spot names the line
    return [dict({"function": name, "self_ms": round(ms, 3), "total_ms": round(total[name], 3),
                  "self_ms_per_step": round(ms / count, 3), "steps": [steady[0]["n"], steady[-1]["n"]]},
                 **({"lines": len(lines[name])} if name in lines else {})) for name, ms in ranked]


def advise(data: Any, results: dict[str, Any], warmup: list[Row]) -> dict[str, Any]:
    """Findings (ordered), the verdict, the per-step breakdown medians and the Python hot spots;
    ``warmup`` is the window's warm-up steps (``warmup.detect``)."""
    rows = results["step_trace"]["rows"]
    framework = data.meta.get("framework")
    warm = [w["step"] for w in warmup]
    breakdown = step_breakdown(data, rows)
    steady = [r for r in breakdown if r["n"] not in warm] or breakdown
    if not steady:
        return {"findings": [], "verdict": None, "breakdown_ms": None, "hot_spots": []}
    step_ms = _median([r["total"] for r in steady])
    spots = hot_spots(data, steady)
    warm_spots = hot_spots(data, [r for r in breakdown if r["n"] in warm])
    found = [data_finding(steady, step_ms, results.get("data_prep") or {}, framework),
             host_finding(steady, step_ms, spots, framework) if data.op_count else None,  # no ops recorded: compute unknown
             compute_finding(steady, step_ms, results.get("operators") or {}, len(rows), framework),
             jitter_finding(steady), memory_finding(data, steady, framework), warmup_finding(rows, warm, step_ms),
             communication_finding(steady, step_ms)]
    waiting = any(f and f["category"] in ("data", "host") for f in found)
    compute_bound = any(f and f["id"] == "hot_ops" for f in found)
    found += [cpu_contention_finding(results.get("cpu"), int(data.meta.get("cpus") or 1), waiting),
              mfu_finding(results.get("flops"), compute_bound)]
    findings = sorted((f for f in found if f), key=lambda f: (SEVERITY_ORDER[f["severity"]], -f["ms_per_step"]))
    return {"findings": findings, "verdict": verdict(findings), "hot_spots": spots + warm_spots,
            "breakdown_ms": {key: round(_median([r[key] for r in steady]), 3) if data.op_count or key in ("total", "wait", "communication") else None
                             for key in ("total", "wait", "compute", "host", "communication")}}


def verdict(findings: list[Finding]) -> str:
    """The first finding's category through ``VERDICT_OF``; warm-up is skipped; no finding: balanced."""
    return next((VERDICT_OF[f["category"]] for f in findings if f["category"] in VERDICT_OF), "balanced")


def suggestions(findings: list[Finding]) -> list[dict[str, Any]]:
    """The older ``suggestions`` list (id, text, evidence) the existing readers show, from the findings."""
    return [{"id": f["id"], "text": f"{f['text']}: {f['action']}.", "evidence": f["evidence"]} for f in findings]
