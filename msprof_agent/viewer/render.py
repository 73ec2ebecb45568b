"""The viewer's pages and report.html: values computed here, markup in templates/ (Jinja2, autoescaping on).

Each page has a view function that reads its sections (from ``data``), computes what the page shows
(rows, derived numbers, plotly figure specs) and returns the context of ``templates/<page>.html``.
Jinja2 escapes everything a template prints, so text from a profile (op names, paths, suggestion text,
evidence keys) reaches HTML as text; plotly labels go through ``plot_text`` (plotly reads a subset of
HTML in them), and the JSON the page's script reads through the ``json_blob`` filter, which leaves no
'<', '>' or '&' in it. static/viewer.js only hands the specs to Plotly and adds sorting, search and step
picking, writing text with ``textContent``. jinja2 is imported on the first page rendered, so the
server's module loads (and says what to install) without it.
"""
import contextlib
import functools
import html
import json
import os
import time
from urllib.parse import urlencode

import orjson

from .. import frameworks
from ..contract.columns import CPU_BUSY_STATES, FETCH_GET
from ..contract.names import SUMMARY, rank_file
from ..contract.readers import cpu_means
from ..contract.summary import read_summary
from .assets import TEMPLATE_DIR, static_text
from .sections import MAX_TABLE_ROWS, PAGES

PAGE_TITLES = {"overview": "Overview", "steps": "Step trace", "operators": "Operators", "data": "Data preparation",
               "resources": "Resources", "cluster": "Cluster"}
STAGES = (("iteration_interval", "Step interval"), ("fp_and_bp", "Forward + backward"), ("tail", "Step tail"))
STAGE_COLORS = {"iteration_interval": "#8fb3e0", "fp_and_bp": "#3b6fb6", "tail": "#f2a541", "data_wait": "#c0392b",
                "communication": "#2e8b57"}

# One sentence per section that can be absent: which option fills it; where frameworks differ, the
# framework profile's hints say why this framework has none.
FILLED_BY = {
    "step_trace": "No step was profiled: check start_step / stop_step, and that the training loop ran while profiling was on.",
    "queue": "The wait for data is recorded for every profiled step; this run profiled none (check start_step / stop_step).",
    "op_types": "Set op_time: true (the default) to record operators.",
    "op_detail": "Set op_time: true (the default) to record operators.",
    "op_shapes": "Set op_time: true (the default) to record operators; analyse again (msprof-agent analyse) if the run predates this table.",
    "flops": "With record_shapes: true (the default) FLOPs are estimated from input shapes.",
    "memory_summary": "Set profile_memory: true to record memory.",
    "memory_details": "Set profile_memory: true to record memory over time.",
    "cpu": "CPU utilization is sampled every cpu_sampling_interval ms; the run ended before a sample was taken.",
    "hccl": "Set profile_communication: true on a multi-card run to record communication.",
    "timeline": "Set op_time: true (the default) to write the timeline.",
    "python_hot_spots": "Set with_stack: true (or profile_framework: \"time\") to sample the training thread's Python stack every 5 ms "
                        "and see which functions the host time goes to.",
}


def profile_of_run(sections):
    """The run's framework profile, from its profiler_info or summary; MindSpore's when neither names a known framework."""
    for name in ("info", "summary"):
        section = sections.get(name)
        if ok(section) and isinstance(section["data"], dict) and section["data"].get("framework"):
            return frameworks.profile_of(section["data"]["framework"]) or frameworks.MINDSPORE
    return frameworks.MINDSPORE


def hints(profile):
    """FILLED_BY in one framework's words: {section: sentence}."""
    return dict(FILLED_BY, **profile.hints)


def info_rows(info, profile):
    """The run card's rows from profiler_info, in the framework's words: its version, and its mode (torch's
    is always eager, MindSpore's the run's context mode)."""
    data = info["data"] if ok(info) and isinstance(info["data"], dict) else {}
    if not data:
        return []
    rows = [(profile.version_label, data.get(profile.version_key) or data.get("framework_version")),
            ("mode", profile.fixed_mode or data.get("context_mode"))]
    rows += [("parallel mode", data.get("parallel_mode")), ("ranks", data.get("rank_size"))]
    return [(key, value) for key, value in rows if value not in (None, "")]


