"""The data rules: waits for data, with the data loader's workers sized from its recorded settings, and other
processes' CPU use while the training waits on the host or its data."""
from __future__ import annotations

import math
from typing import Any

from ...contract.frameworks import TORCH, profile_of
from .actions import action
from .breakdown import Row, stage_figures
from .findings import MIN_LOADING_CORES, MIN_SHARE, MIN_STAKE_MS, Finding, make_finding, share_severity
from .verdict import margin
from .words import ms_words, ranges, steps_words


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
    with workers, every few steps wait longer (``attribute``)."""
    wait, median = stage_figures(steady, "wait")
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
    return make_finding("data_wait", "data", share_severity(wait / step_ms), wait, evidence, words + said, text, act)


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
    return make_finding("cpu_contention", "host", "low", 0.0, evidence, words, text, action("cpu_contention", None))
