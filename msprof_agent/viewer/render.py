"""HTML for the viewer's pages and for report.html, built from the sections ``data`` reads.

Everything that comes from a profile (op names, paths, suggestion text, evidence keys) goes through
``esc`` into HTML, through ``plot_text`` into plotly labels (plotly reads a subset of HTML in its
labels), and through ``json_blob`` into the JSON the page's script reads: never raw into markup.
Charts are plotly figure specs computed here; static/viewer.js only hands them to Plotly and adds
sorting, search and step picking, writing text with ``textContent``.
"""
import html
import json
import os
from urllib.parse import urlencode

import orjson

from .. import contract
from .sections import MAX_TABLE_ROWS, PAGES

PAGE_TITLES = {"overview": "Overview", "steps": "Step trace", "operators": "Operators", "data": "Data preparation",
               "resources": "Resources", "cluster": "Cluster"}
STAGES = (("iteration_interval", "Step interval"), ("fp_and_bp", "Forward + backward"), ("tail", "Step tail"))
STAGE_COLORS = {"iteration_interval": "#8fb3e0", "fp_and_bp": "#3b6fb6", "tail": "#f2a541"}
STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


def esc(value):
    return html.escape("" if value is None else str(value), quote=True)


def plot_text(value):
    """Plotly renders a subset of HTML in labels and hover text; entities show as the plain characters."""
    return html.escape("" if value is None else str(value), quote=False)


def json_blob(value):
    """JSON safe to place inside <script type="application/json">: no '<', '>' or '&' survives.
    NaN and infinities, which JSON cannot hold, become null (orjson does that by itself)."""
    text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


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


class Page:
    """Collects the HTML parts and the chart specs of one page (or of a report holding several)."""

    def __init__(self):
        self.parts, self.charts, self.blobs = [], {}, {}

    def add(self, text):
        self.parts.append(text)

    def chart(self, chart_id, data, layout, hidden=False):
        base = {"margin": {"l": 50, "r": 20, "t": 36, "b": 40}, "height": 300, "font": {"size": 12}}
        base.update(layout)
        self.charts[chart_id] = {"data": data, "layout": base}
        style = ' style="display:none"' if hidden else ""
        return f'<div class="chart" id="chart-{esc(chart_id)}"{style}></div>'

    def body(self):
        return "\n".join(self.parts)

    def scripts(self):
        out = f'<script type="application/json" id="msprof-charts">{json_blob(self.charts)}</script>'
        for key, value in self.blobs.items():
            out += f'\n<script type="application/json" id="{esc(key)}">{json_blob(value)}</script>'
        return out


def card(title, body, extra_class=""):
    return f'<section class="card {extra_class}"><h2>{esc(title)}</h2>{body}</section>'


def section_state(section):
    """The HTML to show instead of data, or None when the section holds data."""
    if section is None or section["status"] == "missing":
        name = section["file"] if section else ""
        return f'<p class="missing">not collected <span class="file">({esc(name)} not found)</span></p>'
    if section["status"] == "error":
        return f'<p class="error">Cannot read {esc(section["file"])}: {esc(section["error"])}</p>'
    return None


def kv_table(rows, css="kv"):
    cells = "".join(f'<tr><th>{esc(k)}</th><td data-key="{esc(k)}">{v}</td></tr>' for k, v in rows)
    return f'<table class="{css}">{cells}</table>'


def sortable_table(table_id, columns, rows, search_keys=None):
    """columns: (key, title, kind) with kind 'text'|'num'|'pct'; rows: dicts. Cells carry data-v for sorting."""
    head = "".join(f'<th data-kind="{"text" if kind == "text" else "num"}" data-col="{esc(key)}">{esc(title)}</th>'
                   for key, title, kind in columns)
    body = []
    for row in rows[:MAX_TABLE_ROWS]:
        cells = []
        for key, _, kind in columns:
            value = row.get(key)
            shown = esc(value) if kind == "text" else (pct(value) if kind == "pct" else count(value) if kind == "count" else fmt(value))
            sort_value = esc(value) if kind == "text" else ("" if value is None else esc(repr(float(value))))
            cells.append(f'<td data-col="{esc(key)}" data-v="{sort_value}">{shown}</td>')
        search = esc(" ".join(str(row.get(k) or "") for k in (search_keys or ())).lower())
        body.append(f'<tr data-search="{search}">{"".join(cells)}</tr>')
    more = ""
    if len(rows) > MAX_TABLE_ROWS:
        more = f'<p class="note">Showing the first {MAX_TABLE_ROWS} of {len(rows)} rows; the API and the CSV hold all.</p>'
    return (f'<table class="data sortable" id="{esc(table_id)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>{more}')