def plot_text(value):
    """Plotly renders a subset of HTML in labels and hover text; entities show as the plain characters."""
    return html.escape("" if value is None else str(value), quote=False)


def json_blob(value):
    """JSON safe to place inside <script type="application/json">: no '<', '>' or '&' survives.
    NaN and infinities, which JSON cannot hold, become null (orjson does that by itself)."""
    from markupsafe import Markup

    text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def fmt(value, digits=3):
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def count(value):
    """Counts are stored as floats in the CSVs; whole ones show without decimals."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return fmt(value)


def pct(value):
    return "—" if value is None else f"{value * 100:.1f}%"


def short(text, limit=32):
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def run_label(run_id):
    return "(the summary directory itself)" if run_id == "." else run_id


def run_url(page_name, run_id, rank):
    return f"/run/{page_name}?" + urlencode({"run": run_id, "rank": rank})


@functools.cache
def environment():
    """The template environment: autoescaping on, None prints as nothing, a misspelt name fails loudly.

    Compiled templates are kept in jinja2's per-user cache folder (under the temp dir, owner-only): the
    report is written at the end of every training run, and compiling its templates costs more than
    drawing them."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_DIR), autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, finalize=lambda value: "" if value is None else value,
                             bytecode_cache=_compiled_cache(jinja2))
    env.filters.update(json_blob=json_blob, fmt=fmt, count=count, pct=pct)
    env.tests["ok"] = ok
    env.globals.update(run_url=run_url, run_label=run_label, PAGE_TITLES=PAGE_TITLES, STAGES=STAGES)
    return env


def _compiled_cache(jinja2):
    """jinja2's file cache of compiled templates, where a folder it cannot use costs only the compile it would save."""

    class QuietCache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket):
            with contextlib.suppress(OSError):
                super().load_bytecode(bucket)

        def dump_bytecode(self, bucket):
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

    try:
        return QuietCache()
    except (OSError, RuntimeError):  # no temp dir, or one another user owns
        return None


def render(template, **context):
    return environment().get_template(template).render(**context)


class Page:
    """The chart specs and JSON blobs of one page (or of a report holding several); templates place the charts."""

    def __init__(self):
        self.charts, self.blobs = {}, {}

    def chart(self, chart_id, data, layout):
        base = {"margin": {"l": 50, "r": 20, "t": 36, "b": 40}, "height": 300, "font": {"size": 12}}
        base.update(layout)
        self.charts[chart_id] = {"data": data, "layout": base}
        return chart_id


def ok(section):
    return section is not None and section["status"] == "ok"


def table(table_id, columns, rows, search_keys=()):
    """A sortable table's cells: columns (key, title, kind) with kind 'text'|'num'|'count'|'pct'; rows: dicts.
    Each cell carries its sort value (data-v) and its shown text; the page shows the first MAX_TABLE_ROWS rows."""
    shown_rows = []
    for row in rows[:MAX_TABLE_ROWS]:
        cells = []
        for key, _, kind in columns:
            value = row.get(key)
            if kind == "text":
                cells.append((key, value, value))
                continue
            shown = pct(value) if kind == "pct" else count(value) if kind == "count" else fmt(value)
            cells.append((key, "" if value is None else repr(float(value)), shown))
        search = " ".join(str(row.get(k) or "") for k in search_keys).lower()
        shown_rows.append((search, cells))
    return {"id": table_id, "columns": [(key, title, "text" if kind == "text" else "num") for key, title, kind in columns],
            "rows": shown_rows, "total": len(rows), "limit": MAX_TABLE_ROWS}


# ---- charts shared by pages -------------------------------------------------------------------------

