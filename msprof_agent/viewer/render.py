"""What the viewer's pages share: formatting, sortable tables, the page's chart specs (``Page``) and the charts
several pages draw. The page modules (``pages/<page>.py``) build on this module, and documents.py, which renders
them, imports the pages: so nothing here imports a page or the documents.

Each page has a view function in ``pages/<page>.py`` that reads its sections (from ``data``), computes what
the page shows (rows, derived numbers, plotly figure specs) and returns the context of ``templates/<page>.html``.
Plotly labels go through ``plot_text`` (plotly reads a subset of HTML in them); a table's rows are drawn here,
escaped as Jinja2 would (``table``).
"""
from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard
from urllib.parse import urlencode

from ..contract.frameworks import MINDSPORE, FrameworkProfile, profile_of
from .sections import MAX_TABLE_ROWS, Loaded, Section

if TYPE_CHECKING:
    from markupsafe import Markup

Column = tuple[str, str, str]  # a table's (key, title, kind): kind 'text'|'num'|'count'|'pct'

STAGES = (("iteration_interval", "Step interval"), ("fp_and_bp", "Forward + backward"), ("tail", "Step tail"))
STAGE_COLORS = {"iteration_interval": "#8fb3e0", "fp_and_bp": "#3b6fb6", "tail": "#f2a541", "data_wait": "#c0392b",
                "communication": "#2e8b57"}


def profile_of_run(sections: Loaded) -> FrameworkProfile:
    """The run's framework profile, from its profiler_info or summary; MindSpore's when neither names a known framework."""
    for name in ("info", "summary"):
        section = sections.get(name)
        if ok(section) and isinstance(section["data"], dict) and section["data"].get("framework"):
            return profile_of(section["data"]["framework"]) or MINDSPORE
    return MINDSPORE


def info_rows(info: Section | None, profile: FrameworkProfile) -> list[tuple[str, Any]]:
    """The run card's rows from profiler_info, in the framework's words: its version, and its mode (torch's
    is always eager, MindSpore's the run's context mode)."""
    data = info["data"] if ok(info) and isinstance(info["data"], dict) else {}
    if not data:
        return []
    rows = [(profile.version_label, data.get(profile.version_key) or data.get("framework_version")),
            ("mode", profile.fixed_mode or data.get("context_mode"))]
    rows += [("parallel mode", data.get("parallel_mode")), ("ranks", data.get("rank_size"))]
    return [(key, value) for key, value in rows if value not in (None, "")]


def plot_text(value: object) -> str:
    """Plotly renders a subset of HTML in labels and hover text; entities show as the plain characters."""
    return html.escape("" if value is None else str(value), quote=False)


