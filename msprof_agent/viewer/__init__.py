"""The viewer: ``msprof-agent view`` (server.py), the per-rank offline report and the job's cluster page (report.py).

It reads only the analysed files of the output contract plus ``summary_{r}.json``; pages/ computes what
each page shows (with render.py's helpers), documents.py renders them and templates/ holds the markup. The ``viewer`` extra brings jinja2 (the template engine)
and plotly (only for its bundled plotly.min.js); both are imported lazily.
"""
from .report import REPORT_NAME, ViewerExtraMissing, write_cluster_report, write_report

__all__ = ["REPORT_NAME", "ViewerExtraMissing", "write_cluster_report", "write_report"]