def stage_bar(page, chart_id, stages, title):
    """The step trace bar: one stacked horizontal bar of interval / forward+backward / tail."""
    data = []
    for key, label in STAGES:
        value = stages.get(key)
        if value is None:
            continue
        data.append({"type": "bar", "orientation": "h", "y": ["step"], "x": [value], "name": label,
                     "marker": {"color": STAGE_COLORS[key]}, "text": [f"{label} {value:.3f} ms"],
                     "textposition": "inside", "hovertemplate": f"{label}: %{{x:.3f}} ms<extra></extra>"})
    return page.chart(chart_id, data, {"barmode": "stack", "height": 170, "title": {"text": plot_text(title)},
                                       "xaxis": {"ticksuffix": " ms"}, "yaxis": {"visible": False},
                                       "legend": {"orientation": "h", "y": -0.35, "traceorder": "normal"}})


def op_type_charts(page, prefix, op_types, limit=20):
    """A pie and a bar (hidden until toggled) of the top operator types; returns the two chart ids. Each
    share is the table's (of all op time): the pie's last slice holds the types beyond the top ones."""
    top, rest = op_types[:limit], op_types[limit:]
    names = [plot_text(r["op_type"]) for r in top]
    labels = [plot_text(short(r["op_type"])) for r in top]  # torch's type names run to 60 characters
    values = [r["total_ms"] or 0 for r in top]
    shares = [pct(r["percent"]) for r in top]
    if rest:
        names.append(f"{len(rest)} other types")
        labels.append(names[-1])
        values.append(sum(r["total_ms"] or 0 for r in rest))
        shares.append(pct(sum(r["percent"] or 0 for r in rest)))
    title = {"text": f"Top {len(top)} operator types by time (share of all op time)"}
    pie = page.chart(prefix + "pie", [{"type": "pie", "labels": labels, "values": values, "customdata": names, "sort": False,
                                        "text": shares, "textinfo": "text", "textposition": "inside",
                                        "hovertemplate": "%{customdata}: %{value:.3f} ms (%{text})<extra></extra>"}],
                     {"height": 420, "title": title, "legend": {"font": {"size": 10}}})
    bar = page.chart(prefix + "bar", [{"type": "bar", "x": values[:len(top)][::-1], "y": labels[:len(top)][::-1],
                                        "orientation": "h", "customdata": names[:len(top)][::-1], "text": shares[:len(top)][::-1],
                                        "hovertemplate": "%{customdata}: %{x:.3f} ms (%{text})<extra></extra>"}],
                     {"height": max(300, 22 * len(top) + 80), "title": title,
                      "xaxis": {"title": {"text": "ms"}}, "margin": {"l": 230, "r": 20, "t": 36, "b": 40}})
    return pie, bar


# ---- overview ---------------------------------------------------------------------------------------

def _evidence_text(value):
    if isinstance(value, float):
        return fmt(value)
    return json.dumps(value) if isinstance(value, (dict, list)) else value


def step_numbers(steps):
    """The step numbers of a finding's ``evidence["steps"]``: step numbers, or ``[first, last]`` ranges."""
    numbers = set()
    for item in steps if isinstance(steps, list) else []:
        if isinstance(item, list) and len(item) == 2 and all(isinstance(n, int) for n in item):
            numbers.update(range(item[0], item[1] + 1))
        elif isinstance(item, int) and not isinstance(item, bool):
            numbers.add(item)
    return sorted(numbers)


def steps_text(numbers):
    """Step numbers as "3-5,9": the fragment ``#steps=...`` viewer.js reads to highlight them on the Step trace page."""
    runs = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def page_href(page_name, run, rank, report, fragment=""):
    """A link to another page of this rank: in the report an anchor in the same file, in the viewer the page's URL.
    In the report the page's own anchor is the fragment when one is given (viewer.js scrolls to its page)."""
    if report:
        return "#" + (fragment or page_name)
    return run_url(page_name, run.id, rank) + (f"#{fragment}" if fragment else "")