# ---- overview ---------------------------------------------------------------------------------------

def _summary_card(sections):
    summary, info = sections.get("summary"), sections.get("info")
    rows = []
    if info and info["status"] == "ok" and isinstance(info["data"], dict):
        for key in ("ms_version", "context_mode", "parallel_mode", "rank_size"):
            if key in info["data"]:
                rows.append((key, esc(info["data"][key])))
    state = section_state(summary)
    if state:
        return card("Run", kv_table(rows) + state)
    s = summary["data"]
    st = s.get("step_time_ms") or {}
    rows = [("framework", esc(s.get("framework"))), ("device target", esc(s.get("device_target"))),
            ("steps profiled", esc(s.get("steps_profiled"))), ("steps total", esc(s.get("steps_total"))),
            ("step range", esc(s.get("step_range"))),
            ("step time (ms) mean / p50 / p90 / max",
             " / ".join(f'<span data-stat="{k}">{fmt(st.get(k))}</span>' for k in ("mean", "p50", "p90", "max"))),
            ("verdict", f'<strong class="verdict" data-verdict="{esc(s.get("verdict"))}">{esc(s.get("verdict"))}</strong>')] + rows
    return card("Run", kv_table(rows))


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


def _stage_rows(stages, prefix=""):
    rows = [(label + " (ms)", f'<span id="{prefix}{key}">{fmt(stages.get(key))}</span>') for key, label in STAGES]
    rows.append(("Step total (ms)", f'<span id="{prefix}total">{fmt(stages.get("total"))}</span>'))
    return rows


def _step_trace_card(page, sections, chart_id):
    st = sections["step_trace"]
    state = section_state(st)
    if state:
        return card("Step trace", state)
    average = st["data"]["average"] or {}
    body = stage_bar(page, chart_id, average, f"Average of {len(st['data']['steps'])} steps")
    body += kv_table(_stage_rows(average, prefix=chart_id + "-"))
    return card("Step trace", body)


def short(text, limit=32):
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def op_type_charts(page, prefix, op_types, limit=20):
    top = op_types[:limit]
    names = [plot_text(r["op_type"]) for r in top]
    labels = [plot_text(short(r["op_type"])) for r in top]  # torch's type names run to 60 characters
    values = [r["total_ms"] or 0 for r in top]
    pie = page.chart(prefix + "pie", [{"type": "pie", "labels": labels, "values": values, "customdata": names, "sort": False,
                                        "textinfo": "percent", "textposition": "inside",
                                        "hovertemplate": "%{customdata}: %{value:.3f} ms (%{percent})<extra></extra>"}],
                     {"height": 420, "title": {"text": f"Top {len(top)} operator types by time"}, "legend": {"font": {"size": 10}}})
    bar = page.chart(prefix + "bar", [{"type": "bar", "x": values[::-1], "y": labels[::-1], "orientation": "h", "customdata": names[::-1],
                                        "hovertemplate": "%{customdata}: %{x:.3f} ms<extra></extra>"}],
                     {"height": max(300, 22 * len(top) + 80), "title": {"text": f"Top {len(top)} operator types by time"},
                      "xaxis": {"title": {"text": "ms"}}, "margin": {"l": 230, "r": 20, "t": 36, "b": 40}}, hidden=True)
    toggle = (f'<div class="toggle" data-charts="{esc(prefix)}pie {esc(prefix)}bar">'
              '<button type="button" class="on">Pie</button><button type="button">Bar</button></div>')
    return toggle + pie + bar


def _op_card(page, sections):
    ops = sections["op_types"]
    state = section_state(ops)
    if state:
        return card("Operator types", state)
    rows = ops["data"]
    top = "".join(f'<tr><td>{esc(r["op_type"])}</td><td data-v="{r["total_ms"]}">{fmt(r["total_ms"])}</td><td>{pct(r["percent"])}</td></tr>'
                  for r in rows[:20])
    table = f'<table class="data" id="overview-optypes"><thead><tr><th>type</th><th>total (ms)</th><th>share</th></tr></thead><tbody>{top}</tbody></table>'
    return card("Operator types (top 20)", op_type_charts(page, "ov-op", rows) + table)


