"""The viewer's pages and report.html: values computed in Python, markup in templates/ (Jinja2, autoescaping on).

Each page has a view function in ``pages/<page>.py`` that reads its sections (from ``data``), computes what
the page shows (rows, derived numbers, plotly figure specs) and returns the context of ``templates/<page>.html``;
this module holds what the pages share (formatting, tables, charts) and renders the documents.
Jinja2 escapes everything a template prints, so text from a profile (op names, paths, suggestion text,
evidence keys) reaches HTML as text; plotly labels go through ``plot_text`` (plotly reads a subset of
HTML in them), and the JSON the page's script reads through the ``json_blob`` filter, which leaves no
'<', '>' or '&' in it. static/viewer.js only hands the specs to Plotly and adds sorting, search and step
picking, writing text with ``textContent``. jinja2 is imported on the first page rendered, so the
server's module loads (and says what to install) without it.
"""
from __future__ import annotations

import contextlib
import functools
import html
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard
from urllib.parse import urlencode

import orjson

from ..contract.frameworks import MINDSPORE, FrameworkProfile, profile_of
from ..contract.live import hang_lines
from ..contract.names import SUMMARY, rank_file
from ..contract.summary import read_summary
from .assets import TEMPLATE_DIR, static_text
from .sections import MAX_TABLE_ROWS, Loaded, Run, Section

if TYPE_CHECKING:
    import jinja2
    from jinja2.bccache import Bucket
    from markupsafe import Markup

    from .views import View

Column = tuple[str, str, str]  # a table's (key, title, kind): kind 'text'|'num'|'count'|'pct'

STAGES = (("iteration_interval", "Step interval"), ("fp_and_bp", "Forward + backward"), ("tail", "Step tail"))
STAGE_COLORS = {"iteration_interval": "#8fb3e0", "fp_and_bp": "#3b6fb6", "tail": "#f2a541", "data_wait": "#c0392b",
                "communication": "#2e8b57"}

def _views() -> dict[str, View]:
    """The registered pages (``pages``: their modules import this one's helpers, so it is imported here, when asked)."""
    from .pages import views

    return views()


def page_titles() -> dict[str, str]:
    """Each page's title, by name."""
    return {name: view.title for name, view in _views().items()}


def filled_by() -> dict[str, str]:
    """One sentence per section that can be absent: which option fills it (each page's ``View.hints``, for the
    sections it is the home of); where frameworks differ, the framework profile's hints say why this framework has none."""
    return {section: sentence for view in _views().values() for section, sentence in view.hints.items()}

def profile_of_run(sections: Loaded) -> FrameworkProfile:
    """The run's framework profile, from its profiler_info or summary; MindSpore's when neither names a known framework."""
    for name in ("info", "summary"):
        section = sections.get(name)
        if ok(section) and isinstance(section["data"], dict) and section["data"].get("framework"):
            return profile_of(section["data"]["framework"]) or MINDSPORE
    return MINDSPORE


def hints(profile: FrameworkProfile) -> dict[str, str]:
    """``filled_by`` in one framework's words: {section: sentence}."""
    return dict(filled_by(), **profile.hints)


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


def json_blob(value: object) -> Markup:
    """JSON safe to place inside <script type="application/json">: no '<', '>' or '&' survives.
    NaN and infinities, which JSON cannot hold, become null (orjson does that by itself)."""
    from markupsafe import Markup

    text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


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


@functools.cache
def environment() -> jinja2.Environment:
    """The template environment: autoescaping on, None prints as nothing, a misspelt name fails loudly.

    Compiled templates are kept in jinja2's per-user cache folder (under the temp dir, owner-only): the
    report is written at the end of every training run, and compiling its templates costs more than
    drawing them."""
    import jinja2

    loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(TEMPLATE_DIR), _own_templates()])
    env = jinja2.Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, finalize=lambda value: "" if value is None else value,
                             bytecode_cache=_compiled_cache())
    env.filters.update(json_blob=json_blob, fmt=fmt, count=count, pct=pct)
    env.tests["ok"] = ok
    env.globals.update(run_url=run_url, run_label=run_label, STAGES=STAGES)
    return env


def _own_templates() -> jinja2.BaseLoader:
    """The loader of a page's own template outside templates/ (a plugin's ``View.template``: an absolute path)."""
    import jinja2

    class OwnTemplates(jinja2.FileSystemLoader):
        def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
            if not os.path.isabs(template):
                raise jinja2.TemplateNotFound(template)
            return super().get_source(environment, template)

        def list_templates(self) -> list[str]:
            return []  # only the package's own are listed (and checked by the tests)

    return OwnTemplates(os.sep)


def _compiled_cache() -> jinja2.BytecodeCache | None:
    """jinja2's file cache of compiled templates, where a folder it cannot use costs only the compile it would save."""
    import jinja2

    class QuietCache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket: Bucket) -> None:
            with contextlib.suppress(OSError):
                super().load_bytecode(bucket)

        def dump_bytecode(self, bucket: Bucket) -> None:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

    try:
        return QuietCache()
    except (OSError, RuntimeError):  # no temp dir, or one another user owns
        return None


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(PAGE_TITLES=page_titles(), **context)


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


def op_type_charts(page: Page, prefix: str, op_types: Sequence[Mapping[str, Any]], limit: int = 20) -> tuple[str, str]:
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