def findings_view(findings, run, rank, report=False):
    """The advisor's findings as the findings card shows them: evidence as text rows, and links (label, href, kind)
    to the steps they rest on, to the Python hot spots (host work) and to a straggler's own step trace."""
    out = []
    for f in findings if isinstance(findings, list) else []:
        if not isinstance(f, dict):
            continue
        evidence = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
        links, numbers = [], step_numbers(evidence.get("steps"))
        if numbers:
            text = steps_text(numbers)
            links.append((f"steps {text.replace(',', ', ')} on the Step trace", page_href("steps", run, rank, report, f"steps={text}"), "steps"))
        if f.get("id") == "host_work":
            links.append(("Python hot spots", page_href("steps", run, rank, report, HOT_SPOTS_ANCHOR), "hot-spots"))
        slow = evidence.get("rank")
        if f.get("id") == "straggler" and isinstance(slow, int) and slow in run.ranks and not (report and slow != rank):
            links.append((f"rank {slow}'s Step trace", page_href("steps", run, slow, report), "rank"))
        out.append(dict(f, evidence=[(k, _evidence_text(v)) for k, v in evidence.items()], links=links))
    return out


def data_stats(sections):
    """What the data preparation card shows: the summary's wait per step and the queue file's statistics."""
    summary = sections.get("summary")
    return {"queue": sections["queue"], "wait": (summary["data"].get("data_wait_ms") or {}) if ok(summary) else None}


def overview(page, run, rank, sections, report=False):
    summary = sections.get("summary")
    context = {"sections": sections, "report": report, "summary": summary, "data_prep": data_stats(sections), "findings": [],
               "info_rows": info_rows(sections.get("info"), profile_of_run(sections))}
    if ok(summary):
        context["suggestions"] = [{"id": sug.get("id"), "text": sug.get("text"),
                                   "evidence": [(k, _evidence_text(v)) for k, v in (sug.get("evidence") or {}).items()]}
                                  for sug in (summary["data"].get("suggestions") or []) if isinstance(sug, dict)]
        context["findings"] = findings_view(summary["data"].get("findings"), run, rank, report)
    st = sections["step_trace"]
    if ok(st):
        context["average"] = st["data"]["average"] or {}
        context["step_chart"] = stage_bar(page, "ov-step", context["average"], f"Average of {len(st['data']['steps'])} steps")
    if ok(sections["op_types"]):
        context["op_charts"] = op_type_charts(page, "ov-op", sections["op_types"]["data"])
    timeline_rows = []
    if ok(summary) and isinstance(summary["data"].get("timeline"), dict):
        tl = summary["data"]["timeline"]
        timeline_rows += [("events", tl.get("events")), ("truncated", tl.get("truncated"))]
        if tl.get("dropped"):
            timeline_rows.append(("dropped", tl.get("dropped")))
    ts = sections["timeline"]
    if ok(ts) and isinstance(ts["data"], dict):
        timeline_rows += [(k, v) for k, v in ts["data"].items() if not isinstance(v, (dict, list))]
    context["timeline_rows"] = timeline_rows
    return context


# ---- step trace -------------------------------------------------------------------------------------

def steps_page(page, run, rank, sections):
    st, points = sections["step_trace"], sections.get("point_info")
    context = {"step_trace": st, "points": points["data"] if ok(points) and isinstance(points["data"], dict) else None,
               "timeline": timeline_chart(page, "st-timeline", sections["step_timeline"]), "hot_spots": None,
               "hot_spots_anchor": HOT_SPOTS_ANCHOR}
    if not ok(st):
        return context
    steps, average = st["data"]["steps"], st["data"]["average"] or {}
    fp_at, bp_at = average.get("iteration_interval"), None
    if fp_at is not None and average.get("fp_and_bp") is not None:
        bp_at = fp_at + average["fp_and_bp"]
    page.blobs["msprof-steps"] = {"steps": steps, "average": average}
    summary = sections.get("summary")
    warmup = warmup_steps(summary["data"] if ok(summary) else {}, [s["step"] for s in steps])
    context["hot_spots"] = hot_spots_table(summary["data"] if ok(summary) else {}, warmup)
    return dict(context, steps=steps, average=average, fp_at=fp_at, bp_at=bp_at, bar=stage_bar(page, "st-bar", average, "Average step"),
                warmup=warmup, per_step=per_step_chart(page, "st-steps", steps, _step_waits(sections["queue"]),
                                                       _step_communication(sections["hccl"]), warmup))


HOT_SPOTS_ANCHOR = "python-hot-spots"
HOT_SPOT_COLUMNS = (("function", "Function (file)", "text"), ("range", "Steps", "text"), ("phase", "Range", "text"),
                    ("self_ms", "Self (ms)", "num"), ("total_ms", "Total (ms)", "num"), ("self_ms_per_step", "Self per step (ms)", "num"))