def _data_card(sections):
    queue, summary = sections["queue"], sections.get("summary")
    rows = []
    if summary and summary["status"] == "ok":
        wait = summary["data"].get("data_wait_ms") or {}
        rows.append(("data wait per step (ms) mean / p50 / max",
                     " / ".join(f'<span data-stat="wait-{k}">{fmt(wait.get(k))}</span>' for k in ("mean", "p50", "max"))))
    state = section_state(queue)
    if state:
        return card("Data preparation", kv_table(rows) + state)
    stats = queue["data"]["stats"]
    rows += [("batches fetched", fmt(stats["fetch_count"])), ("mean fetch (ms)", f'<span id="dp-fetch">{fmt(stats["fetch_ms_mean"])}</span>'),
             ("max fetch (ms)", fmt(stats["fetch_ms_max"]))]
    if stats["queue_samples"]:
        rows += [("queue samples", fmt(stats["queue_samples"])),
                 ("steps with an empty queue", f'<span id="dp-empty">{fmt(stats["empty_count"])}</span>'),
                 ("empty-queue ratio", f'<span id="dp-empty-ratio">{pct(stats["empty_ratio"])}</span>'),
                 ("mean queue size", f'{fmt(stats["queue_size_mean"])} of {fmt(stats["capacity"])}')]
    else:
        rows.append(("queue sizes", '<span class="missing">not collected (no queue records in the file)</span>'))
    flag = ""
    if stats["empty_ratio"] is not None and stats["empty_ratio"] > 0.3:
        flag = '<p class="warn">The data queue was empty in more than 30% of the steps: data preparation may be the bottleneck.</p>'
    return card("Data preparation", kv_table(rows) + flag)


def _timeline_card(run, rank, sections, report):
    rows = []
    summary = sections.get("summary")
    if summary and summary["status"] == "ok" and isinstance(summary["data"].get("timeline"), dict):
        tl = summary["data"]["timeline"]
        rows += [("events", esc(tl.get("events"))), ("truncated", esc(tl.get("truncated")))]
        if tl.get("dropped"):
            rows.append(("dropped", esc(tl.get("dropped"))))
    ts = sections["timeline"]
    state = section_state(ts)
    if not state and isinstance(ts["data"], dict):
        rows += [(k, esc(v)) for k, v in ts["data"].items() if not isinstance(v, (dict, list))]
    body = kv_table(rows) + (state or "")
    name = sections.get("timeline_file")
    if report:
        body += (f'<p><a href="{esc(name)}" download>{esc(name)}</a> (Trace Event JSON beside this report; open it in Perfetto)</p>'
                 if name else '<p class="missing">no timeline file</p>')
    else:
        body += timeline_form(run, rank)
    return card("Timeline", body)


def timeline_form(run, rank):
    ranks = "".join(f'<label><input type="checkbox" name="ranks" value="{r}" checked> rank {r}</label> ' for r in sorted(run.ranks))
    return (f'<form class="timeline" method="get" action="/timeline"><input type="hidden" name="run" value="{esc(run.id)}">'
            f'<div>ranks: {ranks}</div>'
            '<div>data kind: <label><input type="radio" name="kind" value="summary" checked> summary</label> '
            '<label><input type="radio" name="kind" value="detail"> detail</label></div>'
            '<div><label><input type="checkbox" name="merge" value="1"> merge multiple subgraphs</label></div>'
            '<button type="submit" id="timeline-download">Download timeline (Trace Event JSON, opens in Perfetto)</button></form>')


def _suggestions_card(sections):
    summary = sections.get("summary")
    state = section_state(summary)
    if state:
        return card("Suggestions", state)
    s = summary["data"]
    items = []
    for sug in s.get("suggestions") or []:
        evidence = sug.get("evidence") if isinstance(sug, dict) else None
        rows = [(k, esc(fmt(v) if isinstance(v, float) else json.dumps(v) if isinstance(v, (dict, list)) else v))
                for k, v in (evidence or {}).items()]
        items.append(f'<li class="suggestion" data-id="{esc(sug.get("id"))}"><p>{esc(sug.get("text"))}</p>{kv_table(rows, "kv evidence")}</li>')
    body = f'<ul class="suggestions">{"".join(items)}</ul>' if items else "<p>No suggestion: nothing crossed a threshold.</p>"
    for title, key in (("Notes", "notes"), ("Not applicable", "not_applicable")):
        values = s.get(key) or []
        if values:
            body += f'<h3>{title}</h3><ul class="{key}">' + "".join(f"<li>{esc(v)}</li>" for v in values) + "</ul>"
    return card("Suggestions", body, "suggest")