def step_numbers(steps: object) -> list[int]:
    """The step numbers of a finding's ``evidence["steps"]``: step numbers, or ``[first, last]`` ranges."""
    numbers: set[int] = set()
    for item in steps if isinstance(steps, list) else []:
        if isinstance(item, list) and len(item) == 2 and all(isinstance(n, int) for n in item):
            numbers.update(range(item[0], item[1] + 1))
        elif isinstance(item, int) and not isinstance(item, bool):
            numbers.add(item)
    return sorted(numbers)


# ---- documents --------------------------------------------------------------------------------------

def page_body(page: Page, name: str, run: Run, rank: int | None, sections: Loaded, report: bool = False) -> Markup:
    """One page's cards, rendered from templates/<name>.html with what its view computed, in the run's framework's words."""
    view = _views()[name]
    context = view.build(page, run, rank, sections, report) if view.takes_report else view.build(page, run, rank, sections)
    profile = profile_of_run(sections)
    from markupsafe import Markup

    return Markup(render(view.template or f"{name}.html", run=run, rank=rank, profile=profile, hints=hints(profile), **context))


RANK_BAR_ALL = 16  # up to this many ranks the bar links each; past it, the first, last and this rank's neighbours


def rank_bar(ranks: Iterable[int], rank: int) -> Sequence[int | None]:
    """The ranks the page's rank bar links, None where it skips some: all of a few, else the first and last
    two and this rank's neighbours (a thousand links would outweigh the page)."""
    ordered = sorted(ranks)
    if len(ordered) <= RANK_BAR_ALL:
        return ordered
    at = ordered.index(rank)
    keep = sorted(set(range(2)) | set(range(len(ordered) - 2, len(ordered))) | set(range(max(at - 2, 0), min(at + 3, len(ordered)))))
    bar: list[int | None] = []
    for before, i in zip([None, *keep], keep):
        if before is not None and i > before + 1:
            bar.append(None)
        bar.append(ordered[i])
    return bar


def run_page(run: Run, rank: int, page_name: str, loaded: Loaded) -> str:
    page = Page()
    body = page_body(page, page_name, run, rank, loaded)
    pages = tuple(name for name, view in _views().items() if not view.compares_ranks or len(run.ranks) > 1)  # one rank: nothing to compare
    return render("run.html", run=run, rank=rank, page_name=page_name, pages=pages, body=body, page=page, rank_bar=rank_bar(run.ranks, rank))


def run_row(run: Run) -> dict[str, Any]:
    """The runs index's row of one run: its first rank's summary (date from the file), or blanks where it has none."""
    rank = min(run.ranks)
    directory = run.ranks[rank]
    try:
        read: object = read_summary(directory, rank)  # any JSON value: checked below
        date: float | None = os.path.getmtime(os.path.join(directory, rank_file(SUMMARY, rank)))
    except (OSError, ValueError):
        read, date = {}, None
    summary: Mapping[str, Any] = read if isinstance(read, dict) else {}
    return {"date": date, "date_text": time.strftime("%Y-%m-%d %H:%M", time.localtime(date)) if date else "—",
            "framework": summary.get("framework"), "steps": summary.get("steps_profiled"),
            "p50": (summary.get("step_time_ms") or {}).get("p50"), "verdict": summary.get("verdict")}


def index_page(base: str, runs: Mapping[str, Run], running: Mapping[str, dict[str, Any]] | None = None) -> str:
    return render("index.html", base=base, runs=[(run_id, runs[run_id], run_row(runs[run_id])) for run_id in sorted(runs)],
                  running=sorted((running or {}).items()))


LIVE_REFRESH_S = 2


def live_page(job: str, view: dict[str, Any]) -> str:
    """A running job as ``msprof-agent top`` shows it (``analysis.live.job_view``), reloading itself every LIVE_REFRESH_S while it runs."""
    return render("live.html", job=job, view=view, refresh=LIVE_REFRESH_S if view["state"] == "running" else None,
                  hang_lines=hang_lines(view["hang"]) if view.get("hang") else [])


def error_page(status: int, message: str) -> str:
    return render("error.html", status=status, message=message)


def report_pages(run: Run) -> tuple[str, ...]:
    """The viewer's pages one rank's report carries: all but the cluster page, which lives once for the job (the
    viewer, and cluster_report.html beside its cluster summary), so a report is the same size whatever the number of ranks."""
    return tuple(name for name, view in _views().items() if not view.compares_ranks)


def report(run: Run, rank: int, loaded_pages: Mapping[str, Loaded], plotly_src: str, cluster_href: str | None = None) -> str:
    """report.html: every page the viewer has for one rank, in one offline file; ``cluster_href``: the link to
    the job's cluster_report.html (a multi-rank run)."""
    page = Page()
    bodies = [(name, page_body(page, name, run, rank, loaded_pages[name], report=True)) for name in report_pages(run)]
    return render("report.html", rank=rank, bodies=bodies, page=page, inline=_inline(plotly_src), cluster_href=cluster_href)


def cluster_report(run: Run, loaded: dict[str, Any], plotly_src: str) -> str:
    """cluster_report.html: the viewer's Cluster page of the job, in one offline file."""
    page = Page()
    body = page_body(page, "cluster", run, None, loaded, report=True)
    data = loaded["cluster_summary"]["data"] if ok(loaded["cluster_summary"]) else {}
    return render("cluster_report.html", rank_size=data.get("rank_size"), body=body, page=page, inline=_inline(plotly_src))


def _inline(plotly_src: str) -> dict[str, str]:
    """What an offline file carries inside (the CSS, the viewer's script) and where it loads plotly from (beside it)."""
    return {"css": static_text("viewer.css"), "plotly_src": plotly_src, "viewer_js": static_text("viewer.js")}