def hot_spots_table(summary, warmup):
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


def warmup_steps(summary, step_numbers):
    """The warm-up steps among STEP_NUMBERS. The summary's ``warmup_steps`` (absent in older summaries) is a count
    of first steps, a list of step numbers, or a list of ``{"step": n, ...}``."""
    marked = summary.get("warmup_steps") if isinstance(summary, dict) else None
    if isinstance(marked, bool) or not isinstance(marked, (int, list)):
        return []
    if isinstance(marked, int):
        return step_numbers[:marked]
    numbers = {m.get("step") if isinstance(m, dict) else m for m in marked}
    return [n for n in step_numbers if n in numbers]


def _step_waits(queue):
    """Wait for data per step (ms) from the queue file's fetch lines, or {}."""
    waits = {}
    if ok(queue):
        for fetch in queue["data"]["fetch"]:
            if fetch["kind"] == FETCH_GET:
                waits[fetch["step"]] = waits.get(fetch["step"], 0.0) + fetch["cost_ms"]
    return waits


def _step_communication(hccl):
    if not ok(hccl):
        return {}
    return {s["step"]: s["communication_ms"] for s in hccl["data"]["steps"] if s["communication_ms"] is not None}


def per_step_chart(page, chart_id, steps, waits, communication, warmup):
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
    layout = {"barmode": "stack", "height": 340, "title": {"text": "Where each step's time went (ms)"}, "xaxis": {"title": {"text": "step"}},
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


def _timeline_kind(event):
    track = event["track"].lower()
    if "data" in track:
        return "Data wait"
    if "communicat" in track:
        return "Communication"
    if event["name"] in TIMELINE_COLORS:
        return event["name"]
    return "Step" if event["name"].lower().startswith("step ") else "Other"


def timeline_chart(page, chart_id, timeline):
    """A zoomable (drag to zoom, double-click to reset) chart of step-level events, one row per rank and track;
    returns {"chart", "events", "left_out", "problems"}, chart None without events."""
    events = timeline["events"]
    out = {"chart": None, "events": len(events), "left_out": timeline["left_out"], "problems": timeline["problems"]}
    if not events:
        return out
    origin = min(e["ts"] for e in events)
    groups, tracks = {}, {}
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
                                                         "categoryarray": sorted(tracks, key=tracks.get)}, "margin": {"l": 260, "r": 20, "t": 40, "b": 40},
                                               "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "traceorder": "normal"}})
    return out


# ---- operators --------------------------------------------------------------------------------------

# The op tables' time is self time (nested ops left out, so shares add up to 1); "incl_ms" is the total
# with nested ops, summed from the by-shape table where the run has one.
TYPE_COLUMNS = (("op_type", "Type", "text"), ("occurrences", "Occurrences", "count"), ("per_step", "Per step", "count"),
                ("total_ms", "Self (ms)", "num"), ("incl_ms", "Total (ms)", "num"), ("avg_ms", "Avg self (ms)", "num"),
                ("percent", "Share", "pct"))
OP_COLUMNS = (("op_name", "Operator", "text"), ("op_type", "Type", "text"), ("occurrences", "Occurrences", "count"),
              ("total_ms", "Self (ms)", "num"), ("incl_ms", "Total (ms)", "num"), ("avg_ms", "Avg self (ms)", "num"),
              ("proportion", "Share", "pct"), ("full_op_name", "Full name", "text"))
SHAPE_COLUMNS = (("op_name", "Operator", "text"), ("op_type", "Type", "text"), ("input_shape", "Input shapes", "text"),
                 ("occurrences", "Occurrences", "count"), ("self_ms", "Self (ms)", "num"), ("total_ms", "Total (ms)", "num"))
FLOPS_COLUMNS = (("mflops_cube", "MFLOPs (cube)", "num"), ("gflops_cube", "GFLOPS (cube)", "num"),
                 ("mflops_vec", "MFLOPs (vec)", "num"), ("gflops_vec", "GFLOPS (vec)", "num"))