def overview(page, run, rank, sections, report=False):
    page.add('<div class="grid">')
    page.add(_summary_card(sections))
    page.add(_suggestions_card(sections))
    page.add(_step_trace_card(page, sections, "ov-step"))
    page.add(_op_card(page, sections))
    page.add(_data_card(sections))
    page.add(_timeline_card(run, rank, sections, report))
    page.add("</div>")


# ---- step trace -------------------------------------------------------------------------------------

def steps_page(page, run, rank, sections):
    st = sections["step_trace"]
    state = section_state(st)
    points = sections.get("point_info")
    point_rows = []
    if points and points["status"] == "ok" and isinstance(points["data"], dict):
        point_rows = [("forward start op", esc(points["data"].get("fp_start"))), ("backward end op", esc(points["data"].get("bp_end")))]
    if state:
        page.add(card("Step trace", kv_table(point_rows) + state))
        return
    steps, average = st["data"]["steps"], st["data"]["average"] or {}
    options = '<option value="avg">average</option>' + "".join(f'<option value="{s["step"]}">step {s["step"]}</option>' for s in steps)
    pick = f'<label>Show <select id="step-pick">{options}</select></label>'
    fp_at, bp_at = average.get("iteration_interval"), None
    if fp_at is not None and average.get("fp_and_bp") is not None:
        bp_at = fp_at + average["fp_and_bp"]
    detail_rows = [("start (ms from the first step's start)", '<span id="st-start">—</span>'),
                   ("end (ms from the first step's start)", '<span id="st-end">—</span>'),
                   ("forward start (ms into the step)", f'<span id="st-fp">{fmt(fp_at)}</span>'),
                   ("backward end (ms into the step)", f'<span id="st-bp">{fmt(bp_at)}</span>')]
    body = pick + stage_bar(page, "st-bar", average, "Average step") + kv_table(_stage_rows(average, prefix="st-") + detail_rows + point_rows)
    page.add(card("Step trace detail", body))
    page.blobs["msprof-steps"] = {"steps": steps, "average": average}
    xs = [s["step"] for s in steps]
    charts = []
    for key, label in STAGES + (("total", "Step total"),):
        charts.append(page.chart(f"st-{key}", [{"type": "scatter", "mode": "lines+markers" if len(xs) <= 200 else "lines", "x": xs,
                                                "y": [s.get(key) for s in steps], "name": label,
                                                "line": {"color": STAGE_COLORS.get(key, "#555")}}],
                                 {"height": 240, "title": {"text": f"{label} per step (ms)"}, "xaxis": {"title": {"text": "step"}}}))
    page.add(card("Stages per step", "".join(charts)))


# ---- operators --------------------------------------------------------------------------------------

TYPE_COLUMNS = (("op_type", "Type", "text"), ("occurrences", "Occurrences", "count"), ("per_step", "Per step", "count"),
                ("total_ms", "Total (ms)", "num"), ("avg_ms", "Avg (ms)", "num"), ("percent", "Share", "pct"))
OP_COLUMNS = (("op_name", "Operator", "text"), ("op_type", "Type", "text"), ("occurrences", "Occurrences", "count"),
              ("total_ms", "Total (ms)", "num"), ("avg_ms", "Avg (ms)", "num"), ("proportion", "Share", "pct"),
              ("full_op_name", "Full name", "text"))
FLOPS_COLUMNS = (("mflops_cube", "MFLOPs (cube)", "num"), ("gflops_cube", "GFLOPS (cube)", "num"),
                 ("mflops_vec", "MFLOPs (vec)", "num"), ("gflops_vec", "GFLOPS (vec)", "num"))


