"""The viewer's documents: its pages, the runs index, the live and error pages, report.html and cluster_report.html,
values computed in Python (each page's view, ``pages/<page>.py``, with render.py's helpers), markup in templates/
(Jinja2, autoescaping on). This module sits above the pages: it reads their registry (titles, hints, what each
page shows) and renders them.

Jinja2 escapes everything a template prints, so text from a profile (op names, paths, suggestion text,
evidence keys) reaches HTML as text; plotly labels go through ``render.plot_text`` (plotly reads a subset of
HTML in them), and the JSON the page's script reads through the ``json_blob`` filter, which leaves no
'<', '>' or '&' in it. static/viewer.js only hands the specs to Plotly and adds sorting, search and step
picking, writing text with ``textContent``. jinja2 is imported on the first page rendered, so the
server's module loads (and says what to install) without it.
"""
from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ..contract.frameworks import FrameworkProfile
from ..contract.live import hang_lines
from ..contract.names import SUMMARY, rank_file
from ..contract.summary import read_summary
from .assets import TEMPLATE_DIR, static_text
from .pages import views
from .render import STAGES, Page, count, fmt, ok, pct, profile_of_run, run_label, run_url
from .sections import Loaded, Run

if TYPE_CHECKING:
    import jinja2
    from jinja2.bccache import Bucket
    from markupsafe import Markup

    from .views import View


def page_titles() -> dict[str, str]:
    """Each page's title, by name."""
    return {name: view.title for name, view in views().items()}


def filled_by() -> dict[str, str]:
    """One sentence per section that can be absent: which option fills it (each page's ``View.hints``, for the
    sections it is the home of); where frameworks differ, the framework profile's hints say why this framework has none."""
    return {section: sentence for view in views().values() for section, sentence in view.hints.items()}


def hints(profile: FrameworkProfile) -> dict[str, str]:
    """``filled_by`` in one framework's words: {section: sentence}."""
    return dict(filled_by(), **profile.hints)


def json_blob(value: object) -> Markup:
    """JSON safe to place inside <script type="application/json">: no '<', '>' or '&' survives.
    NaN and infinities, which JSON cannot hold, become null (orjson does that by itself)."""
    from markupsafe import Markup

    text = orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


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


# ---- documents --------------------------------------------------------------------------------------

def page_body(page: Page, name: str, run: Run, rank: int | None, sections: Loaded, report: bool = False) -> Markup:
    """One page's cards, rendered from templates/<name>.html with what its view computed, in the run's framework's words."""
    view = views()[name]
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
    pages = tuple(name for name, view in views().items()
                  if (not view.compares_ranks or len(run.ranks) > 1) and _applies(view, run, rank))  # one rank: nothing to compare
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


def report_pages(run: Run, rank: int) -> tuple[str, ...]:
    """The viewer's pages one rank's report carries: those that apply to it but the cluster page, which lives once for the
    job (the viewer, and cluster_report.html beside its cluster summary), so a report is the same size whatever the number of ranks."""
    return tuple(name for name, view in views().items() if not view.compares_ranks and _applies(view, run, rank))


def _applies(view: View, run: Run, rank: int) -> bool:
    return view.applies is None or view.applies(run, rank)


def report(run: Run, rank: int, loaded_pages: Mapping[str, Loaded], plotly_src: str, cluster_href: str | None = None) -> str:
    """report.html: every page the viewer has for one rank, in one offline file; ``cluster_href``: the link to
    the job's cluster_report.html (a multi-rank run)."""
    page = Page()
    bodies = [(name, page_body(page, name, run, rank, loaded_pages[name], report=True)) for name in report_pages(run, rank)]
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