def fmt(value: object, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def count(value: object) -> str:
    """Counts are stored as floats in the CSVs; whole ones show without decimals."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return fmt(value)


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def short(text: object, limit: int = 32) -> str:
    """TEXT cut to LIMIT characters, an ellipsis last where it was longer."""
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def run_label(run_id: str) -> str:
    return "(the summary directory itself)" if run_id == "." else run_id


def run_url(page_name: str, run_id: str, rank: int) -> str:
    return f"/run/{page_name}?" + urlencode({"run": run_id, "rank": rank})


class Page:
    """The chart specs and JSON blobs of one page (or of a report holding several); templates place the charts."""

    def __init__(self) -> None:
        self.charts: dict[str, dict[str, Any]] = {}  # plotly figure specs by chart id
        self.blobs: dict[str, Any] = {}  # JSON the page's script reads, by id

    def chart(self, chart_id: str, data: list[dict[str, Any]], layout: dict[str, Any]) -> str:
        base: dict[str, Any] = {"margin": {"l": 50, "r": 20, "t": 36, "b": 40}, "height": 300, "font": {"size": 12}}
        base.update(layout)
        if base.get("title"):  # at the left: plotly's toolbar sits at the top right, over a centred title
            title = base["title"] if isinstance(base["title"], dict) else {"text": base["title"]}
            base["title"] = dict(title, x=0, xref="paper", xanchor="left")
        self.charts[chart_id] = {"data": data, "layout": base}
        return chart_id


def ok(section: Section | None) -> TypeGuard[Section]:
    return section is not None and section["status"] == "ok"


def table(table_id: str, columns: Sequence[Column], rows: Sequence[Mapping[str, Any]], search_keys: Iterable[str] = (),
          limit: int | None = None, href: Callable[[Mapping[str, Any]], str | None] | None = None, page_size: int | None = None) -> dict[str, Any]:
    """A sortable table: columns (key, title, kind) with kind 'text'|'num'|'count'|'pct'; rows: dicts, each
    drawn as its HTML row (``_table_row``). Each cell carries its sort value (data-v), its shown text and a link
    (``href(row)`` on the first column); the page holds the first ``limit`` rows (default MAX_TABLE_ROWS),
    viewer.js shows ``page_size`` at a time."""
    limit = MAX_TABLE_ROWS if limit is None else limit
    shown_rows = []
    for number, row in enumerate(rows[:limit], 1):
        cells = []
        for i, (key, _, kind) in enumerate(columns):
            value = row.get(key)
            link = href(row) if href and i == 0 else None
            if kind == "text":
                cells.append((key, value, value, link))
                continue
            shown = pct(value) if kind == "pct" else count(value) if kind == "count" else fmt(value)
            cells.append((key, "" if value is None else repr(float(value)), shown, link))
        search = " ".join("" if row.get(k) is None else str(row.get(k)) for k in search_keys).lower()
        shown_rows.append(_table_row(search, cells, bool(page_size) and number > (page_size or 0)))
    return {"id": table_id, "columns": [(key, title, "text" if kind == "text" else "num") for key, title, kind in columns],
            "rows": shown_rows, "total": len(rows), "limit": limit, "page_size": page_size}


_HTML_SPECIAL = re.compile("[&<>'\"]")


def _table_row(search: str, cells: list[tuple[str, Any, Any, str | None]], hidden: bool) -> Markup:
    """One row of a sortable table, as macros.html's sortable_table drew it cell by cell, in one string:
    a table of thousands of cells otherwise spends most of its time building a Markup for each."""
    from markupsafe import Markup, escape

    def text(value: object) -> str:
        """``value`` as a template prints it: None as nothing, escaped (plain text, most cells, as it is)."""
        if value is None:
            return ""
        if type(value) is str and not _HTML_SPECIAL.search(value):
            return value
        return str(escape(value))

    tds = "".join(f'<td data-col="{text(key)}" data-v="{text(sort_value)}">'
                  + (f'<a href="{text(href)}">{text(shown)}</a>' if href else text(shown)) + "</td>"
                  for key, sort_value, shown, href in cells)
    return Markup(f'<tr data-search="{text(search)}"{" hidden" if hidden else ""}>{tds}</tr>')


# ---- charts shared by pages -------------------------------------------------------------------------

def stage_bar(page: Page, chart_id: str, stages: Mapping[str, float | None], title: str) -> str:
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


def op_type_charts(page: Page, prefix: str, op_types: Sequence[Mapping[str, Any]], limit: int = 20,
                   kinds: str = "operator types", whole: str = "all op time") -> tuple[str, str]:
    """A pie and a bar (hidden until toggled) of the top operator types (or other ``kinds``: the GPU's kernels); returns
    the two chart ids. Each share is the table's (of ``whole``): the pie's last slice holds the types beyond the top ones."""
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
    title = {"text": f"Top {len(top)} {kinds} by time (share of {whole})"}
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


def step_numbers(steps: object) -> list[int]:
    """The step numbers of a finding's ``evidence["steps"]``: step numbers, or ``[first, last]`` ranges."""
    numbers: set[int] = set()
    for item in steps if isinstance(steps, list) else []:
        if isinstance(item, list) and len(item) == 2 and all(isinstance(n, int) for n in item):
            numbers.update(range(item[0], item[1] + 1))
        elif isinstance(item, int) and not isinstance(item, bool):
            numbers.add(item)
    return sorted(numbers)