def operators_page(page, run, rank, sections):
    flops, flops_summary = sections["flops"], sections["flops_summary"]
    head = '<input type="search" id="op-search" placeholder="fuzzy search over op names and types" autocomplete="off"> <span id="op-count"></span>'
    if flops_summary["status"] == "ok" and isinstance(flops_summary["data"], dict):
        fs = flops_summary["data"]
        head += kv_table([("FLOPs (MFLOPs)", f'<span id="flops-total">{fmt(fs.get("FLOPs"))}</span>'),
                          ("FLOPS (GFLOPS)", f'<span id="flops-rate">{fmt(fs.get("FLOPS"))}</span>'),
                          ("FLOPS utilization (%)", f'<span id="flops-mfu">{fmt(fs.get("FLOPS_Utilization"))}</span>')])
    elif flops_summary["status"] == "error":
        head += section_state(flops_summary)
    page.add(card("Operators", head + '<div class="tabs"><button type="button" class="on" data-tab="tab-types">By type</button>'
                                      '<button type="button" data-tab="tab-ops">By operator</button></div>'))
    types = sections["op_types"]
    state = section_state(types)
    body = state or (op_type_charts(page, "op-", types["data"]) +
                     '<p class="note">Click a type to list its operators.</p>' + sortable_table("op-types", TYPE_COLUMNS, types["data"], ("op_type",)))
    page.add('<div class="tab" id="tab-types">' + card("By type", body) + "</div>")
    detail = sections["op_detail"]
    state = section_state(detail)
    if state:
        page.add('<div class="tab" id="tab-ops" style="display:none">' + card("By operator", state) + "</div>")
        return
    columns = OP_COLUMNS
    rows = detail["data"]
    if flops["status"] == "ok":
        table = flops["data"]
        rows = [dict(r, **dict(zip(("mflops_cube", "gflops_cube", "mflops_vec", "gflops_vec"),
                                   table.get(r["full_op_name"]) or table.get(r["op_name"]) or [None] * 4))) for r in rows]
        columns = OP_COLUMNS + FLOPS_COLUMNS
    note = "" if flops["status"] == "ok" else (section_state(flops) if flops["status"] == "error" else '<p class="note">FLOPs not collected.</p>')
    page.add('<div class="tab" id="tab-ops" style="display:none">' +
             card("By operator", note + sortable_table("op-detail", columns, rows, ("op_name", "op_type", "full_op_name"))) + "</div>")


# ---- data preparation -------------------------------------------------------------------------------

def data_page(page, run, rank, sections):
    page.add(_data_card(sections))
    queue = sections["queue"]
    if queue["status"] == "ok":
        q, f = queue["data"]["queue"], [r for r in queue["data"]["fetch"] if r["kind"] == 0]
        charts = page.chart("dp-queue", [{"type": "bar", "x": [r["step"] for r in q], "y": [r["size"] for r in q], "name": "queue size"}],
                            {"title": {"text": "Data queue size when each step fetched"}, "xaxis": {"title": {"text": "step"}}})
        charts += page.chart("dp-fetch", [{"type": "scatter", "mode": "lines", "x": [r["step"] for r in f], "y": [r["cost_ms"] for r in f],
                                           "name": "fetch (ms)"}],
                             {"title": {"text": "Time to fetch each batch (ms)"}, "xaxis": {"title": {"text": "step"}}})
        page.add(card("Step gap", charts))
    pipeline = sections["pipeline"]
    state = section_state(pipeline)
    if state:
        page.add(card("Data process pipeline", state))
        return
    ops, marked = pipeline["data"]["ops"], {m["op_id"]: m["why"] for m in pipeline["data"]["bottlenecks"]}
    page.add(card("Data process pipeline", pipeline_graph(ops, marked) + sortable_table(
        "pipeline-ops", (("op_id", "Id", "count"), ("op_type", "Op", "text"), ("num_workers", "Workers", "count"),
                         ("queue_average", "Avg queue", "num"), ("queue_length", "Queue capacity", "count"),
                         ("queue_usage", "Queue usage", "pct"), ("why", "Bottleneck", "text")),
        [dict(op, why=marked.get(op["op_id"], "")) for op in ops], ("op_type",))))
    traces = [{"type": "scatter", "mode": "lines", "y": op["queue_sizes"], "name": plot_text(f'{op["op_type"]} #{op["op_id"]}')}
              for op in ops if op["queue_sizes"]]
    if traces:
        page.add(card("Output queue size over time", page.chart("dp-op-queues", traces, {"title": {"text": "Output queue size per sample"},
                                                                                           "xaxis": {"title": {"text": "sample"}}})))


