"""The advisor: findings, each with the time it costs per step, its evidence and what to change.

A finding is a dict: ``id``, ``category`` (one of ``CATEGORIES``), ``severity`` (high / medium / low),
``ms_per_step`` (what a steady step would save on average without the cause: the mean over the steady
steps; 0 where the cause costs no step time, e.g. memory growth), ``at_stake`` (that figure in words,
the one string every reader prints), ``evidence`` (the structured numbers, steps, ops, functions),
``evidence_text`` (the same in words) and ``action`` in the words of the framework in use, from the
run's recorded settings; ``evidence["margin"]`` is how far a finding is over its trigger (1.0 on it).
Findings come ranked by what they cost (``verdict.RULE``: a memory growth by when it would exhaust the
memory left); the verdict is ``VERDICT_OF`` the first finding's category (warm-up never: it is a one-off cost), with
``verdict.basis`` saying why and how sure.

Each step is split into stages (``STAGES``): data wait, compute (some op running: the union of the
ops' intervals outside the wait; annotation ranges and Python calls are not ops, see
``operators.op_kinds``), runtime (gaps between ops inside a compiled graph: MindSpore GRAPH mode,
torch.compile regions), pause (the agent's own: the profiler's start-up) and host (the rest: Python
between and around the ops). A stage's finding triggers on its typical (median) cost, data waits on
their mean (a pipeline that cannot keep up delivers in bursts), and each is worth its mean. Slow steps
are attributed to stages before a pattern is called jitter (``_attribute``): recurring waits are the
data finding's evidence; recurring host, op or runtime time is periodic work, jitter, which the
stage's finding then leaves out.
Every diagnosis but warm-up reads only the steady steps: the window's warm-up steps are ``warmup``'s.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..contract.frameworks import TORCH, profile_of
from .intervals import length_within, merge
from .operators import ANNOTATION, OP, op_kinds
from .stats import median
from .verdict import NEAR, basis, consequence, margin, memory_left, rank

if TYPE_CHECKING:
    from ..contract.summary import WarmupStep
    from ..records import Comm

Finding = dict[str, Any]
Row = dict[str, Any]

CATEGORIES = ("data", "host", "compute", "runtime", "communication", "memory", "jitter", "warm-up", "straggler", "utilisation",
              "device", "launch", "sync")
VERDICT_OF = {"data": "data-bound", "host": "host-bound", "compute": "compute-bound", "runtime": "runtime-bound",
              "device": "GPU-bound", "launch": "launch-bound", "sync": "sync-bound",
              "communication": "communication-bound", "straggler": "straggler-bound", "jitter": "jittery", "memory": "memory-growth",
              "utilisation": "underutilised"}
STAGES = ("wait", "compute", "runtime", "host", "pause")  # a step's time, split without overlap
STAGE_FINDING = {"wait": "data_wait", "compute": "hot_ops", "runtime": "runtime_overhead", "host": "host_work"}
STAGE_WORDS = {"wait": "data wait", "compute": "op time", "runtime": "runtime gaps between compiled ops", "host": "host time",
               "pause": "the profiler's own pauses"}

MIN_STAKE_MS = 5.0  # below this a data, host or runtime cost is noise on a shared machine, whatever its share
MIN_SHARE = 0.10  # ... and below this share of the step it is not worth a change
JITTER_MIN_MS = 20.0  # a slow step is at least this much and 3 MADs above the median
JITTER_MIN_BEATS = 4  # slow steps on the period's beat
MEMORY_MIN_BYTES_PER_STEP = 256 << 10
MEMORY_MIN_GROWTH = 32 << 20
LOW_MFU = 0.10
MIN_LOADING_CORES = 0.5  # the CPU the data workers may always take, however busy the machine

# Actions in any framework's words; the framework-specific ones are its profile's advice (contract/frameworks.py).
ACTIONS = {
    "periodic_pause": "something runs every {period} steps (garbage collection, checkpointing, logging, evaluation): "
                      "make it rarer or asynchronous (gc.freeze() after setup, save checkpoints in a thread)",
    "warm_up": "one-off cost of compilation and first allocations; profile from a later step "
               "(start_step / schedule) so it does not skew the steady numbers",
    "host_work_unnamed": "the evidence names no Python work: profile again with \"with_stack\": true in MS_PROFILER_OPTIONS "
                         "(msprof-agent run -o with_stack=true) to have the functions and lines taking the time named, then ",
    "cpu_contention": "other processes keep the machine's CPUs busy while the training waits on the host: "
                      "run fewer jobs per machine, or pin the training to its own cores",
    "low_mfu": "the ops reach a small share of the device's peak: raise the batch size, use lower "
               "precision, or larger fused ops",
    "straggler": "rank {rank} is slower ({kind} time): give it the same data shard size and host work as the others, "
                 "check its machine for other load, or rebalance the work across ranks",
    "slow_node": "every rank on {host} is slower: check that machine (other jobs, CPU frequency, thermal limits, its "
                 "data source or disk), or move its ranks to another node",
    "hang": "find what rank(s) {ranks} did instead of entering the collective of step {step}: their last lines on stderr, an "
            "exception, a stuck data loader or a branch only they took; give the process group a timeout (init_process_group(timeout=...)) "
            "so the job fails fast",
    "communication": "communication takes much of the step: overlap it with compute (DDP bucket size, "
                     "gradient accumulation), or reduce what is exchanged (lower precision, fewer syncs)",
}


def action(finding_id: str, framework: str | None, **fields: Any) -> str:
    """The action for a finding in the words of the framework (a run naming none reads PyTorch's), else the generic one."""
    words = profile_of(framework) or TORCH
    return (words.advice.get(finding_id) or ACTIONS.get(finding_id, "")).format(**fields)


def _median(values: list[float]) -> float:
    return median(values) if values else 0.0


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def _mad(values: list[float]) -> float:
    """Median absolute deviation, scaled to a standard deviation for normal data."""
    if not values:
        return 0.0
    middle = median(values)
    return 1.4826 * median(abs(float(v) - middle) for v in values)


def collective_ms(comm: Sequence[Comm]) -> dict[int, float]:
    """Time (ms) in recorded collective calls, per step: where a rank waits for its peers."""
    per_step: dict[int, float] = {}
    for call in comm:
        per_step[call.get("step", 0)] = per_step.get(call.get("step", 0), 0.0) + call["dur"] / 1e6
    return per_step


def compiled_regions(data: Any) -> np.ndarray:
    """torch.compile's ranges (n x 2, ns, merged) where the ops of a compiled graph run; empty elsewhere."""
    profile = profile_of(data.meta.get("framework"))
    prefixes = profile.compiled_region_prefixes if profile else ()
    if not data.op_count or not prefixes:
        return np.zeros((0, 2), dtype=np.int64)
    names = data.op_names.astype(str)
    wanted = np.array([name.startswith(prefixes) for name in names.tolist()], dtype=bool)
    select = wanted[data.ops["name_id"]] & (op_kinds(data) == ANNOTATION)
    if not select.any():
        return np.zeros((0, 2), dtype=np.int64)
    starts = data.ops["start"][select]
    ends = starts + data.ops["dur"][select]
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.maximum.accumulate(ends[order])
    firsts = np.flatnonzero(np.concatenate(([True], starts[1:] > ends[:-1])))
    return np.stack([starts[firsts], np.maximum.reduceat(ends, firsts)], axis=1)


def graph_mode(data: Any) -> bool:
    """MindSpore's step runs as one compiled graph (GRAPH mode): from the compiled call's start (the
    step's forward start) to its last op, or to its return where the step ends there (the step record's
    ``compiled_call``), the time no op runs is the runtime's (launch, between ops, the wait for the last)."""
    profile = profile_of(data.meta.get("framework"))
    return bool(profile and profile.graph_context_mode and data.meta.get("context_mode") == profile.graph_context_mode)


def step_breakdown(data: Any, rows: list[Row]) -> list[Row]:
    """Per step (ms): total and its stages (``STAGES``: data wait, compute, runtime, host, pause), plus
    communication (time in collectives, inside compute or host). Compute is the union of the ops'
    intervals (ops started in the step before and still running included) clipped to the step, less
    its part inside the step's waits: a few vectorised look-ups for all steps (``intervals``)."""
    ops = data.ops
    if data.op_count:
        select = (op_kinds(data) == OP) & ~ops.on_device
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
    runtime = _runtime_ns(data, rows, steps, busy_starts, busy_ends, lo, hi)
    in_collectives = collective_ms(data.comm)
    out = []
    for row, ns, gaps in zip(rows, compute.tolist(), runtime.tolist()):
        waits = steps.get(row["n"], {}).get("waits") or ()
        paused = data.paused_ns(row["start"], row["end"]) / 1e6
        total, busy_ms, runtime_ms = row["total"] / 1e6, float(ns) / 1e6, float(gaps) / 1e6
        wait = max(row.get("wait", 0) / 1e6 - sum(data.paused_ns(a, b) for a, b in waits) / 1e6, 0.0)
        out.append({"n": row["n"], "start": row["start"], "end": row["end"], "total": total, "wait": wait, "compute": busy_ms,
                    "runtime": runtime_ms, "pause": paused, "host": max(total - wait - busy_ms - runtime_ms - paused, 0.0),
                    "communication": in_collectives.get(row["n"], 0.0)})
    return out


def _runtime_ns(data: Any, rows: list[Row], steps: dict[int, Any], busy_starts: np.ndarray, busy_ends: np.ndarray,
                lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per step, the time inside a compiled graph that no op runs (ns). MindSpore GRAPH: from the compiled
    call's start (the forward start) to its last op, or to its return where the step ends there; torch:
    inside torch.compile's regions."""
    runtime = np.zeros(len(rows), dtype=np.int64)
    if not len(busy_starts):
        return runtime
    if graph_mode(data) or any(s.get("compiled_call") for s in steps.values()):
        first = np.searchsorted(busy_ends, lo, side="right")  # the first op still running at or after the step's start
        last = np.searchsorted(busy_starts, hi, side="left") - 1  # the last op started before its end
        for i, row in enumerate(rows):
            step = steps.get(row["n"], {})
            if first[i] > last[i] or not (graph_mode(data) or step.get("compiled_call")):
                continue
            begin = max(row["start"], min(step.get("fp") or busy_starts[first[i]], busy_starts[first[i]]))
            end = row["end"] if step.get("compiled_call") else min(int(busy_ends[last[i]]), row["end"])
            if end > begin:
                runtime[i] = end - begin - int(length_within(busy_starts, busy_ends, [begin], [end])[0])
        return runtime
    regions = compiled_regions(data)
    for a, b in regions.tolist():  # few: one or two a step
        for i in range(int(np.searchsorted(hi, a, side="right")), int(np.searchsorted(lo, b, side="left"))):
            begin, end = max(a, int(lo[i])), min(b, int(hi[i]))
            if end > begin:
                runtime[i] += end - begin - int(length_within(busy_starts, busy_ends, [begin], [end])[0])
    return runtime


def ranges(numbers: list[int]) -> list[list[int]]:
    """Step numbers as [first, last] runs."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return runs


def steps_words(numbers: list[int] | list[list[int]], limit: int = 8) -> str:
    """Step numbers (or [first, last] runs) as "step 4" / "steps 3, 5, 7-40", the first ``limit`` runs."""
    flat = sorted({n for item in numbers for n in (range(item[0], item[1] + 1) if isinstance(item, list) else [item])})
    runs = ranges(flat)
    words = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    more = f" and {len(runs) - limit} more runs" if len(runs) > limit else ""
    return ("step " if len(flat) == 1 else "steps ") + ", ".join(words) + more


def ms_words(ms: float) -> str:
    """A duration in words with its unit: "850 us", "41.2 ms", "1.73 s"."""
    if abs(ms) < 1:
        return f"{ms * 1000:.0f} us"
    return f"{ms:.1f} ms" if abs(ms) < 1000 else f"{ms / 1000:.2f} s"


def stake_words(ms: float) -> str:
    """A finding's time at stake as every reader prints it (exit table, report, viewer): the steady steps' mean."""
    return f"mean {ms:.1f} ms/step"


def _finding(finding_id: str, category: str, severity: str, ms: float, evidence: dict[str, Any], words: list[str],
             text: str, act: str) -> Finding:
    ms = round(float(ms), 1)  # the figure every reader shows, to the tenth of a ms
    return {"id": finding_id, "category": category, "severity": severity, "ms_per_step": ms, "at_stake": stake_words(ms),
            "evidence": evidence, "evidence_text": "; ".join(words), "text": text, "action": act}


def _share_severity(share: float) -> str:
    return "high" if share >= 0.3 else "medium"


def _stage_figures(steady: list[Row], key: str) -> tuple[float, float]:
    """(mean, median) of a stage over the steady steps."""
    values = [r[key] for r in steady]
    return _mean(values), _median(values)


def _typical(steady: list[Row], key: str, step_p50: float) -> bool:
    """A stage has a finding when it costs a typical step (its median) MIN_STAKE_MS and MIN_SHARE of it:
    a cost of only some steps is a pattern (jitter), not a stage's."""
    return _typical_margin(steady, key, step_p50) >= 1.0


def _typical_margin(steady: list[Row], key: str, step_p50: float) -> float:
    """``_typical``'s figure over its line: 1.0 on it."""
    return margin(_median([r[key] for r in steady]), max(MIN_STAKE_MS, MIN_SHARE * step_p50))


def workers_needed(batch_ms: float, consume_ms: float) -> int:
    """Workers that make one batch each ``batch_ms`` keep up with a step consuming one every ``consume_ms``."""
    return max(1, math.ceil(batch_ms / max(consume_ms, 1e-3)))


def _data_action(meta: dict[str, Any], wait: float, step_ms: float, bottleneck: str | None,
                 cpu_share: float | None, others_cores: float) -> tuple[str, list[str], dict[str, Any]]:
    """From the data loader's recorded settings (meta ``data_settings``): what to set, from what to what, with
    the arithmetic. Data-bound, w workers deliver one batch a step: a batch takes w steps to make in one (w = 0:
    the wait itself); a step takes one every (step - wait). The cores bound only the loading's CPU part
    (``cpu_share``, data_prep's): loading that waits (a disk, the network) needs workers, not cores; the cores
    other processes kept busy (``others_cores``) are not the workers'."""
    framework = meta.get("framework")
    settings = meta.get("data_settings") or {}
    if not settings:
        return action("data_wait_unknown", framework), [], {}
    profile = profile_of(framework) or TORCH
    cpus = int(meta.get("cpus") or 1)
    free = max(cpus - 1 - others_cores, 0.0) if cpu_share is not None else max(cpus - 1, 1)  # beside the training process
    workers = int(settings.get(profile.workers_setting) or 0)
    consume = max(step_ms - wait, 1e-3)
    batch = workers * step_ms if workers else wait
    needed = workers_needed(batch, consume)
    share = 1.0 if cpu_share is None else max(cpu_share, 0.0)  # unmeasured: as if each worker kept a core busy
    # loading that waits overlaps its waits at little CPU: it gets half a core's worth of workers even on a full machine
    affordable = math.floor(max(free, MIN_LOADING_CORES) / share) if share > 0 else needed
    advised = min(needed, affordable)
    loading = (f"the loading runs on a CPU {share:.0%} of its time and waits the rest (a disk, the network, a busy CPU), so "
               f"{advised} worker{'s' if advised > 1 else ''} keep{'' if advised > 1 else 's'} ~{advised * share:.1f} of the {cpus} "
               f"cores busy" if cpu_share is not None else f"{cpus} cores here")
    fields = dict(settings, workers=workers, needed=needed, advised=advised, batch=ms_words(batch), consume=ms_words(consume),
                  cpus=cpus, free=f"{free:.1f}".removesuffix(".0"), loading=loading,
                  others=f" (other processes keep ~{others_cores:.1f} busy)" if others_cores >= 0.5 else "",
                  op=bottleneck or settings.get("op") or "the dataset's slow op")
    fits = needed <= affordable
    act = action("data_wait" if fits else "data_wait_cores" if advised <= workers else "data_wait_cores_raise", framework, **fields)
    if workers and settings.get("persistent_workers") is False:
        act += action("data_wait_persistent", framework)
    words = [", ".join(f"{key}={value}" for key, value in settings.items()),
             f"a batch takes ~{ms_words(batch)} to make and a step consumes one every {ms_words(consume)}"]
    if cpu_share is not None:
        words.append(f"the loading's CPU time is {cpu_share:.0%} of its wall time ({'CPU-bound' if cpu_share >= 0.5 else 'waiting'})")
    said = {"loading_cpu_share": cpu_share, "workers_needed": needed, "workers_advised": advised if advised > workers else None}
    return act, words, said


def data_finding(steady: list[Row], step_ms: float, data_prep: dict[str, Any], meta: dict[str, Any],
                 cpu: dict[str, Any] | None = None) -> Finding | None:
    """Waits for data, judged on their mean: a pipeline that cannot keep up makes every step wait or,
    with workers, every few steps wait longer (``_attribute``)."""
    wait, median = _stage_figures(steady, "wait")
    if wait < MIN_STAKE_MS or wait < MIN_SHARE * step_ms:
        return None
    slow = [r["n"] for r in steady if r["wait"] >= 0.5 * wait]
    evidence: dict[str, Any] = {"wait_ms": round(wait, 3), "wait_p50_ms": round(median, 3), "step_ms": round(step_ms, 3),
                                "share": round(wait / step_ms, 4), "steps": ranges(slow), "margin": margin(wait, max(MIN_STAKE_MS, MIN_SHARE * step_ms))}
    words = [f"waits in {steps_words(slow)}: mean {ms_words(wait)}, p50 {ms_words(median)} of a mean {ms_words(step_ms)} step"]
    pipeline = (data_prep or {}).get("pipeline") or {}
    bottleneck = None
    if pipeline.get("bottleneck"):
        evidence["dataset_op"] = pipeline["bottleneck"]
        bottleneck = f"{pipeline['bottleneck'].get('op_type')} (op {pipeline['bottleneck'].get('op_id')})"
        words.append(f"the pipeline's bottleneck is dataset op {bottleneck}")
    if data_prep.get("empty_queue_ratio") is not None:
        evidence["empty_queue_ratio"] = round(data_prep["empty_queue_ratio"], 4)
        words.append(f"the data queue was empty in {data_prep['empty_queue_ratio']:.0%} of the fetches")
    act, said, sized = _data_action(meta, wait, step_ms, bottleneck, data_prep.get("loading_cpu_share"), others_cores(cpu, meta))
    evidence.update((key, value) for key, value in sized.items() if value is not None)
    where = f", dataset op {bottleneck} is the pipeline's bottleneck" if bottleneck else ""
    text = f"Data-bound: each step waits a mean {ms_words(wait)} for data ({wait / step_ms:.0%} of a mean {ms_words(step_ms)} step){where}"
    return _finding("data_wait", "data", _share_severity(wait / step_ms), wait, evidence, words + said, text, act)


def host_finding(steady: list[Row], step_ms: float, step_p50: float, hot_spots: list[Row], meta: dict[str, Any],
                 compiled: bool) -> Finding | None:
    if not _typical(steady, "host", step_p50):
        return None
    host, median = _stage_figures(steady, "host")
    where = [r["n"] for r in steady if r["host"] >= 0.5 * median]
    compute = _mean([r["compute"] for r in steady])
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
    return _finding("host_work", "host", _share_severity(host / step_ms), host, evidence, words, text,
                    unnamed + action("host_work_compiled" if compiled else "host_work", meta.get("framework")))


def runtime_finding(steady: list[Row], step_ms: float, step_p50: float, meta: dict[str, Any]) -> Finding | None:
    """Gaps between the ops of a compiled graph: the runtime's cost per op, which no Python change removes."""
    if not _typical(steady, "runtime", step_p50):
        return None
    runtime, median = _stage_figures(steady, "runtime")
    compute = _mean([r["compute"] for r in steady])
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
    return _finding("runtime_overhead", "runtime", "medium", runtime, evidence, words, text,
                    action("runtime_overhead", meta.get("framework"), jit_level=meta.get("jit_level") or "not set"))


def compute_finding(steady: list[Row], step_ms: float, step_p50: float, operators: dict[str, Any], meta: dict[str, Any]) -> Finding | None:
    compute, median = _stage_figures(steady, "compute")
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
    return _finding("hot_ops", "compute", "medium" if top["percent"] >= 0.5 else "low", compute * top["percent"], evidence, words,
                    text, action("hot_ops", meta.get("framework"), amp_level=meta.get("amp_level") or "not recorded"))


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
        median, mad = _median(values), _mad(values)
        over = {r["n"]: max(r[key] - median, 0.0) for r in steady}
        slow = sorted(n for n, ms in over.items() if ms >= max(JITTER_MIN_MS, 3 * mad))
        period, on_beat, score = _periodic(over, slow)
        if period and (found is None or score > found["score"]):
            found = {"period": period, "steps": on_beat, "excess": [over[n] for n in on_beat], "series": label, "score": score}
    if found is None:
        return None
    by_step = {r["n"]: r for r in steady}
    medians = {stage: _median([r.get(stage, 0.0) for r in steady]) for stage in STAGES}
    split = {stage: sum(max(by_step[n].get(stage, 0.0) - medians[stage], 0.0) for n in found["steps"]) for stage in STAGES}
    found["stage"] = max(split, key=lambda stage: split[stage]) if any(split.values()) else "host"
    found["excess_by_stage_ms"] = {stage: round(ms / len(found["steps"]), 3) for stage, ms in split.items() if ms > 0}
    return found


def pattern_words(found: dict[str, Any], meta: dict[str, Any]) -> str:
    """A beat as evidence in words: "every 2nd step waits 80.3 ms more (data wait; steps 4, 6, 8-20)"."""
    period, excess = found["period"], _median(found["excess"])
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
    step_ms = _mean([r["total"] for r in steady])
    evidence = {"period": period, "steps": on_beat, "excess_ms": round(_median(excess), 3), "series": found["series"],
                "stage": found.get("stage"), "excess_by_stage_ms": found.get("excess_by_stage_ms"), "step_ms": round(step_ms, 3)}
    text = f"Jitter: every {period} steps a step runs {ms_words(_median(excess))} longer ({found['series']}; {steps_words(on_beat, 6)})"
    words = [pattern_words(found, meta or {}) if found.get("stage") else f"{steps_words(on_beat)} run longer",
             f"{ms_words(sum(excess))} in all over {len(steady)} steady steps"]
    return _finding("periodic_pause", "jitter", "high" if ms >= MIN_SHARE * step_ms else "medium", ms, evidence, words, text,
                    action("periodic_pause", None, period=period))


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
    in_use = [(c["ts"], c["heap"]) for c in data.cpu if "heap" in c]
    if in_use:
        netted = any("heap_before" in b for b in data.buffers)
        words = "heap in use (C and Python's small objects)"
        return in_use, f"{words} net of the profiler's buffer" if netted else words, "heap" if netted else None
    rss = [(c["ts"], c["rss"]) for c in data.cpu]
    return rss, "process RSS net of the profiler's buffer" if data.buffers else "process RSS", "rss" if data.buffers else None


def memory_finding(data: Any, steady: list[Row], framework: str | None) -> Finding | None:
    """A steady rise of memory step after step (allocator bytes with profile_memory, else the C heap's
    bytes in use or RSS, net of the profiler's own buffer)."""
    if len(steady) < 4:
        return None
    first, last = steady[0], steady[-1]
    samples, source, buffer_fields = _memory_series(data)
    starts = np.array([r["start"] for r in steady], dtype=np.int64)
    inside = [(t, v) for t, v in samples if first["start"] <= t <= last["end"]]
    if len(inside) < 4:
        return None
    times = np.array([t for t, _ in inside], dtype=np.int64)
    values = np.array([v for _, v in inside], dtype=np.float64)
    if buffer_fields:
        values = _net_of_profiler_buffer(data, times, values, f"{buffer_fields}_before", f"{buffer_fields}_after")
    step_of = np.searchsorted(starts, times, side="right") - 1
    numbers = np.array([r["n"] for r in steady], dtype=np.float64)[step_of]
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
    return _finding("memory_growth", "memory", "high", 0.0, evidence, words, text, action("memory_growth", framework))


def warmup_finding(rows: list[Row], warm: list[int], steady_ms: float) -> Finding | None:
    if not warm:
        return None
    extra = [r["total"] - steady_ms for r in rows if r["n"] in warm]
    evidence = {"steps": ranges(warm), "extra_ms": round(sum(extra), 3), "steady_step_ms": round(steady_ms, 3)}
    words = [f"{steps_words(warm)} took {ms_words(sum(extra))} more than a mean steady step of {ms_words(steady_ms)}"]
    text = f"Warm-up: {steps_words(warm)} took {ms_words(sum(extra))} more than steady steps"
    return _finding("warm_up", "warm-up", "low", 0.0, evidence, words, text, action("warm_up", None))


def others_cores(cpu: dict[str, Any] | None, meta: dict[str, Any]) -> float:
    """Cores other processes kept busy while the job ran (neither the job's tree nor the agent's), from the CPU page."""
    keys = ("machine_busy_mean", "process_user_mean", "process_sys_mean")
    if not cpu or any(cpu.get(key) is None for key in keys):
        return 0.0
    others = cpu["machine_busy_mean"] - cpu["process_user_mean"] - cpu["process_sys_mean"] - (cpu.get("agent_mean") or 0.0)
    return max(float(others), 0.0) / 100 * int(meta.get("cpus") or 1)


def cpu_contention_finding(cpu: dict[str, Any] | None, host_or_data: bool) -> Finding | None:
    """Others' CPU use matters only when the training waits on the host or data. The job is its process
    tree (DataLoader and dataset workers included); the agent's own processes are neither the job's nor others'."""
    keys = ("process_user_mean", "process_sys_mean", "machine_busy_mean")
    if not cpu or not host_or_data or any(cpu.get(key) is None for key in keys):  # None: no sample long enough
        return None
    own = cpu["process_user_mean"] + cpu["process_sys_mean"]  # percent of the machine already
    ours = cpu.get("agent_mean") or 0.0
    others = cpu["machine_busy_mean"] - own - ours
    if cpu["machine_busy_mean"] < 80 or others < 50:
        return None
    evidence = {"machine_busy_percent": cpu["machine_busy_mean"], "job_percent_of_machine": round(own, 2),
                "agent_percent_of_machine": round(ours, 2), "others_percent_of_machine": round(others, 2)}
    words = [f"the machine was {cpu['machine_busy_mean']:.0f} % busy: this job (its process and children) {own:.0f} %, "
             f"the profiler's own processes {ours:.0f} %, other processes {others:.0f} %"]
    text = f"CPU contention: the machine was {cpu['machine_busy_mean']:.0f} % busy, {others:.0f} % of it other processes"
    return _finding("cpu_contention", "host", "low", 0.0, evidence, words, text, action("cpu_contention", None))


def mfu_finding(flops: dict[str, Any] | None, compute_bound: bool) -> Finding | None:
    mfu = (flops or {}).get("mfu")
    if not mfu:
        return None
    ratio = (mfu.get("unprofiled") or mfu)["ratio"]  # the job's own, where its steps without the profiler were timed on the device
    if not compute_bound or ratio >= LOW_MFU:
        return None
    evidence = {"mfu": ratio, "peak_gflops": mfu["peak_gflops"], "peak_source": mfu["peak_source"], "margin": margin(LOW_MFU, max(ratio, 1e-9))}
    text = f"Low utilisation: the ops reach {ratio:.1%} of {mfu['peak_gflops']:.0f} GFLOPS"
    return _finding("low_mfu", "utilisation", "low", 0.0, evidence, [f"{ratio:.1%} of a peak of {mfu['peak_gflops']:.0f} GFLOPS "
                                                                    f"({mfu['peak_source']})"], text, action("low_mfu", None))


def communication_finding(steady: list[Row], step_ms: float, step_p50: float) -> Finding | None:
    ms, median = _stage_figures(steady, "communication")
    if median < MIN_STAKE_MS or median < 0.2 * step_p50:
        return None
    evidence = {"communication_ms": round(ms, 3), "communication_p50_ms": round(median, 3), "share": round(ms / step_ms, 4),
                "margin": margin(median, max(MIN_STAKE_MS, 0.2 * step_p50))}
    words = [f"collectives take a mean {ms_words(ms)} (p50 {ms_words(median)}) of a mean {ms_words(step_ms)} step"]
    text = f"Communication-bound: collectives take a mean {ms_words(ms)} of a mean {ms_words(step_ms)} step"
    return _finding("communication", "communication", _share_severity(ms / step_ms), ms, evidence, words, text, action("communication", None))


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


def _attribute(pattern: dict[str, Any], found: list[Finding], steady: list[Row], meta: dict[str, Any]) -> None:
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
    """Findings (ordered), the verdict, the per-step breakdown (means and medians) and the Python hot
    spots; ``warmup`` is the window's warm-up steps (``warmup.detect``)."""
    rows = results["step_trace"]["rows"]
    meta = data.meta
    framework = meta.get("framework")
    warm = [w["step"] for w in warmup]
    breakdown = step_breakdown(data, rows)
    steady = [r for r in breakdown if r["n"] not in warm] or breakdown
    if not steady:
        return {"findings": [], "verdict": None, "verdict_basis": None, "breakdown_ms": None, "breakdown_mean_ms": None, "hot_spots": []}
    step_ms, step_p50 = _stage_figures(steady, "total")
    spots = hot_spots(data, steady)
    warm_spots = hot_spots(data, [r for r in breakdown if r["n"] in warm])
    stages = [data_finding(steady, step_ms, results.get("data_prep") or {}, meta, results.get("cpu"))]
    device = results.get("device") or {}
    if device:  # a GPU: its own timeline says what bounds the step, not the host's clock
        from . import gpu_advice

        stages += gpu_advice.findings(device, meta)
    if data.op_count and "busy_share" not in device:  # no ops recorded: compute, runtime and host unknown
        stages += [host_finding(steady, step_ms, step_p50, spots, meta, graph_mode(data) or bool(len(compiled_regions(data)))),
                   runtime_finding(steady, step_ms, step_p50, meta),
                   compute_finding(steady, step_ms, step_p50, results.get("operators") or {}, meta)]
    found = [f for f in stages if f]
    pattern = beat(steady)
    if pattern is not None and _even_on_the_device(pattern, device):
        pattern = None
    if pattern is not None:
        _attribute(pattern, found, steady, meta)
        if pattern["stage"] != "wait" or not any(f["id"] == "data_wait" for f in found):
            found += [f for f in [jitter_finding(steady, pattern, meta)] if f]
    memory = memory_finding(data, steady, framework)
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
            "hot_spots": spots + warm_spots,
            "breakdown_ms": {key: round(_median([r[key] for r in steady]), 3) if key in known or key == "total" else None
                             for key in ("total",) + STAGES + ("communication",)},
            "breakdown_mean_ms": {key: round(_mean([r[key] for r in steady]), 3) if key in known or key == "total" else None
                                  for key in ("total",) + STAGES + ("communication",)}}


def _even_on_the_device(pattern: dict[str, Any], device: dict[str, Any]) -> bool:
    """A periodic slow step on the host's clock that the device's own step times (CUDA events) do not show: the host
    waited at a sync (a ``loss.item()`` every N steps) for work the device had queued, which no step lost."""
    times = dict(device.get("device_step_ms_by_step") or [])
    slow = [times[n] for n in pattern.get("steps", []) if n in times]
    rest = [v for n, v in times.items() if n not in set(pattern.get("steps", []))]
    return bool(slow and rest) and _median(slow) - _median(rest) < JITTER_MIN_MS / 2


def near_misses(steady: list[Row], step_ms: float, step_p50: float, operators: dict[str, Any], found: set[str], ops_known: bool) -> list[Finding]:
    """The stage findings not made whose figure came within ``NEAR`` of its trigger (margin 1/NEAR to 1): another
    run's noise lifts them over, so the verdict names one that costs about as much as its own (``verdict.basis``)."""
    wait = _mean([r["wait"] for r in steady])
    candidates = [("data_wait", "data", wait, margin(wait, max(MIN_STAKE_MS, MIN_SHARE * step_ms)))]
    if ops_known:
        candidates += [(STAGE_FINDING[stage], stage, _mean([r[stage] for r in steady]), _typical_margin(steady, stage, step_p50))
                       for stage in ("host", "runtime")]
        types = operators.get("types") or []
        if types:
            compute, median = _stage_figures(steady, "compute")
            candidates.append(("hot_ops", "compute", compute * types[0]["percent"], margin(median, 0.5 * step_p50)))
    return [{"id": finding_id, "category": category, "ms_per_step": round(ms, 1), "at_stake": stake_words(round(ms, 1)), "margin": near}
            for finding_id, category, ms, near in candidates if finding_id not in found and 1 / NEAR <= near < 1]


def verdict(findings: list[Finding]) -> str:
    """The first finding's category through ``VERDICT_OF``; warm-up is skipped; no finding: balanced."""
    return next((VERDICT_OF[f["category"]] for f in findings if f["category"] in VERDICT_OF), "balanced")


def suggestions(findings: list[Finding]) -> list[dict[str, Any]]:
    """The older ``suggestions`` list (id, text, evidence) the existing readers show, from the findings."""
    return [{"id": f["id"], "text": f"{f['text']}: {f['action']}.", "evidence": f["evidence"]} for f in findings]