def _including_nested(shapes, key):
    """Total time with nested ops (ms) per op name or type, summed over the by-shape rows."""
    totals = {}
    for row in shapes:
        totals[row[key]] = totals.get(row[key], 0.0) + (row["total_ms"] or 0.0)
    return totals


def operators_page(page, run, rank, sections):
    flops_summary, types, detail, flops = sections["flops_summary"], sections["op_types"], sections["op_detail"], sections["flops"]
    shapes = sections["op_shapes"]
    context = {"flops_summary": flops_summary, "types": types, "detail": detail, "flops": flops, "shapes": shapes}
    shape_rows = shapes["data"] if ok(shapes) else []
    by_type, by_name = _including_nested(shape_rows, "op_type"), _including_nested(shape_rows, "op_name")
    if ok(shapes):
        context["shape_table"] = table("op-shapes", SHAPE_COLUMNS, shape_rows, ("op_name", "op_type", "input_shape"))
    if ok(types):
        context["type_charts"] = op_type_charts(page, "op-", types["data"])
        context["type_table"] = table("op-types", TYPE_COLUMNS, [dict(r, incl_ms=by_type.get(r["op_type"])) for r in types["data"]], ("op_type",))
    if ok(detail):
        columns, rows = OP_COLUMNS, [dict(r, incl_ms=by_name.get(r["full_op_name"])) for r in detail["data"]]
        if ok(flops):
            by_name = flops["data"]
            rows = [dict(r, **dict(zip(("mflops_cube", "gflops_cube", "mflops_vec", "gflops_vec"),
                                       by_name.get(r["full_op_name"]) or by_name.get(r["op_name"]) or [None] * 4))) for r in rows]
            columns = OP_COLUMNS + FLOPS_COLUMNS
        context["detail_table"] = table("op-detail", columns, rows, ("op_name", "op_type", "full_op_name"))
    return context


# ---- data preparation -------------------------------------------------------------------------------

PIPELINE_COLUMNS = (("op_id", "Id", "count"), ("op_type", "Op", "text"), ("num_workers", "Workers", "count"),
                    ("queue_average", "Avg queue", "num"), ("queue_length", "Queue capacity", "count"),
                    ("queue_usage", "Queue usage", "pct"), ("why", "Bottleneck", "text"))


def data_page(page, run, rank, sections):
    queue, pipeline = sections["queue"], sections["pipeline"]
    context = {"data_prep": data_stats(sections), "queue": queue, "pipeline": pipeline}
    if ok(queue):  # a chart only over records there are: no empty axes
        q, f = queue["data"]["queue"], [r for r in queue["data"]["fetch"] if r["kind"] == FETCH_GET]
        charts = []
        if q:
            charts.append(page.chart("dp-queue", [{"type": "bar", "x": [r["step"] for r in q], "y": [r["size"] for r in q], "name": "queue size"}],
                                     {"title": {"text": f"Data queue size at each fetch ({len(q)} samples)"}, "xaxis": {"title": {"text": "step"}}}))
        if f:
            charts.append(page.chart("dp-fetch", [{"type": "scatter", "mode": "lines+markers", "x": [r["step"] for r in f],
                                                   "y": [r["cost_ms"] for r in f], "name": "wait (ms)"}],
                                     {"title": {"text": "Wait for data in each step (ms)"}, "xaxis": {"title": {"text": "step"}}}))
        if charts:
            context["gap_charts"] = charts
    if not ok(pipeline):
        return context
    ops, marked = pipeline["data"]["ops"], {m["op_id"]: m["why"] for m in pipeline["data"]["bottlenecks"]}
    context["graph"] = pipeline_columns(ops, marked)
    context["pipeline_table"] = table("pipeline-ops", PIPELINE_COLUMNS, [dict(op, why=marked.get(op["op_id"], "")) for op in ops], ("op_type",))
    sampled = [op for op in ops if op["queue_sizes"]]
    traces = [{"type": "scatter", "mode": "lines+markers", "x": list(range(1, len(op["queue_sizes"]) + 1)), "y": op["queue_sizes"],
               "name": plot_text(f'{op["op_type"]} #{op["op_id"]}')} for op in sampled]
    if traces:
        counts = sorted({len(op["queue_sizes"]) for op in sampled})
        every = sorted({op["sample_interval"] for op in sampled if op["sample_interval"]})
        title = (f"Pipeline ops' output queue size: {'/'.join(map(str, counts))} samples of the dataset profiler"
                 + (f", every {'/'.join(count(v) for v in every)} ms" if every else ""))
        context["queue_chart"] = page.chart("dp-op-queues", traces, {"title": {"text": title}, "xaxis": {"title": {"text": "sample"}}})
    return context


