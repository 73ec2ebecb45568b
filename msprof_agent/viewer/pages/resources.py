"""The Resources page: machine and process CPU, memory."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...contract.columns import CPU_BUSY_STATES
from ...contract.readers import cpu_means
from ..render import fmt, ok, plot_text
from ..views import View

if TYPE_CHECKING:
    from ..render import Page
    from ..sections import Loaded, Run


def resources_page(page: Page, run: Run, rank: int, sections: Loaded) -> dict[str, Any]:
    cpu = sections["cpu"]
    context: dict[str, Any] = {"cpu": cpu, "memory": memory(page, sections)}
    if not ok(cpu):
        return context
    c = cpu["data"]
    ts = c.get("time_stamp") or []
    x = [(t - ts[0]) / 1000.0 for t in ts] if ts else []
    dev, proc = c.get("device_info") or {}, c.get("process_info") or {}
    context["cpu_data"] = c
    context["means"] = cpu_means(c)  # time-weighted: the summary's and the report's figures
    context["cpu_charts"] = []
    if len(x) < 2:
        return context  # one sample draws no line, only empty axes
    machine = machine_states(x, dev)
    process = [{"type": "scatter", "mode": "lines", "x": x, "y": proc.get(k) or [], "name": k.replace("_utilization", "")}
               for k in ("user_utilization", "sys_utilization") if proc.get(k)]
    charts = [page.chart("cpu-machine", machine, {"title": {"text": "Machine CPU busy (%), by state"}, "xaxis": {"title": {"text": "s"}},
                                                  "yaxis": {"rangemode": "tozero"}}),
              page.chart("cpu-process", process, {"title": {"text": "Process CPU utilization (%)"}, "xaxis": {"title": {"text": "s"}}})]
    op_traces = []
    for op in c.get("op_info") or []:
        metrics = op.get("metrics") or {}
        user, sys_ = metrics.get("user_utilization") or [], metrics.get("sys_utilization") or []
        if user:
            total = [u + (sys_[i] if i < len(sys_) and isinstance(sys_[i], (int, float)) else 0) for i, u in enumerate(user)]
            op_traces.append({"type": "scatter", "mode": "lines+markers", "x": list(range(1, len(total) + 1)), "y": total,
                              "name": plot_text(f'op {op.get("op_id")} {op.get("op_type", "")}'.strip())})
    if op_traces and any(any(trace["y"]) for trace in op_traces):  # the dataset profiler's own samples, not the CPU sampler's
        charts.append(page.chart("cpu-ops", op_traces, {"title": {"text": "Pipeline op CPU utilization, user + sys (%), per dataset profiler sample"},
                                                        "xaxis": {"title": {"text": "sample"}}}))
    elif op_traces:
        context["cpu_ops_note"] = (f"Pipeline op CPU utilization: nothing measured (MindSpore's dataset profiler reported 0 % for each of the "
                                   f"{len(op_traces)} ops in every sample), so no chart is drawn.")
    context["cpu_charts"] = charts
    return context


def machine_states(x: list[float], dev: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The machine's busy time stacked by state (``CPU_BUSY_STATES``), the kernel's irq/softirq rest on top
    where there is one, and busy (100 - idle) as a line: the states add up to it."""
    busy = [100 - v for v in dev.get("idle_utilization") or []]
    states = [(state, dev[key]) for key, state in CPU_BUSY_STATES.items() if dev.get(key)]
    rest = [max(0, b - sum(values[i] for _, values in states if i < len(values))) for i, b in enumerate(busy)]
    if any(rest):
        states.append(("irq, softirq (the rest)", rest))
    traces = [{"type": "scatter", "mode": "lines", "stackgroup": "busy", "x": x, "y": values, "name": state} for state, values in states]
    if busy:
        traces.append({"type": "scatter", "mode": "lines", "x": x, "y": busy, "name": "busy (100 - idle)", "line": {"dash": "dot", "color": "#222"}})
    return traces


# The memory summary file's figures the page shows; its allocation counters and static memory are MindInsight's
# graph-memory fields, which a sampled curve (RSS, or torch's allocator) does not have: they stay in the file.
MEMORY_SCALARS = {"capacity": "capacity (GiB)", "peak_mem": "peak_mem (GiB)", "source": "measured from"}


def memory(page: Page, sections: Loaded) -> dict[str, Any]:
    """The memory card's values: the summary's peaks, the memory summary file's scalars, the curve and its chart."""
    summary, ms, md = sections.get("summary"), sections["memory_summary"], sections["memory_details"]
    context: dict[str, Any] = {"summary_file": ms, "details": md, "peaks": None, "scalars": [], "chart": None}
    if ok(summary) and isinstance(summary["data"].get("memory"), dict):
        context["peaks"] = summary["data"]["memory"]
    source = None
    if ok(ms) and isinstance(ms["data"], dict):
        source = ms["data"].get("source")
        context["scalars"] = [(MEMORY_SCALARS[k], k, fmt(v)) for k, v in ms["data"].items() if k in MEMORY_SCALARS]
    if not ok(md):
        return context
    traces = []
    over_time = all(g["x"] is not None for g in md["data"])
    for graph in md["data"]:
        xs = graph["x"] if graph["x"] is not None else list(range(len(graph["lines"])))
        traces.append({"type": "scatter", "mode": "lines", "x": xs, "y": graph["lines"], "name": plot_text(source or f'graph {graph["graph_id"]}')})
        if graph["peak"] is not None:
            at = xs[graph["lines"].index(graph["peak"])]
            traces.append({"type": "scatter", "mode": "markers+text", "x": [at], "y": [graph["peak"]], "text": [f'peak {graph["peak"]:.3f}'],
                           "textposition": "top center", "marker": {"color": "#c0392b", "size": 9}, "showlegend": False})
    peaks = [g["peak"] for g in md["data"] if g["peak"] is not None]
    context["curve_peak"] = max(peaks) if peaks else None
    if max((len(g["lines"]) for g in md["data"]), default=0) < 2:
        return context  # one sample draws no curve, only empty axes; the peak is shown above
    context["chart"] = page.chart("mem-lines", traces, {"title": {"text": "Memory over " + ("time" if over_time else "execution") + " (MB)"},
                                                        "xaxis": {"title": {"text": "s" if over_time else "execution order"}}})
    return context


VIEW = View("resources", "Resources", ("info", "summary", "cpu", "memory_summary", "memory_details"), resources_page,
            hints={"memory_summary": "Set profile_memory: true to record memory.",
                   "memory_details": "Set profile_memory: true to record memory over time.",
                   "cpu": "CPU utilization is sampled every cpu_sampling_interval ms; the run ended before a sample was taken."})
