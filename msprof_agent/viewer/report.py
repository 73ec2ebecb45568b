"""report_{rank}.html: one offline file per rank, written next to the analysed files at analysis time.

Always named ``report_{rank}.html``: ranks can share one profiler directory (every contract file there
carries ``_{rank}``), and a name that depended on how many ranks are present at the moment one rank
finishes its analysis would race; a fixed per-rank name never collides and matches the contract.
It holds the overview, step trace, operator and resource views, with plotly.min.js, the CSS and the
viewer script inlined, so it opens from a CI artifact or a mail with no network and nothing installed.
"""
import os

from ..contract import REPORT as REPORT_NAME
from ..writers import write_bytes


def write_report(profiler_dir, rank):
    """Write the rank's report into ``profiler_dir`` (atomically) and return its path."""
    from . import render, sections, server

    rank = int(rank)
    directory = os.path.abspath(profiler_dir)
    run = sections.Run(os.path.basename(os.path.dirname(directory)) or directory, {rank: directory})
    with sections.shared_reads():
        loaded = {name: sections.load_page(run, rank, name) for name in ("overview", "steps", "operators", "resources")}
    js_path = server.plotly_js_path()
    plotly_js = None
    if js_path:
        with open(js_path, encoding="utf-8") as handle:
            plotly_js = handle.read()
    text = render.report(run, rank, loaded, plotly_js)
    path = os.path.join(directory, REPORT_NAME.format(rank=rank))
    write_bytes(path, text.encode("utf-8"))
    return path