def pipeline_graph(ops, marked):
    """Dataset ops laid out by depth, sources on the left, each box showing its output queue usage."""
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
    html_cols = []
    for d in sorted(columns):
        boxes = []
        for op in sorted(columns[d], key=lambda o: o["op_id"]):
            cls = "op bottleneck" if op["op_id"] in marked else "op"
            usage = op["queue_usage"]
            bar = f'<div class="usage"><div style="width:{0 if usage is None else max(0.0, min(usage, 1.0)) * 100:.0f}%"></div></div>'
            why = f'<div class="why">bottleneck: {esc(marked[op["op_id"]])}</div>' if op["op_id"] in marked else ""
            boxes.append(f'<div class="{cls}" data-op-id="{op["op_id"]}"><b>{esc(op["op_type"])}</b> #{op["op_id"]}'
                         f'<div>workers {count(op["num_workers"])}</div><div>output queue {pct(usage)}</div>{bar}{why}</div>')
        html_cols.append(f'<div class="col">{"".join(boxes)}</div>')
    return f'<div class="pipeline">{"<div class=arrow>→</div>".join(html_cols)}</div>'


# ---- resources --------------------------------------------------------------------------------------

def resources_page(page, run, rank, sections):
    cpu = sections["cpu"]
    state = section_state(cpu)
    if state:
        page.add(card("CPU utilization", state))
    else:
        c = cpu["data"]
        ts = c.get("time_stamp") or []
        x = [(t - ts[0]) / 1000.0 for t in ts] if ts else []
        dev, proc = c.get("device_info") or {}, c.get("process_info") or {}
        means = contract.cpu_means(c)
        body = kv_table([("processors", esc(c.get("cpu_processor_num"))), ("sampling interval (ms)", esc(c.get("sampling_interval"))),
                         ("machine busy mean (%)", f'<span id="cpu-busy">{fmt(means["machine_busy_mean"], 1)}</span>'),
                         ("machine user mean (%)", f'<span id="cpu-user">{fmt(means["machine_user_mean"], 1)}</span>'),
                         ("machine sys mean (%)", fmt(means["machine_sys_mean"], 1)),
                         ("process user mean (%)", f'<span id="cpu-puser">{fmt(means["process_user_mean"], 1)}</span>'),
                         ("process sys mean (%)", fmt(means["process_sys_mean"], 1))])
        machine = [{"type": "scatter", "mode": "lines", "x": x, "y": dev.get(k) or [], "name": k.replace("_utilization", "")}
                   for k in ("user_utilization", "sys_utilization", "io_utilization", "idle_utilization") if dev.get(k)]
        body += page.chart("cpu-machine", machine, {"title": {"text": "Machine CPU utilization (%)"}, "xaxis": {"title": {"text": "s"}}})
        process = [{"type": "scatter", "mode": "lines", "x": x, "y": proc.get(k) or [], "name": k.replace("_utilization", "")}
                   for k in ("user_utilization", "sys_utilization") if proc.get(k)]
        body += page.chart("cpu-process", process, {"title": {"text": "Process CPU utilization (%)"}, "xaxis": {"title": {"text": "s"}}})
        op_traces = []
        for op in c.get("op_info") or []:
            metrics = op.get("metrics") or {}
            user, sys_ = metrics.get("user_utilization") or [], metrics.get("sys_utilization") or []
            if user:
                total = [u + (sys_[i] if i < len(sys_) and isinstance(sys_[i], (int, float)) else 0) for i, u in enumerate(user)]
                op_traces.append({"type": "scatter", "mode": "lines", "x": x[:len(total)], "y": total,
                                  "name": plot_text(f'op {op.get("op_id")} {op.get("op_type", "")}'.strip())})
        if op_traces:
            body += page.chart("cpu-ops", op_traces, {"title": {"text": "Pipeline op CPU utilization, user + sys (%)"},
                                                      "xaxis": {"title": {"text": "s"}}})
        page.add(card("CPU utilization", body))
    page.add(memory_card(page, sections))


