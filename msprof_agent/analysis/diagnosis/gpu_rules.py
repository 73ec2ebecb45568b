"""Findings on a GPU, from the device's own timeline (``analysis/device.py``, the device room) rather than the host's clock.

Where the device is busy most of each step the job is GPU-bound, and what is at stake is the device time of its
kernels that fusion removes (elementwise, reductions, copies: torch.compile cut a GPT's 19.1 ms step to 15.5);
where it idles waiting for launches of many short kernels, launch-bound, and the idle time is at stake; syncs
and pageable copies are named with their cost. The advice reads what the job already does (autocast, compile,
a fused optimizer, pinned memory: ``meta["gpu_settings"]`` and ``meta["data_settings"]``) and never repeats it.
"""
from __future__ import annotations

from typing import Any

from .actions import action
from .findings import MEMORY_MIN_BYTES_PER_STEP, MEMORY_MIN_GROWTH, MIN_SHARE, MIN_STAKE_MS, Finding, make_finding
from .verdict import consequence, margin
from .words import ms_words

GPU_BOUND_SHARE = 0.60  # the device busy this share of the mean step
LAUNCH_BOUND_SHARE = 0.50  # under this share, with short kernels, the host's launches are the limit
SHORT_KERNEL_US = 50.0
FUSABLE = ("elementwise", "reduction", "copy")  # kernel families (``device.FAMILIES``) that fusion removes
FINDING_IDS = ("gpu_bound", "launch_bound", "gpu_host_wait", "host_sync", "gpu_memory_growth", "pageable_copy")  # what these rules make


def findings(device: dict[str, Any] | None, meta: dict[str, Any]) -> list[Finding]:
    """The GPU's findings: GPU-bound or launch-bound (or neither), host syncs, pageable copies."""
    if not device:
        return []
    found = [_device_memory(device, meta)]
    if "busy_share" in device:
        found += [_gpu_bound(device, meta), _launch_bound(device, meta), _syncs(device), _pageable(device, meta)]
    return [f for f in found if f]


def busy(device: dict[str, Any]) -> tuple[float, float, str]:
    """(busy share, step ms, where from): against the steps no profiler slowed (their CUDA-event times) where the run
    has them, else the profiled window's: under torch.profiler the host launches slower, and a GPU-bound job can
    look host-bound in the window alone."""
    if "busy_share_unprofiled" in device:
        return device["busy_share_unprofiled"], device["unprofiled_step_ms"], (
            f"{ms_words(device['busy_ms'])} of kernels a step against the {ms_words(device['unprofiled_step_ms'])} step the device "
            f"takes without the profiler (median of {device['unprofiled_steps']} steps, CUDA events)")
    return device["busy_share"], device["step_ms"], f"{ms_words(device['busy_ms'])} of a mean {ms_words(device['step_ms'])} profiled step"


def _share_words(shares: dict[str, float]) -> str:
    return ", ".join(f"{name} {share:.0%}" for name, share in list(shares.items())[:4])


def _gpu_bound(device: dict[str, Any], meta: dict[str, Any]) -> Finding | None:
    share, step, where = busy(device)
    busy_ms = device["busy_ms"]
    if share < GPU_BOUND_SHARE:
        return None
    shares = device["families"]
    fusable = sum(shares.get(name, 0.0) for name in FUSABLE)
    stake = busy_ms * fusable
    settings = meta.get("gpu_settings") or {}
    steps: list[str] = []
    if not settings.get("compiled"):
        steps.append(f"fuse the elementwise, reduction and copy kernels ({fusable:.0%} of device time) with torch.compile(model)")
    if not settings.get("autocast") and shares.get("matmul", 0.0) >= 0.2:
        steps.append("run the matmuls in bf16 (torch.autocast('cuda', dtype=torch.bfloat16))")
    if shares.get("optimizer", 0.0) >= 0.05 and not settings.get("optimizer_fused"):
        steps.append("use a fused optimizer (e.g. AdamW(..., fused=True))")
    steps.append("beyond that the GPU itself is the limit: a larger or more efficient model step, or more GPUs")
    top = device.get("top_kernels", [])[:3]
    evidence = {"busy_share": share, "busy_ms": busy_ms, "step_ms": step, "families": {k: round(v, 4) for k, v in shares.items()},
                "top_kernels": [{"kernel": k["kernel"][:120], "launched_by": k["launched_by"], "share": k["share"]} for k in top],
                "settings": settings, "margin": margin(share, GPU_BOUND_SHARE)}
    words = [f"the device is busy {share:.0%}: {where}",
             f"device time by kernel family: {_share_words(shares)}"]
    words += [f"{k['kernel'][:80]}{' (from ' + k['launched_by'] + ')' if k['launched_by'] else ''}: {k['share']:.0%}" for k in top]
    text = f"GPU-bound: the device is busy {share:.0%} of each step; {_share_words(shares)} of its time"
    return make_finding("gpu_bound", "device", "medium" if fusable >= MIN_SHARE else "low", stake, evidence, words, text, "; ".join(steps))


