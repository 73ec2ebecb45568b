"""report_{rank}.html: one offline file per rank, written next to the analysed files at analysis time.

Always named ``report_{rank}.html``: ranks can share one profiler directory (every contract file there
carries ``_{rank}``), and a name that depended on how many ranks are present at the moment one rank
finishes its analysis would race; a fixed per-rank name never collides and matches the contract.
It holds every page the viewer has for the rank (the cluster page too where several ranks were analysed
into the directory, as a multi-card ``msprof-agent analyse`` does), with plotly.min.js, the CSS and the
viewer script inlined, so it opens from a CI artifact or a mail with no network and nothing installed.
It is written inside the training process, where only the agent's core dependencies may be installed:
without the viewer extra (jinja2 renders it, plotly draws it) ``write_report`` raises ``ViewerExtraMissing``.
"""
from __future__ import annotations

import os

from ..contract.names import REPORT as REPORT_NAME
from ..contract.names import summary_ranks
from ..writers import write_bytes
from .assets import INSTALL_VIEWER, plotly_js_path, template_engine_missing


class ViewerExtraMissing(Exception):
    """The report cannot be written here: jinja2 or plotly is not installed."""


def write_report(profiler_dir: str, rank: int | str) -> str:
    """Write the rank's report into ``profiler_dir`` (atomically) and return its path."""
    js_path = plotly_js_path()
    missing = [name for name, gone in (("jinja2", template_engine_missing()), ("plotly", js_path is None)) if gone]
    if missing or js_path is None:
        verb = "is" if len(missing) == 1 else "are"
        raise ViewerExtraMissing(f"report.html skipped: {' and '.join(missing)} {verb} not installed ({INSTALL_VIEWER})")
    from . import render, sections

    rank = int(rank)
    directory = os.path.abspath(profiler_dir)
    ranks = {r: directory for r in summary_ranks(directory)}  # a multi-card analysis: the ranks analysed here so far
    ranks[rank] = directory
    run = sections.Run(os.path.basename(os.path.dirname(directory)) or directory, ranks)
    with sections.shared_reads():
        loaded = {name: sections.load_page(run, rank, name) for name in render.report_pages(run)}
    with open(js_path, encoding="utf-8") as handle:
        plotly_js = handle.read()
    text = render.report(run, rank, loaded, plotly_js)
    path = os.path.join(directory, REPORT_NAME.format(rank=rank))
    write_bytes(path, text.encode("utf-8"))
    return path
