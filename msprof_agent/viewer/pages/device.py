"""The GPU page: the device's own time a step (busy, and idle by cause), its kernels by name and launching op, the
kernel types, GPU memory and the GPU's findings, from what analysis/device.py and operators.py write. A run that
ran on no GPU has none of those files, and no GPU page (``applies``). Named ``device`` as the analysis's device room
(the report's anchor ``gpu`` is the overview's GPU card)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...analysis.diagnosis.gpu_rules import FINDING_IDS  # the GPU's findings, shown again beside the figures they rest on
from ...contract.columns import IDLE_CAUSES, IDLE_WORDS
from ..render import STAGE_COLORS, Column, fmt, ok, op_type_charts, pct, short, table
from ..sections import present
from ..views import View
from .overview import findings_view

if TYPE_CHECKING:
    from ..render import Page
    from ..sections import Loaded, Run

DEVICE_FILES = ("device_steps", "gpu_kernels", "gpu_op_types")  # written on a GPU run only
BUSY_COLOR = STAGE_COLORS["fp_and_bp"]
IDLE_COLORS = {"host": "#f2a541", "sync": "#8e44ad", "data": STAGE_COLORS["data_wait"], "queued": "#8fb3e0", "agent": "#bbb"}
STEP_COLUMNS: tuple[Column, ...] = (("step", "Step", "count"), ("step_ms", "Step (ms)", "num"), ("busy_ms", "Busy (ms)", "num"),
                                    ("idle_ms", "Idle (ms)", "num"), *((f"idle_{c}", f"Idle: {c} (ms)", "num") for c in IDLE_CAUSES),
                                    ("activities", "Activities", "count"), ("launches", "Launches", "count"), ("syncs", "Syncs", "count"))
KERNEL_COLUMNS: tuple[Column, ...] = (("name", "Kernel", "text"), ("launched_by", "Launched by", "text"), ("kind", "Kind", "text"),
                                      ("count", "Count", "count"), ("total_ms", "Total (ms)", "num"), ("avg_us", "Avg (µs)", "num"),
                                      ("share", "Share", "pct"))
KERNEL_TYPE_COLUMNS: tuple[Column, ...] = (("name", "Kernel", "text"), ("occurrences", "Count", "count"), ("total_ms", "Total (ms)", "num"),
                                           ("avg_ms", "Avg (ms)", "num"), ("percent", "Share", "pct"))
NAME_CHARS = 90  # a kernel's name as the tables show it (C++ templates run to 600 characters); searched in full


def device_page(page: Page, run: Run, rank: int, sections: Loaded, report: bool = False) -> dict[str, Any]:
    steps, kernels, types, summary = sections["device_steps"], sections["gpu_kernels"], sections["gpu_op_types"], sections["summary"]
    data = summary["data"] if ok(summary) and isinstance(summary["data"], dict) else {}
    device = _mapping(data.get("device"))
    context: dict[str, Any] = {"steps": steps, "kernels": kernels, "types": types, "summary": summary,
                               "device_rows": device_rows(steps["data"] if ok(steps) else [], device), "memory_rows": memory_rows(device),
                               "findings": findings_view([f for f in data.get("findings") or [] if isinstance(f, dict) and f.get("id") in FINDING_IDS],
                                                         run, rank, report)}
    if ok(steps) and steps["data"]:
        context["step_chart"] = busy_idle_chart(page, "device-steps", steps["data"])
        context["step_table"] = table("device-steps-table", STEP_COLUMNS, [dict(s, **{f"idle_{c}": s["idle"][c] for c in IDLE_CAUSES}) for s in steps["data"]])
    if ok(kernels):
        context["kernel_table"] = table("device-kernels", KERNEL_COLUMNS, _named(kernels["data"], "kernel"), ("kernel", "launched_by"))
    if ok(types):
        context["type_charts"] = op_type_charts(page, "device-type-", types["data"], kinds="kernels", whole="all device time")
        context["type_table"] = table("device-kernel-types", KERNEL_TYPE_COLUMNS, _named(types["data"], "op_type"), ("op_type",))
    return context


def busy_idle_chart(page: Page, chart_id: str, steps: Sequence[Mapping[str, Any]]) -> str:
    """One stacked bar per step: the device's busy time, then its idle time by cause (the causes the steps have)."""
    xs = [s["step"] for s in steps]
    parts = [("Busy", BUSY_COLOR, [s["busy_ms"] for s in steps])]
    parts += [(f"Idle {IDLE_WORDS[c]}", IDLE_COLORS[c], [s["idle"][c] for s in steps]) for c in IDLE_CAUSES if any(s["idle"][c] for s in steps)]
    data = [{"type": "bar", "x": xs, "y": values, "name": label, "marker": {"color": color},
             "hovertemplate": f"step %{{x}}: {label} %{{y:.3f}} ms<extra></extra>"} for label, color, values in parts]
    return page.chart(chart_id, data, {"barmode": "stack", "height": 340, "title": {"text": "The device's time in each step: busy, and idle by cause (ms)"},
                                       "xaxis": {"title": {"text": "step"}}, "yaxis": {"title": {"text": "ms"}},
                                       "legend": {"orientation": "h", "y": -0.25, "traceorder": "normal"}})