def _launch_bound(device: dict[str, Any], meta: dict[str, Any]) -> Finding | None:
    share, step, where = busy(device)
    idle = device["idle_ms"]
    waiting = idle["host"] + idle["sync"]
    if "busy_share_unprofiled" in device:  # the window's idle is the profiler's slower host; the device's own steps say what idles
        waiting = min(waiting, max(step - device["busy_ms"] - idle["data"], 0.0))
    if share >= LAUNCH_BOUND_SHARE or waiting < MIN_STAKE_MS or waiting < MIN_SHARE * step:
        return None
    short = (device.get("kernel_us_p50") or 0.0) < SHORT_KERNEL_US
    settings = meta.get("gpu_settings") or {}
    kernels, us = device["kernels_per_step"], device.get("kernel_us_p50") or 0.0
    evidence = {"busy_share": share, "idle_host_ms": idle["host"], "idle_after_sync_ms": idle["sync"], "kernels_per_step": kernels,
                "kernel_us_p50": us, "syncs_per_step": device["syncs_per_step"], "settings": settings,
                "margin": margin(waiting, max(MIN_STAKE_MS, MIN_SHARE * step))}
    words = [f"the device is busy {share:.0%}: {where}", f"in the profiled steps it waits {ms_words(idle['host'])} a step for launches "
             f"and {ms_words(idle['sync'])} after host syncs", f"{kernels:.0f} kernels a step, median {us:.1f} us each"]
    steps = []
    if not settings.get("compiled"):
        steps.append('capture the step in CUDA graphs (torch.compile(model, mode="reduce-overhead")) so one launch replays all its kernels')
    else:
        steps.append("the model is compiled: add CUDA graphs (mode=\"reduce-overhead\") or compile more of the step (the loss, the optimizer)")
    steps.append("give each launch more work: a larger batch or sequence")
    if device["syncs_per_step"] >= 1:
        steps.append(f"avoid the {device['syncs_per_step']:.0f} host sync(s) a step (loss.item(), .cpu(), printing a tensor): read them every N steps")
    if short:
        text = f"Launch-bound: the GPU is busy {share:.0%} of each step and waits {ms_words(waiting)} for the host to launch {kernels:.0f} short kernels"
        return make_finding("launch_bound", "launch", "high" if waiting >= 0.3 * step else "medium", waiting, evidence, words, text, "; ".join(steps))
    text = f"Host-bound: the GPU is busy {share:.0%} of each step and waits {ms_words(waiting)} for the host between launches"
    return make_finding("gpu_host_wait", "host", "high" if waiting >= 0.3 * step else "medium", waiting, evidence, words, text,
                        "move Python work out of the step (logging, metrics, data handling on the training thread) or overlap it: "
                        + "; ".join(steps[1:]))


def _syncs(device: dict[str, Any]) -> Finding | None:
    idle = device["idle_ms"]["sync"]
    if idle < MIN_STAKE_MS or idle < MIN_SHARE * device["step_ms"]:
        return None
    syncs = device["syncs_per_step"]
    evidence = {"idle_after_sync_ms": idle, "syncs_per_step": syncs, "margin": margin(idle, max(MIN_STAKE_MS, MIN_SHARE * device["step_ms"]))}
    text = f"Host syncs: {syncs:.1f} a step, after which the GPU idles {ms_words(idle)} a step until the host launches again"
    return make_finding("host_sync", "sync", "medium", idle, evidence, [text], text,
                        "read device values (loss.item(), .cpu(), .tolist(), printing a tensor) every N steps, not every step, and keep "
                        "data-dependent shapes (nonzero, boolean masks) off the training path")


def _device_memory(device: dict[str, Any], meta: dict[str, Any]) -> Finding | None:
    """The caching allocator's bytes in use growing step after step (read every 10th step of the whole run, not only
    the op window): a leak on the device, costed by when it would fill the GPU at that rate."""
    grown = device.get("allocated_growth") or {}
    slope, total, r2 = grown.get("bytes_per_step", 0), grown.get("growth_bytes", 0), grown.get("r2", 0.0)
    if slope < MEMORY_MIN_BYTES_PER_STEP or total < MEMORY_MIN_GROWTH or r2 < 0.8:
        return None
    span = [grown["steps"]]
    evidence = {"bytes_per_step": slope, "growth_bytes": total, "r2": r2, "steps": span, "source": "the GPU's caching allocator (bytes in use)",
                "margin": min(margin(slope, MEMORY_MIN_BYTES_PER_STEP), margin(total, MEMORY_MIN_GROWTH))}
    words = [f"{slope / (1 << 20):.1f} MiB a step over steps {span[0][0]}-{span[0][1]} ({total / (1 << 20):.0f} MiB in all, "
             f"linear fit R² {r2:.2f}, {grown['reads']} reads)"]
    text = f"GPU memory grows {slope / (1 << 20):.1f} MiB every step ({total / (1 << 20):.0f} MiB over steps {span[0][0]}-{span[0][1]}): a leak signature"
    finding = make_finding("gpu_memory_growth", "memory", "high", 0.0, evidence, words, text, action("memory_growth", meta.get("framework")))
    memory = device.get("memory") or {}
    left = None
    if memory.get("total_mb"):
        room = int((memory["total_mb"] - memory.get("peak_reserved_mb", 0.0)) * (1 << 20))
        left = (max(room, 0), "the GPU's memory its caching allocator has not reserved")
    step = device.get("unprofiled_step_ms") or (device.get("device_step_ms") or {}).get("p50") or 0.0
    consequence(finding, left, step, span[0][1], meta.get("planned_steps"))
    return finding


def _pageable(device: dict[str, Any], meta: dict[str, Any]) -> Finding | None:
    copies, ms = device.get("pageable_copies_per_step", 0.0), device.get("pageable_copy_ms", 0.0)
    if copies < 1:
        return None
    pinned = (meta.get("data_settings") or {}).get("pin_memory")
    evidence = {"pageable_copies_per_step": copies, "copy_ms": ms, "pin_memory": pinned}
    text = f"Pageable copies: {copies:.0f} a step between host and device memory ({ms_words(ms)}), synchronous for the host"
    act = ("pin the host tensors (DataLoader(pin_memory=True), tensor.pin_memory()) and copy with non_blocking=True" if not pinned else
           "the loader pins its batches already: the pageable copies are other tensors (created on the CPU in the step): make them on the GPU")
    return make_finding("pageable_copy", "host", "low", ms, evidence, [text], text, act)
