"""The viewer: ``msprof-agent view`` (server.py) and the per-rank offline report (report.py).

It reads only the analysed files of the output contract plus ``summary_{r}.json``; plotly (the
``viewer`` extra) is imported lazily and only for its bundled plotly.min.js.
"""
from .report import REPORT_NAME, write_report

__all__ = ["REPORT_NAME", "write_report"]