def device_rows(steps: Sequence[Mapping[str, Any]], device: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The device card: the steps' means from the file (busy, idle by cause) and the step on the device's own clock."""
    rows: list[tuple[str, Any]] = []
    if steps:
        count = len(steps)
        step, busy = (sum(s[key] or 0.0 for s in steps) / count for key in ("step_ms", "busy_ms"))
        rows += [("steps", count), ("step, mean (ms)", fmt(step)), ("device busy, mean (ms)", f"{fmt(busy)} ({pct(busy / step if step else None)})")]
        rows += [(f"idle {IDLE_WORDS[c]}, mean (ms)", fmt(sum(s["idle"][c] or 0.0 for s in steps) / count)) for c in IDLE_CAUSES]
    timed = device.get("device_step_ms")
    if isinstance(timed, dict):
        rows.append(("step on the device (CUDA events) mean / p50 / p90 / max (ms)", " / ".join(fmt(timed.get(k)) for k in ("mean", "p50", "p90", "max"))))
    if "busy_share_unprofiled" in device:
        rows.append(("device busy, steps without the profiler",
                     f"{pct(device['busy_share_unprofiled'])} (of a {fmt(device.get('unprofiled_step_ms'))} ms step)"))
    return rows


def memory_rows(device: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The GPU memory card: the caching allocator's peaks and NVML's samples, as the summary's ``device`` holds them."""
    memory, nvml = _mapping(device.get("memory")), _mapping(device.get("nvml"))
    figures = (("peak allocated (MiB)", "peak_allocated_mb"), ("peak reserved (MiB)", "peak_reserved_mb"), ("device memory (MiB)", "total_mb"),
               ("allocated at the last sample (MiB)", "allocated_mb_last"))
    rows = [(label, fmt(memory.get(key), 0)) for label, key in figures if memory.get(key) is not None]
    if memory.get("source"):
        rows.append(("measured by", memory["source"]))
    if nvml.get("used_mb_max") is not None:
        rows.append(("NVML used, max (MiB)", fmt(nvml["used_mb_max"], 0)))
    return rows


def _named(rows: Sequence[Mapping[str, Any]], key: str) -> list[dict[str, Any]]:
    """Each row with ``name``: its ``key`` cut to ``NAME_CHARS``."""
    return [dict(row, name=short(row[key], NAME_CHARS)) for row in rows]


def _mapping(value: object) -> Mapping[str, Any]:
    """A summary's section as a mapping: {} where it is absent or not one."""
    return value if isinstance(value, dict) else {}


def _on_a_gpu(run: Run, rank: int) -> bool:
    return any(present(run.ranks[rank], rank, name) for name in DEVICE_FILES)


VIEW = View("device", "GPU", ("info", "summary", *DEVICE_FILES), device_page,
            hints={"device_steps": "The device's time a step is measured from its activities in the op window: set op_time: true (the default).",
                   "gpu_kernels": "Kernels are recorded in the op window: set op_time: true (the default).",
                   "gpu_op_types": "Kernels are recorded in the op window: set op_time: true (the default)."},
            takes_report=True, applies=_on_a_gpu)
