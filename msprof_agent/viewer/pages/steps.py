"""The Step trace page: the per-step chart, the zoomable timeline of steps and stages, the step table, the Python hot spots."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...contract.columns import FETCH_GET
from ..merged_timeline import step_timeline
from ..render import STAGE_COLORS, Column, ok, plot_text, stage_bar, table
from ..views import View

if TYPE_CHECKING:
    from ..render import Page
    from ..sections import Loaded, Run, Section


def steps_page(page: Page, run: Run, rank: int, sections: Loaded) -> dict[str, Any]:
    st, points = sections["step_trace"], sections.get("point_info")
    context: dict[str, Any] = {"step_trace": st, "points": points["data"] if ok(points) and isinstance(points["data"], dict) else None,
               "timeline": timeline_chart(page, "st-timeline", sections["step_timeline"]), "hot_spots": None,
               "hot_spots_anchor": HOT_SPOTS_ANCHOR}
    if not ok(st):
        return context
    steps = st["data"]["steps"]
    average, title = mean_step(sections)
    fp_at, bp_at = average.get("iteration_interval"), None
    if fp_at is not None and average.get("fp_and_bp") is not None:
        bp_at = fp_at + average["fp_and_bp"]
    page.blobs["msprof-steps"] = {"steps": steps, "average": average}
    summary = sections.get("summary")
    warmup = warmup_steps(summary["data"] if ok(summary) else {}, [s["step"] for s in steps])
    context["hot_spots"] = hot_spots_table(summary["data"] if ok(summary) else {}, warmup)
    return dict(context, steps=steps, average=average, fp_at=fp_at, bp_at=bp_at, bar=stage_bar(page, "st-bar", average, title), average_title=title,
                warmup=warmup, per_step=per_step_chart(page, "st-steps", steps, _step_waits(sections["queue"]),
                                                       _step_communication(sections["hccl"]), warmup))


def mean_step(sections: Loaded) -> tuple[dict[str, Any], str]:
    """The step every page shows as the run's: the steady steps' mean (warm-up left out, the summary's and the
    findings' definition), and its title; the step trace file's average over every step where no summary is there."""
    summary, st = sections.get("summary"), sections["step_trace"]
    data = summary["data"] if summary is not None and ok(summary) else {}
    if data.get("stages_ms"):
        return dict(data["stages_ms"], total=(data.get("step_time_ms") or {}).get("mean")), f"Mean of the {data.get('steady_steps')} steady steps"
    return (st["data"]["average"] or {}) if ok(st) else {}, f"Average of {len(st['data']['steps']) if ok(st) else 0} steps"


HOT_SPOTS_ANCHOR = "python-hot-spots"
HOT_SPOT_COLUMNS: tuple[Column, ...] = (("function", "Function (file)", "text"), ("range", "Steps", "text"), ("phase", "Range", "text"),
                    ("self_ms", "Self (ms)", "num"), ("total_ms", "Total (ms)", "num"), ("self_ms_per_step", "Self per step (ms)", "num"))


def hot_spots_table(summary: object, warmup: Sequence[int]) -> dict[str, Any] | None:
    """The summary's ``python_hot_spots`` (sampled self and total time per function, steady and warm-up step ranges)
    as a sortable table, steady first, or None when the run sampled no Python stack."""
    spots = [s for s in (summary.get("python_hot_spots") or []) if isinstance(s, dict)] if isinstance(summary, dict) else []
    if not spots:
        return None
    rows = []
    for spot in spots:
        first, last = (list(spot.get("steps") or []) + [None, None])[:2]
        rows.append(dict(spot, range=f"{first}-{last}" if first != last else str(first), phase="warm-up" if first in warmup else "steady"))
    rows.sort(key=lambda r: (r["phase"] != "steady", -(r.get("self_ms") or 0.0)))
    return table("hot-spots", HOT_SPOT_COLUMNS, rows, ("function",))


def warmup_steps(summary: object, step_numbers: list[int]) -> list[int]:
    """The warm-up steps among STEP_NUMBERS. The summary's ``warmup_steps`` (absent in older summaries) is a count
    of first steps, a list of step numbers, or a list of ``{"step": n, ...}``."""
    marked = summary.get("warmup_steps") if isinstance(summary, dict) else None
    if isinstance(marked, bool) or not isinstance(marked, (int, list)):
        return []
    if isinstance(marked, int):
        return step_numbers[:marked]
    numbers = {m.get("step") if isinstance(m, dict) else m for m in marked}
    return [n for n in step_numbers if n in numbers]


def _step_waits(queue: Section | None) -> dict[int, float]:
    """Wait for data per step (ms) from the queue file's fetch lines, or {}."""
    waits: dict[int, float] = {}
    if ok(queue):
        for fetch in queue["data"]["fetch"]:
            if fetch["kind"] == FETCH_GET:
                waits[fetch["step"]] = waits.get(fetch["step"], 0.0) + fetch["cost_ms"]
    return waits


def _step_communication(hccl: Section | None) -> dict[int, float]:
    if not ok(hccl):
        return {}
    return {s["step"]: s["communication_ms"] for s in hccl["data"]["steps"] if s["communication_ms"] is not None}


def per_step_chart(page: Page, chart_id: str, steps: Sequence[Mapping[str, Any]], waits: Mapping[int, float],
                   communication: Mapping[int, float], warmup: Sequence[int]) -> str:
    """One stacked bar per step: the interval split into the wait for data and the rest, forward+backward, tail;
    communication (inside the step, so beside the stack) where recorded; warm-up steps shaded."""
    xs = [s["step"] for s in steps]
    wait = [min(waits.get(s["step"], 0.0), s.get("iteration_interval") or 0.0) for s in steps]
    parts = [("data_wait", "Data wait", wait) if waits else None,
             ("iteration_interval", "Step interval (other)" if waits else "Step interval",
              [(s.get("iteration_interval") or 0.0) - w for s, w in zip(steps, wait)]),
             ("fp_and_bp", "Forward + backward", [s.get("fp_and_bp") for s in steps]),
             ("tail", "Step tail", [s.get("tail") for s in steps])]
    data = [{"type": "bar", "x": xs, "y": values, "name": label, "marker": {"color": STAGE_COLORS[key]},
             "hovertemplate": f"step %{{x}}: {label} %{{y:.3f}} ms<extra></extra>"} for key, label, values in filter(None, parts)]
    if communication:
        data.append({"type": "scatter", "mode": "markers", "x": xs, "y": [communication.get(n) for n in xs], "name": "Communication (within the step)",
                     "marker": {"color": STAGE_COLORS["communication"], "symbol": "diamond", "size": 9},
                     "hovertemplate": "step %{x}: communication %{y:.3f} ms<extra></extra>"})
    layout: dict[str, Any] = {"barmode": "stack", "height": 340, "title": {"text": "Where each step's time went (ms)"}, "xaxis": {"title": {"text": "step"}},
              "yaxis": {"title": {"text": "ms"}}, "legend": {"orientation": "h", "y": -0.25, "traceorder": "normal"}}
    if warmup:  # one shaded band per warm-up step: they need not be consecutive
        layout["shapes"] = [{"type": "rect", "xref": "x", "yref": "paper", "x0": n - 0.5, "x1": n + 0.5, "y0": 0, "y1": 1,
                             "fillcolor": "#999", "opacity": 0.2, "line": {"width": 0}, "layer": "below"} for n in warmup]
        layout["annotations"] = [{"xref": "x", "yref": "paper", "x": warmup[0], "y": 1, "yanchor": "bottom", "text": "warm-up", "showarrow": False}]
    return page.chart(chart_id, data, layout)


# The step-level timeline's kinds of bar (the stage events are named as the timeline writer names them) and their colours.
TIMELINE_COLORS = {"Step": "#7f8c9a", "Step Interval": STAGE_COLORS["iteration_interval"], "Forward+Backward": STAGE_COLORS["fp_and_bp"],
                   "Tail": STAGE_COLORS["tail"], "Data wait": STAGE_COLORS["data_wait"], "Communication": STAGE_COLORS["communication"],
                   "Other": "#bbb"}


def _timeline_kind(event: Mapping[str, Any]) -> str:
    track = event["track"].lower()
    name: str = event["name"]  # sections.step_timeline's events name themselves with text
    if "data" in track:
        return "Data wait"
    if "communicat" in track:
        return "Communication"
    if name in TIMELINE_COLORS:
        return name
    return "Step" if name.lower().startswith("step ") else "Other"


def timeline_chart(page: Page, chart_id: str, timeline: Mapping[str, Any]) -> dict[str, Any]:
    """A zoomable (drag to zoom, double-click to reset) chart of step-level events, one row per rank and track;
    returns {"chart", "events", "left_out", "problems"}, chart None without events."""
    events = timeline["events"]
    out: dict[str, Any] = {"chart": None, "events": len(events), "left_out": timeline["left_out"], "problems": timeline["problems"]}
    if not events:
        return out
    origin = min(e["ts"] for e in events)
    groups: dict[str, dict[str, list[Any]]] = {}  # kind of bar -> its plotly columns
    tracks: dict[str, tuple[int, int]] = {}  # track label -> (rank, order of appearance): the rows' order
    for e in events:
        number = e["rank"].replace("Rank ", "")
        track = plot_text(f'rank {number} · {e["track"]}')
        tracks.setdefault(track, (int(number) if number.isdigit() else 0, len(tracks)))
        group = groups.setdefault(_timeline_kind(e), {"y": [], "base": [], "x": [], "text": []})
        group["y"].append(track)
        group["base"].append(round((e["ts"] - origin) / 1000.0, 4))
        group["x"].append(round(e["dur"] / 1000.0, 4))
        group["text"].append(plot_text(e["name"]))
    data = [{"type": "bar", "orientation": "h", "name": kind, "y": g["y"], "base": g["base"], "x": g["x"], "customdata": g["text"],
             "marker": {"color": TIMELINE_COLORS[kind]}, "hovertemplate": "%{customdata}: %{base:.3f} ms + %{x:.3f} ms<extra></extra>"}
            for kind, g in groups.items()]
    rows = len(tracks)
    out["chart"] = page.chart(chart_id, data, {"barmode": "overlay", "height": 160 + 40 * rows, "dragmode": "zoom",
                                               "xaxis": {"title": {"text": "ms from the first event (drag to zoom, double-click to reset)"},
                                                         "rangeslider": {"visible": True}},
                                               "yaxis": {"autorange": "reversed", "fixedrange": True, "categoryorder": "array",
                                                         "categoryarray": sorted(tracks, key=tracks.__getitem__)},
                                               "margin": {"l": 260, "r": 20, "t": 40, "b": 40},
                                               "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "traceorder": "normal"}})
    return out


def _step_timeline(run: Run, rank: int, loaded: Loaded) -> None:
    """The rank's step-level timeline, drawn under the step chart."""
    loaded["step_timeline"] = step_timeline(run, [rank])


VIEW = View("steps", "Step trace", ("info", "summary", "step_trace", "point_info", "queue", "hccl"), steps_page,
            hints={"step_trace": "No step was profiled: check start_step / stop_step, and that the training loop ran while profiling was on.",
                   "queue": "The wait for data is recorded for every profiled step; this run profiled none (check start_step / stop_step).",
                   "python_hot_spots": "Set with_stack: true (or profile_framework: \"time\") to sample the training thread's Python stack every 5 ms "
                                       "and see which functions the host time goes to."},
            more=_step_timeline)