def memory_card(page, sections):
    rows = []
    summary = sections.get("summary")
    if summary and summary["status"] == "ok" and isinstance(summary["data"].get("memory"), dict):
        m = summary["data"]["memory"]
        rows += [("peak RSS (MB)", f'<span id="mem-rss">{fmt(m.get("peak_rss_mb"))}</span>'),
                 ("peak allocated (MB)", f'<span id="mem-alloc">{fmt(m.get("peak_allocated_mb"))}</span>')]
    ms, md = sections["memory_summary"], sections["memory_details"]
    body = ""
    state = section_state(ms)
    if state:
        body += state
    elif isinstance(ms["data"], dict):
        rows += [(f"{k} (GiB)" if k in ("capacity", "peak_mem", "static_mem") else k, f'<span data-mem="{esc(k)}">{esc(fmt(v))}</span>')
                 for k, v in ms["data"].items() if not isinstance(v, (dict, list))]
    body = kv_table(rows) + body
    state = section_state(md)
    if state:
        body += state
    else:
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
        body += f'<p>peak of the curve: <span id="mem-peak">{fmt(max(peaks)) if peaks else "—"}</span> MB</p>'
        body += page.chart("mem-lines", traces, {"title": {"text": "Memory over " + ("time" if over_time else "execution") + " (MB)"},
                                                 "xaxis": {"title": {"text": "s" if over_time else "execution order"}}})
    return card("Memory", body)


# ---- cluster ----------------------------------------------------------------------------------------

def cluster_page(page, run, rank, loaded):
    ranks, slowest = loaded["ranks"], loaded["slowest"]
    rows, problems = [], []
    for r, sections in ranks.items():
        st, hccl = sections["step_trace"], sections["hccl"]
        row = {"rank": r}
        if st["status"] == "ok" and st["data"]["average"]:
            row.update({k: st["data"]["average"].get(k) for k in ("total", "iteration_interval", "fp_and_bp", "tail")})
        elif st["status"] == "error":
            problems.append(f'rank {r}: {section_state(st)}')
        if hccl["status"] == "ok" and hccl["data"]["average"]:
            row.update({"communication": hccl["data"]["average"]["communication_ms"], "wait": hccl["data"]["average"]["wait_ms"]})
        elif hccl["status"] == "error":
            problems.append(f'rank {r}: {section_state(hccl)}')
        row["slowest"] = "slowest" if r == slowest else ""
        rows.append(row)
    columns = (("rank", "Rank", "count"), ("total", "Step (ms)", "num"), ("iteration_interval", "Interval (ms)", "num"),
               ("fp_and_bp", "Fwd+bwd (ms)", "num"), ("tail", "Tail (ms)", "num"), ("communication", "Communication (ms)", "num"),
               ("wait", "Comm. wait (ms)", "num"), ("slowest", "", "text"))
    note = ('<p class="note">The slowest rank is the one with the most work of its own per step (interval + forward/backward); '
            'the others wait for it in their tail and communication.</p>') if len(ranks) > 1 else '<p class="note">This run has one rank.</p>'
    body = note + "".join(f"<p>{p}</p>" for p in problems) + sortable_table("cluster-ranks", columns, rows)
    labels = [f"rank {row['rank']}" + (" (slowest)" if row["slowest"] else "") for row in rows]
    stage_traces = [{"type": "bar", "x": labels, "y": [row.get(k) for row in rows], "name": label, "marker": {"color": STAGE_COLORS[k]}}
                    for k, label in STAGES]
    body += page.chart("cl-stages", stage_traces, {"barmode": "stack", "title": {"text": "Mean stage times per rank (ms)"}})
    comm = [{"type": "bar", "x": labels, "y": [row.get(k) for row in rows], "name": label}
            for k, label in (("communication", "communication"), ("wait", "wait"))]
    if any(row.get("communication") is not None for row in rows):
        body += page.chart("cl-comm", comm, {"barmode": "group", "title": {"text": "Communication per step per rank (ms)"}})
    else:
        body += '<p class="missing">communication not collected (no hccl_raw file)</p>'
    page.add(card("Cluster", body))


RENDERERS = {"overview": overview, "steps": steps_page, "operators": operators_page, "data": data_page,
             "resources": resources_page, "cluster": cluster_page}


# ---- documents --------------------------------------------------------------------------------------

def static_text(name):
    with open(os.path.join(STATIC_DIR, name), encoding="utf-8") as handle:
        return handle.read()


