"""Exports the tools of today read, written beside ``profiler/`` when ``export_type`` asks for them.

- ``text``: the Ascend profiler layout (``{host}_{pid}_{timestamp}_ascend_{ms|pt}/``) that msprof-analyze
  and MindStudio Insight read, and for PyTorch runs a PyTorch-style trace directory that HTA reads.
- ``db``: that layout's SQLite database (``ascend_{mindspore|pytorch}_profiler_{rank}.db``), which
  msprof-analyze's recipes (``cluster -m ...``) read.

The directory name uses the run's own host, pid and start time from the raw store's meta, so every
later export of the same run (``msprof-agent analyse DIR --export``) replaces it rather than adding a
second directory for the rank (msprof-analyze keeps only the one with the largest timestamp).

Each export is a module with ``NAME`` (its entry in what ``write`` returns), ``target(run)`` (the
directory it writes, None where it is not for this run) and ``write(run, out)``: the ``Export``
protocol, the shape of coverage.py's reporters; ``registry.EXPORTS`` lists the exports of each kind, in order.
"""
from .base import Export, kinds
from .writer import write

__all__ = ["Export", "kinds", "write"]
