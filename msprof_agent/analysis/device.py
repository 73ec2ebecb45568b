"""The device room: what a GPU did, read on its own activity rather than through the host's clock.

On a GPU the host runs ahead and waits at its syncs, so a step's host time says little of the device. This
page merges the device's activities (kernels, copies, fills, across streams) into busy intervals and, for each
steady step, gives the device's busy time and its idle time split by cause, as HolisticTraceAnalysis does:

- ``data``: the host was fetching the next batch (the step's data waits) while the device had nothing queued;
- ``sync``: the host had blocked in a synchronize (``.item()``, ``.cpu()``, a pageable copy), the queue drained,
  and the device waited for the host to launch again;
- ``host``: the device waited for a launch: the activity after the gap was queued only after the gap began
  (the launching call's time from the ``launch`` records, else any launch call inside the gap); the host's Python,
  launch overhead, or too many small kernels;
- ``queued``: the next activity was already queued (a dependency, the scheduler): the device's own gaps;
- ``agent``: the agent's own pauses (the profiler's start-up, hand-overs).

Kernels are grouped by name with the host op that launched them (kineto's correlation ids, ``records.Launch``).
Device step times come from the CUDA events at the step ends (``records.DeviceSteps``); memory from the caching
allocator's peaks and samples, and NVML's samples where the job had it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..contract import readers
from ..contract.columns import DEVICE_STEP_HEADER, GPU_KERNEL_HEADER, IDLE_CAUSES
from ..contract.cuda import PAGEABLE, activity_kind, is_launch_call, is_runtime_call, is_sync_call
from ..contract.names import DEVICE_STEPS, GPU_KERNELS
from ..contract.pages import File, Page
from ..writers import write_csv
from . import warmup
from .intervals import length_within, merge
from .stats import median, percentiles

if TYPE_CHECKING:
    from .run import Context
    from .rundata import RunData

TOP_KERNELS = 20
MIN_UNPROFILED_STEPS = 5
SETTLED_STEP = 5
# Kernel families by name, for what each share of device time means (first match wins).
FAMILIES = (("matmul", ("gemm", "nvjet", "cutlass", "cublas", "sm90_xmma", "sm80_xmma", "wgmma", "matmul")),
            ("attention", ("flash", "sdpa", "fmha", "attention")),
            ("optimizer", ("multi_tensor_apply", "fused_adam", "adamw", "_fused_")),
            ("copy", ("memcpy", "memset", "copy_kernel", "catarraybatchedcopy")),
            ("reduction", ("reduce_kernel", "softmax", "layer_norm", "norm_kernel", "welford")),
            ("elementwise", ("elementwise", "vectorized", "unrolled", "triton_")))


class DeviceActivity:
    """The run's device activities as sorted columns, the launch calls and syncs of the host, and what launched each."""

    def __init__(self, data: RunData) -> None:
        ops = data.ops
        on_device = ops.on_device
        self.index = np.flatnonzero(on_device & ~_annotations(ops, on_device))
        self.starts = ops["start"][self.index]
        self.ends = self.starts + ops["dur"][self.index]
        self.name_ids = ops["name_id"][self.index]
        names = data.op_names
        host = np.flatnonzero(~on_device)
        host_names = ops["name_id"][host]
        launch_code = np.array([is_launch_call(str(n)) for n in names], dtype=bool)
        sync_code = np.array([is_sync_call(str(n)) for n in names], dtype=bool)
        launches = host[launch_code[host_names]]
        self.launch_starts = np.sort(ops["start"][launches])
        syncs = host[sync_code[host_names]]
        self.sync_starts, self.sync_ends = ops["start"][syncs], ops["start"][syncs] + ops["dur"][syncs]
        self.sync_steps = ops["step"][syncs]
        self.launched, self.launching_op = self._links(data)
        self.launch_calls = np.sort(launches)

    def _links(self, data: RunData) -> tuple[np.ndarray | None, np.ndarray]:
        """Each activity's launch time (None without ``launch`` records) and launching op's name ("" unknown)."""
        if not data.launches:
            return None, np.full(len(self.starts), "", dtype=object)
        starts = np.concatenate([np.asarray(r["start"], dtype=np.int64) for r in data.launches])
        launched = np.concatenate([np.asarray(r["launched"], dtype=np.int64) for r in data.launches])
        ops = np.concatenate([np.array([r["op_table"][c] if c >= 0 else "" for c in r["op_codes"]], dtype=object) for r in data.launches])
        order = np.argsort(starts, kind="stable")
        starts, launched, ops = starts[order], launched[order], ops[order]
        at = np.clip(np.searchsorted(starts, self.starts), 0, max(len(starts) - 1, 0))
        matched = (starts[at] == self.starts) if len(starts) else np.zeros(len(self.starts), dtype=bool)
        return np.where(matched, launched[at], 0), np.where(matched, ops[at], "")


    def calls(self, data: RunData) -> tuple[np.ndarray, str]:
        """Each activity's launching runtime call (its op index, -1: none found) and how they were joined:
        ``"launch records"``: the runtime call that started at the activity's ``launched`` time (kineto's correlation,
        as recorded); ``"in order"``, for stores without launch records: each launch call paired with the first
        activity starting after it, in time order (the counts nearly match, and a queue runs in launch order; with
        several streams or a dropped activity some pairs are wrong, so it is a guess, said as such)."""
        found = np.full(len(self.starts), -1, dtype=np.int64)
        if self.launched is not None:
            ops, names = data.ops, data.op_names
            host = np.flatnonzero(~ops.on_device)
            runtime = np.array([is_runtime_call(str(n)) for n in names], dtype=bool)
            calls = host[runtime[ops["name_id"][host]]]
            call_starts = ops["start"][calls]
            at = np.clip(np.searchsorted(call_starts, self.launched), 0, max(len(calls) - 1, 0))
            if len(calls):
                matched = (self.launched > 0) & (call_starts[at] == self.launched)
                found[matched] = calls[at[matched]]
            return found, "launch records"
        launch_starts = data.ops["start"][self.launch_calls]
        j = 0
        for k, start in enumerate(self.starts.tolist()):
            if j < len(launch_starts) and launch_starts[j] < start:
                found[k] = self.launch_calls[j]
                j += 1
        return found, "in order"