def run_label(run_id):
    return "(the summary directory itself)" if run_id == "." else run_id


def run_url(page_name, run_id, rank):
    return f"/run/{page_name}?" + urlencode({"run": run_id, "rank": rank})


def document(title, nav, body, scripts, inline=None):
    """A full HTML page; ``inline`` (report.html) embeds the CSS and scripts instead of linking them."""
    if inline is None:
        head = ('<link rel="stylesheet" href="/static/viewer.css"><script src="/static/plotly.min.js"></script>'
                '<script src="/static/viewer.js" defer></script>')
        tail = ""
    else:
        css, plotly_js, viewer_js = inline
        head = f"<style>{css}</style>"
        plotly_tag = f"<script>{plotly_js}</script>" if plotly_js else ""
        tail = f"{plotly_tag}<script>{viewer_js}</script>"
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
            f"<title>{esc(title)}</title>{head}</head><body><header>{nav}</header><main>{body}</main>{scripts}{tail}</body></html>")


def run_page(run, rank, page_name, loaded):
    page = Page()
    RENDERERS[page_name](page, run, rank, loaded)
    tabs = "".join(f'<a href="{esc(run_url(p, run.id, rank))}" class="{"on" if p == page_name else ""}" data-page="{p}">{PAGE_TITLES[p]}</a>'
                   for p in PAGES)
    ranks = " ".join(f'<a href="{esc(run_url(page_name, run.id, r))}" class="{"on" if r == rank else ""}">rank {r}</a>' for r in sorted(run.ranks))
    nav = (f'<a href="/" class="home">msprof-agent</a> <span class="run-id">{esc(run_label(run.id))}</span> <span class="ranks">{ranks}</span>'
           f'<nav>{tabs}</nav>')
    return document(f"{PAGE_TITLES[page_name]} · {run_label(run.id)} · rank {rank}", nav, f"<h1>{PAGE_TITLES[page_name]}</h1>" + page.body(), page.scripts())


def index_page(base, runs):
    rows = []
    for run_id in sorted(runs):
        run = runs[run_id]
        links = " ".join(f'<a href="{esc(run_url("overview", run_id, r))}">rank {r}</a>' for r in sorted(run.ranks))
        cluster = f' · <a href="{esc(run_url("cluster", run_id, min(run.ranks)))}">cluster</a>' if len(run.ranks) > 1 else ""
        rows.append(f'<tr data-run="{esc(run_id)}"><td>{esc(run_label(run_id))}</td><td>{len(run.ranks)}</td><td>{links}{cluster}</td></tr>')
    table = (f'<table class="data" id="runs"><thead><tr><th>Run</th><th>Ranks</th><th>Open</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
             if rows else '<p class="missing">No profiled run here yet (a run is a folder holding profiler_info_{rank}.json). Reload to look again.</p>')
    body = f"<h1>Profiled runs</h1><p>Under <code>{esc(base)}</code></p>" + table
    return document("msprof-agent runs", '<a href="/" class="home">msprof-agent</a>', body, "")


def error_page(status, message):
    return document(f"Error {status}", '<a href="/" class="home">msprof-agent</a>', f'<h1>Error {status}</h1><p class="error">{esc(message)}</p>', "")


def report(run, rank, loaded_pages, plotly_js):
    """report.html: the overview, step trace, operator and resource views of one rank in one offline file."""
    page = Page()
    for name in ("overview", "steps", "operators", "resources"):
        page.add(f'<h1 id="{name}">{PAGE_TITLES[name]}</h1>')
        if name == "overview":
            overview(page, run, rank, loaded_pages[name], report=True)
        else:
            RENDERERS[name](page, run, rank, loaded_pages[name])
    if not plotly_js:
        page.parts.insert(0, '<p class="warn">plotly is not installed: charts are left out, tables are complete.</p>')
    nav = (f'<span class="home">msprof-agent report</span> <span class="run-id">rank {rank}</span><nav>' +
           "".join(f'<a href="#{p}">{PAGE_TITLES[p]}</a>' for p in ("overview", "steps", "operators", "resources")) + "</nav>")
    return document(f"msprof-agent report · rank {rank}", nav, page.body(), page.scripts(),
                    inline=(static_text("viewer.css"), plotly_js, static_text("viewer.js")))
