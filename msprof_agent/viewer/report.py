"""report_{rank}.html: one offline file per rank, written next to the analysed files at analysis time.

Always named ``report_{rank}.html``: ranks can share one profiler directory (every contract file there
carries ``_{rank}``), and a name that depended on how many ranks are present at the moment one rank
finishes its analysis would race; a fixed per-rank name never collides and matches the contract.
It holds every page the viewer has for the rank but the Cluster page, with the CSS and the viewer script inlined,
and loads plotly.min.js from beside itself (``REPORT_PLOTLY``, copied there once a folder), so it opens from a CI
artifact with no network and nothing installed; inlined, plotly's 4.8 MB were nearly all of a report of 80 tiny steps.
The Cluster page is one file for the whole job, ``cluster_report.html`` beside cluster_summary.json
(``write_cluster_report``, at the roll-up); each rank's report of a multi-rank run links to it, so a
report is the same size whatever the number of ranks.
It is written inside the training process, where only the agent's core dependencies may be installed:
without the viewer extra (jinja2 renders it, plotly draws it) ``write_report`` raises ``ViewerExtraMissing``.
"""
from __future__ import annotations

import os
import shutil

from ..contract import names
from ..contract.names import REPORT as REPORT_NAME
from ..writers import replacing
from .assets import INSTALL_VIEWER, plotly_js_path, template_engine_missing


class ViewerExtraMissing(Exception):
    """The report cannot be written here: jinja2 or plotly is not installed."""


def write_report(profiler_dir: str, rank: int | str, step_level_timeline: bytes | None = None) -> str:
    """Write the rank's report into ``profiler_dir`` (atomically) and return its path. A rank of a multi-rank
    run links to the job's cluster_report.html, where the roll-up writes it once every rank has its summary.
    ``step_level_timeline``: the rank's timeline file without its ops, from the analysis that just wrote it
    (``sections.Run.step_level_timelines``)."""
    from . import documents, pages, render, sections

    rank = int(rank)
    directory = os.path.abspath(profiler_dir)
    plotly_src = _plotly_beside(directory, "report.html skipped")
    ranks = {r: directory for r in names.summary_ranks(directory)}  # a multi-card analysis: the ranks analysed here so far
    ranks[rank] = directory
    run = sections.Run(os.path.basename(os.path.dirname(directory)) or directory, ranks)
    if step_level_timeline is not None:
        run.step_level_timelines[rank] = step_level_timeline
    with sections.shared_reads():
        loaded = {name: pages.load_page(run, rank, name) for name in documents.report_pages(run, rank)}
    summary = loaded["overview"]["summary"]
    rank_size = int(summary["data"].get("rank_size") or 1) if render.ok(summary) and isinstance(summary["data"], dict) else 1
    text = documents.report(run, rank, loaded, plotly_src, cluster_href=names.cluster_report_href(directory) if rank_size > 1 else None)
    path = os.path.join(directory, REPORT_NAME.format(rank=rank))
    _write(path, text)
    return path


def write_cluster_report(cluster: str) -> str:
    """Write the job's cluster_report.html into ``cluster`` (``names.cluster_dir``, beside its cluster summary),
    atomically, and return its path: the viewer's Cluster page, linking each rank to its report."""
    from . import documents, sections

    cluster = os.path.abspath(cluster)
    plotly_src = _plotly_beside(cluster, f"{names.CLUSTER_REPORT} skipped")
    ranks = {rank: directory for directory in names.cluster_member_dirs(cluster) for rank in names.summary_ranks(directory)}
    run = sections.Run(os.path.basename(cluster), dict(sorted(ranks.items())))
    text = documents.cluster_report(run, sections.load_cluster_report(run, cluster), plotly_src)
    path = os.path.join(cluster, names.CLUSTER_REPORT)
    _write(path, text)
    return path


def _write(path: str, text: str) -> None:
    with replacing(path) as handle:
        handle.write(text.encode("utf-8"))


def _plotly_beside(directory: str, skipped: str) -> str:
    """The report's plotly.min.js beside it in ``directory`` (copied from the plotly package where it is missing or
    another version's), its name for the page's script tag; ``ViewerExtraMissing`` (its message ``skipped``: which
    file, and what to install) where jinja2 or plotly is not installed."""
    js_path = plotly_js_path()
    missing = [name for name, gone in (("jinja2", template_engine_missing()), ("plotly", js_path is None)) if gone]
    if missing or js_path is None:
        verb = "is" if len(missing) == 1 else "are"
        raise ViewerExtraMissing(f"{skipped}: {' and '.join(missing)} {verb} not installed ({INSTALL_VIEWER})")
    beside = os.path.join(directory, names.REPORT_PLOTLY)
    if not os.path.exists(beside) or os.path.getsize(beside) != os.path.getsize(js_path):
        with replacing(beside) as handle, open(js_path, "rb") as source:
            shutil.copyfileobj(source, handle)
    return names.REPORT_PLOTLY