def _annotations(ops: Any, on_device: np.ndarray) -> np.ndarray:
    """Device events that are the host's annotations projected onto the GPU (``Optimizer.step#AdamW.step``, the
    user's ``record_function``): kernels never share a name with a host event, these always do."""
    host_names = np.zeros(int(ops["name_id"].max()) + 1 if len(ops["name_id"]) else 0, dtype=bool)
    host_names[ops["name_id"][~on_device]] = True
    shared: np.ndarray = host_names[ops["name_id"]]
    return shared


def write(data: RunData, ctx: Context) -> dict[str, Any] | None:
    """The device page (``DEVICE_STEPS``, ``GPU_KERNELS``) and its figures for the summary; None for a host-only run."""
    gpu = _gpu_records(data)
    if not data.op_count or not data.ops.on_device.any():
        return gpu or None
    activity = DeviceActivity(data)
    steady = warmup.steady(data.window_steps, ctx.warmup)
    rows = step_rows(data, activity, steady)
    write_csv(ctx.path(DEVICE_STEPS), DEVICE_STEP_HEADER,
              [[r["n"], r["step_ms"], r["busy_ms"], r["idle_ms"], *(r["idle"][c] for c in IDLE_CAUSES), r["kernels"], r["launches"], r["syncs"]]
               for r in rows])
    kernels = kernel_table(data, activity, {r["n"] for r in rows})
    write_csv(ctx.path(GPU_KERNELS), GPU_KERNEL_HEADER,
              [[k["kernel"], k["kind"], k["launched_by"], k["count"], k["total_ms"], k["mean_us"], k["share"]] for k in kernels])
    found = dict(gpu, **figures(rows, kernels, activity))
    unprofiled = gpu.get("unprofiled_step_ms")
    if unprofiled and rows:  # the kernels' time a step barely moves under the profiler; the host's launches slow down
        found["busy_share_unprofiled"] = round(min(found["busy_ms"] / unprofiled, 1.0), 4)
    return found