def pipeline_columns(ops, marked):
    """Dataset ops laid out by depth, sources on the left: a list of columns of boxes (op, usage bar width, why)."""
    by_id = {op["op_id"]: op for op in ops}
    depth = {}

    def level(op_id, seen=()):
        if op_id in depth:
            return depth[op_id]
        op = by_id[op_id]
        children = [c for c in op["children"] if c in by_id and c not in seen]
        depth[op_id] = 1 + max((level(c, seen + (op_id,)) for c in children), default=-1)
        return depth[op_id]

    for op_id in by_id:
        level(op_id)
    columns = {}
    for op_id, d in depth.items():
        columns.setdefault(d, []).append(by_id[op_id])
    return [[{"op": op, "bottleneck": op["op_id"] in marked, "why": marked.get(op["op_id"]),
              "width": f'{0 if op["queue_usage"] is None else max(0.0, min(op["queue_usage"], 1.0)) * 100:.0f}'}
             for op in sorted(columns[d], key=lambda o: o["op_id"])] for d in sorted(columns)]


# ---- resources --------------------------------------------------------------------------------------

def resources_page(page, run, rank, sections):
    cpu = sections["cpu"]
    context = {"cpu": cpu, "memory": memory(page, sections)}
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


def machine_states(x, dev):
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


def memory(page, sections):
    """The memory card's values: the summary's peaks, the memory summary file's scalars, the curve and its chart."""
    summary, ms, md = sections.get("summary"), sections["memory_summary"], sections["memory_details"]
    context = {"summary_file": ms, "details": md, "peaks": None, "scalars": [], "chart": None}
    if ok(summary) and isinstance(summary["data"].get("memory"), dict):
        context["peaks"] = summary["data"]["memory"]
    if ok(ms) and isinstance(ms["data"], dict):
        context["scalars"] = [(f"{k} (GiB)" if k in ("capacity", "peak_mem", "static_mem") else k, k, fmt(v))
                              for k, v in ms["data"].items() if not isinstance(v, (dict, list))]
    if not ok(md):
        return context
    traces = []
    over_time = all(g["x"] is not None for g in md["data"])
    for graph in md["data"]:
        xs = graph["x"] if graph["x"] is not None else list(range(len(graph["lines"])))
        traces.append({"type": "scatter", "mode": "lines", "x": xs, "y": graph["lines"], "name": plot_text(f'graph {graph["graph_id"]}')})
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


# ---- cluster ----------------------------------------------------------------------------------------

CLUSTER_COLUMNS = (("rank", "Rank", "count"), ("total", "Step (ms)", "num"), ("iteration_interval", "Interval (ms)", "num"),
                   ("fp_and_bp", "Fwd+bwd (ms)", "num"), ("tail", "Tail (ms)", "num"), ("communication", "Communication (ms)", "num"),
                   ("wait", "Comm. wait (ms)", "num"), ("slowest", "", "text"))