def step_rows(data: RunData, activity: DeviceActivity, steps: Sequence[Any]) -> list[dict[str, Any]]:
    """Per step: the device's busy time (activities merged across streams) and its idle time by cause (ms)."""
    busy_starts, busy_ends = merge(activity.starts, activity.ends)
    rows = []
    for step in steps:
        lo, hi = step["start"], step["end"]
        span = max(hi - lo, 1)
        busy = int(length_within(busy_starts, busy_ends, [lo], [hi])[0])
        idle = _idle_causes(data, activity, busy_starts, busy_ends, step)
        first, last = np.searchsorted(activity.starts, [lo, hi])
        launches = int(np.searchsorted(activity.launch_starts, hi) - np.searchsorted(activity.launch_starts, lo))
        rows.append({"n": step["n"], "step_ms": round(span / 1e6, 4), "busy_ms": round(busy / 1e6, 4), "idle_ms": round((span - busy) / 1e6, 4),
                     "idle": {c: round(v / 1e6, 4) for c, v in idle.items()}, "kernels": int(last - first), "launches": launches,
                     "syncs": int((activity.sync_steps == step["n"]).sum())})
    return rows


def _idle_causes(data: RunData, activity: DeviceActivity, busy_starts: np.ndarray, busy_ends: np.ndarray, step: Any) -> dict[str, int]:
    """The step's idle gaps (ns), each given to one cause (the module's docstring)."""
    lo, hi = step["start"], step["end"]
    first, stop = np.searchsorted(busy_ends, lo, side="right"), np.searchsorted(busy_starts, hi)
    gap_lo = np.concatenate(([lo], busy_ends[first:stop]))
    gap_hi = np.concatenate((busy_starts[first:stop], [hi]))
    gap_lo, gap_hi = np.maximum(gap_lo, lo), np.minimum(gap_hi, hi)
    keep = gap_hi > gap_lo
    gap_lo, gap_hi = gap_lo[keep], gap_hi[keep]
    causes = {c: 0 for c in IDLE_CAUSES}
    waits = [(a, b) for a, b in step.get("waits") or []]
    pauses = [(p["start"], p["end"]) for p in data.pauses if p["end"] > lo and p["start"] < hi]
    next_activity = np.searchsorted(activity.starts, gap_hi)  # the activity that ends each gap (or none: the step's end)
    for g0, g1, nxt in zip(gap_lo.tolist(), gap_hi.tolist(), next_activity.tolist()):
        length = g1 - g0
        if _overlap(pauses, g0, g1) * 2 >= length:
            causes["agent"] += length
        elif _overlap(waits, g0, g1) * 2 >= length:
            causes["data"] += length
        elif _sync_before(activity, g0):
            causes["sync"] += length
        elif _launched_late(activity, nxt, g0, g1):
            causes["host"] += length
        else:
            causes["queued"] += length
    return causes