def cluster_page(page, run, rank, loaded, report=False):
    ranks, slowest = loaded["ranks"], loaded["slowest"]
    cluster = loaded["cluster_summary"]
    findings = findings_view(cluster["data"].get("findings"), run, rank, report) if ok(cluster) and isinstance(cluster["data"], dict) else []
    timeline = timeline_chart(page, "cl-timeline", loaded["step_timeline"])
    rows, problems = [], []
    for r, sections in ranks.items():
        st, hccl = sections["step_trace"], sections["hccl"]
        row = {"rank": r}
        if ok(st) and st["data"]["average"]:
            row.update({k: st["data"]["average"].get(k) for k in ("total", "iteration_interval", "fp_and_bp", "tail")})
        elif st["status"] == "error":
            problems.append((r, st))
        if ok(hccl) and hccl["data"]["average"]:
            row.update({"communication": hccl["data"]["average"]["communication_ms"], "wait": hccl["data"]["average"]["wait_ms"]})
        elif hccl["status"] == "error":
            problems.append((r, hccl))
        row["slowest"] = "slowest" if r == slowest else ""
        rows.append(row)
    labels = [f"rank {row['rank']}" + (" (slowest)" if row["slowest"] else "") for row in rows]
    stage_traces = [{"type": "bar", "x": labels, "y": [row.get(k) for row in rows], "name": label, "marker": {"color": STAGE_COLORS[k]}}
                    for k, label in STAGES]
    context = {"several": len(ranks) > 1, "problems": problems, "findings": findings, "cluster_summary": cluster,
               "table": table("cluster-ranks", CLUSTER_COLUMNS, rows), "timeline": timeline,
               "stage_chart": page.chart("cl-stages", stage_traces, {"barmode": "stack", "title": {"text": "Mean stage times per rank (ms)"}}),
               "comm_chart": None}
    if any(row.get("communication") is not None for row in rows):
        comm = [{"type": "bar", "x": labels, "y": [row.get(k) for row in rows], "name": label}
                for k, label in (("communication", "communication"), ("wait", "wait"))]
        context["comm_chart"] = page.chart("cl-comm", comm, {"barmode": "group", "title": {"text": "Communication per step per rank (ms)"}})
    return context


VIEWS = {"overview": overview, "steps": steps_page, "operators": operators_page, "data": data_page,
         "resources": resources_page, "cluster": cluster_page}


# ---- documents --------------------------------------------------------------------------------------

def page_body(page, name, run, rank, sections, report=False):
    """One page's cards, rendered from templates/<name>.html with what its view computed, in the run's framework's words."""
    view = VIEWS[name]
    context = view(page, run, rank, sections, report) if name in ("overview", "cluster") else view(page, run, rank, sections)
    profile = profile_of_run(sections)
    from markupsafe import Markup

    return Markup(render(f"{name}.html", run=run, rank=rank, profile=profile, hints=hints(profile), **context))


def run_page(run, rank, page_name, loaded):
    page = Page()
    body = page_body(page, page_name, run, rank, loaded)
    return render("run.html", run=run, rank=rank, page_name=page_name, pages=PAGES, body=body, page=page)


def run_row(run):
    """The runs index's row of one run: its first rank's summary (date from the file), or blanks where it has none."""
    rank = min(run.ranks)
    directory = run.ranks[rank]
    try:
        summary = read_summary(directory, rank)
        date = os.path.getmtime(os.path.join(directory, rank_file(SUMMARY, rank)))
    except (OSError, ValueError):
        summary, date = {}, None
    summary = summary if isinstance(summary, dict) else {}
    return {"date": date, "date_text": time.strftime("%Y-%m-%d %H:%M", time.localtime(date)) if date else "—",
            "framework": summary.get("framework"), "steps": summary.get("steps_profiled"),
            "p50": (summary.get("step_time_ms") or {}).get("p50"), "verdict": summary.get("verdict")}


def index_page(base, runs):
    return render("index.html", base=base, runs=[(run_id, runs[run_id], run_row(runs[run_id])) for run_id in sorted(runs)])


def error_page(status, message):
    return render("error.html", status=status, message=message)


def report_pages(run):
    """The viewer's pages the report of a run carries: all, the cluster page only where the run has several ranks."""
    return tuple(name for name in PAGES if name != "cluster" or len(run.ranks) > 1)


def report(run, rank, loaded_pages, plotly_js):
    """report.html: every page the viewer has for one rank, in one offline file."""
    page = Page()
    bodies = [(name, page_body(page, name, run, rank, loaded_pages[name], report=True)) for name in report_pages(run)]
    inline = {"css": static_text("viewer.css"), "plotly_js": plotly_js, "viewer_js": static_text("viewer.js")}
    return render("report.html", rank=rank, bodies=bodies, page=page, inline=inline)