def _overlap(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    return sum(max(min(b, hi) - max(a, lo), 0) for a, b in intervals)


def _sync_before(activity: DeviceActivity, gap_start: int) -> bool:
    """A host sync was waiting when the device went idle: the queue had drained into it."""
    slack = 20_000  # the sync returns a few microseconds after the device's last activity ends
    return bool(((activity.sync_starts <= gap_start) & (activity.sync_ends >= gap_start - slack)).any())


def _launched_late(activity: DeviceActivity, nxt: int, g0: int, g1: int) -> bool:
    """The activity ending the gap was queued after the gap began (with launch records: its own launch; else a
    launch call inside the gap)."""
    if activity.launched is not None and nxt < len(activity.starts) and activity.launched[nxt]:
        return bool(activity.launched[nxt] >= g0)
    i = np.searchsorted(activity.launch_starts, g0)
    return bool(i < len(activity.launch_starts) and activity.launch_starts[i] <= g1)


def kernel_table(data: RunData, activity: DeviceActivity, steps: set[int]) -> list[dict[str, Any]]:
    """The steady steps' device activities by (name, launching op), by device time, with their share of it."""
    in_steps = np.isin(data.ops["step"][activity.index], list(steps)) if steps else np.ones(len(activity.index), dtype=bool)
    durations = (activity.ends - activity.starts)[in_steps]
    names = data.op_names[activity.name_ids[in_steps]]
    launched_by = activity.launching_op[in_steps]
    groups: dict[tuple[str, str], list[int]] = {}
    for name, op, dur in zip(names.tolist(), launched_by.tolist(), durations.tolist()):
        entry = groups.setdefault((name, op), [0, 0])
        entry[0] += 1
        entry[1] += dur
    total = max(sum(v[1] for v in groups.values()), 1)
    table = [{"kernel": name, "kind": activity_kind(name), "launched_by": op, "count": count, "total_ms": round(ns / 1e6, 4),
              "mean_us": round(ns / count / 1e3, 3), "share": round(ns / total, 4)} for (name, op), (count, ns) in groups.items()]
    return sorted(table, key=lambda k: -k["total_ms"])


def figures(rows: list[dict[str, Any]], kernels: list[dict[str, Any]], activity: DeviceActivity) -> dict[str, Any]:
    """The device's summary figures over the steady steps: means a step, the busy share of the mean step."""
    if not rows:
        return {}
    count = len(rows)
    step = sum(r["step_ms"] for r in rows) / count
    busy = sum(r["busy_ms"] for r in rows) / count
    idle = {c: round(sum(r["idle"][c] for r in rows) / count, 4) for c in IDLE_CAUSES}
    durations = (activity.ends - activity.starts) / 1e3
    pageable = [k for k in kernels if k["kind"] == "memcpy" and PAGEABLE in k["kernel"]]
    return {"steps": count, "step_ms": round(step, 4), "busy_ms": round(busy, 4), "busy_share": round(busy / max(step, 1e-9), 4),
            "idle_ms": idle, "kernels_per_step": round(sum(r["kernels"] for r in rows) / count, 1),
            "launches_per_step": round(sum(r["launches"] for r in rows) / count, 1), "syncs_per_step": round(sum(r["syncs"] for r in rows) / count, 2),
            "kernel_us_p50": round(median(durations.tolist()), 3) if len(durations) else None,
            "pageable_copies_per_step": round(sum(k["count"] for k in pageable) / count, 2),
            "pageable_copy_ms": round(sum(k["total_ms"] for k in pageable) / count, 4),
            "top_kernels": kernels[:TOP_KERNELS], "families": families(kernels), "top_ops": launching_ops(kernels, count),
            "launch_links": activity.launched is not None,
            "busy_definition": "device activities (kernels, copies, fills) merged across streams, within each steady step's host interval"}


def families(kernels: list[dict[str, Any]]) -> dict[str, float]:
    """Each kernel family's share of the device time (``kernel_family``), largest first."""
    shares: dict[str, float] = {}
    for kernel in kernels:
        name = kernel_family(kernel["kernel"])
        shares[name] = shares.get(name, 0.0) + kernel["share"]
    return {name: round(share, 4) for name, share in sorted(shares.items(), key=lambda item: -item[1])}


def kernel_family(kernel: str) -> str:
    lowered = kernel.lower()
    return next((name for name, words in FAMILIES if any(w in lowered for w in words)), "other")


def launching_ops(kernels: list[dict[str, Any]], steps: int) -> list[dict[str, Any]]:
    """Device time grouped by the host op that launched it (the kernel's own name where no launch was linked): what
    a GPU profile's top operators are, never a host-only op (allocation, views)."""
    totals: dict[str, list[float]] = {}
    for kernel in kernels:
        entry = totals.setdefault(kernel["launched_by"] or kernel["kernel"], [0.0, 0.0])
        entry[0] += kernel["total_ms"]
        entry[1] += kernel["share"]
    ranked = sorted(totals.items(), key=lambda item: -item[1][0])[:TOP_KERNELS]
    return [{"op_type": name, "total_ms": round(ms, 4), "ms_per_step": round(ms / max(steps, 1), 4), "percent": round(share, 4)}
            for name, (ms, share) in ranked]


def _gpu_records(data: RunData) -> dict[str, Any]:
    """Device step times (CUDA events), the allocator's peaks and the samples (allocator, NVML), where recorded."""
    out: dict[str, Any] = {}
    device_steps = {n: ns for r in data.device_steps for n, ns in r["steps"]}
    if device_steps:
        window = {s["n"] for s in data.window_steps}
        ms = [ns / 1e6 for n, ns in sorted(device_steps.items())]
        out["device_step_ms"] = percentiles(ms)
        outside = unprofiled_steps(device_steps, window)
        if len(outside) >= MIN_UNPROFILED_STEPS:
            out["unprofiled_step_ms"] = round(median(outside), 4)
            out["unprofiled_steps"] = len(outside)
        out["device_step_ms_by_step"] = [[n, round(ns / 1e6, 4)] for n, ns in sorted(device_steps.items()) if n in window]
        out["device_steps_timed"] = len(device_steps)
    series = sorted((n, b) for r in data.device_steps for n, b in r.get("allocated", []) if n > SETTLED_STEP)
    if series:
        out["allocated_growth"] = growth(series)
    if data.gpu_peaks:
        peak = max(data.gpu_peaks, key=lambda p: p["peak_allocated"])
        reserved = max(p["peak_reserved"] for p in data.gpu_peaks)
        out["memory"] = {"peak_allocated_mb": round(peak["peak_allocated"] / 2**20, 2), "peak_reserved_mb": round(reserved / 2**20, 2),
                         "total_mb": round(peak["total"] / 2**20, 2), "source": "torch.cuda.max_memory_allocated / max_memory_reserved"}
    if data.gpu:
        samples = data.gpu
        out.setdefault("memory", {})["samples"] = len(samples)
        out["memory"]["allocated_mb_last"] = round(samples[-1].get("allocated", 0) / 2**20, 2)
        nvml = [s for s in samples if "util" in s]
        if nvml:
            throttled = 0
            for s in nvml:
                throttled |= int(s.get("throttle", 0))
            out["nvml"] = {"util_mean": round(float(np.mean([s["util"] for s in nvml])), 1),
                           "power_w_mean": round(float(np.mean([s["power"] for s in nvml])), 1),
                           "sm_mhz_mean": round(float(np.mean([s["sm_mhz"] for s in nvml])), 1),
                           "used_mb_max": round(max(s["used"] for s in nvml) / 2**20, 1), "throttle_reasons": throttled, "samples": len(nvml)}
    return out


def growth(series: list[tuple[int, int]]) -> dict[str, Any]:
    """The allocator's bytes in use against the step number (read every 10th step end): a least-squares line's slope
    (bytes a step), its R² and the growth over the steps read, for the memory findings' rule."""
    steps = np.array([n for n, _ in series], dtype=np.float64)
    values = np.array([b for _, b in series], dtype=np.float64)
    out: dict[str, Any] = {"steps": [int(steps[0]), int(steps[-1])], "reads": len(series), "allocated_last": int(values[-1])}
    if len(series) < 4 or np.ptp(steps) == 0:
        return dict(out, bytes_per_step=0, r2=0.0, growth_bytes=0)
    slope, intercept = np.polyfit(steps, values, 1)
    spread = float(((values - values.mean()) ** 2).sum())
    r2 = 1.0 - float(((values - (slope * steps + intercept)) ** 2).sum()) / spread if spread else 0.0
    return dict(out, bytes_per_step=round(float(slope)), r2=round(r2, 4), growth_bytes=round(float(slope * np.ptp(steps))))


def unprofiled_steps(device_steps: dict[int, int], window: set[int]) -> list[float]:
    """The device times (ms) of the steps no profiler slowed, past the job's first ``SETTLED_STEP`` (warm-up,
    allocation): those before the op window where there are ``MIN_UNPROFILED_STEPS`` (CUPTI never attached yet: on an
    H200 the steps after a window ran 6-40 % slower while it stayed attached), else those after it but the next (which
    holds the window's stop)."""
    first = min(window) if window else None
    before = [ns / 1e6 for n, ns in device_steps.items() if SETTLED_STEP < n and first is not None and n < first]
    if len(before) >= MIN_UNPROFILED_STEPS:
        return before
    after = max(window) + 1 if window else None
    return [ns / 1e6 for n, ns in device_steps.items() if n not in window and n != after and n > SETTLED_STEP]


PAGE = Page("device", (File("gpu_kernels", (GPU_KERNELS,), readers.read_gpu_kernels, tuple(GPU_KERNEL_HEADER)),
                       File("device_steps", (DEVICE_STEPS,), readers.read_device_steps, tuple(DEVICE_STEP_HEADER))), write)
