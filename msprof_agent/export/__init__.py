"""Exports the tools of today read, written beside ``profiler/`` when ``export_type`` asks for them.

- ``text``: the Ascend profiler layout (``{host}_{pid}_{timestamp}_ascend_{ms|pt}/``) that msprof-analyze
  and MindStudio Insight read, and for PyTorch runs a PyTorch-style trace directory that HTA reads.
- ``db``: that layout's SQLite database (``ascend_{mindspore|pytorch}_profiler_{rank}.db``), which
  msprof-analyze's recipes (``cluster -m ...``) read.

The directory name uses the run's own host, pid and start time from the raw store's meta, so every
later export of the same run (``msprof-agent analyse DIR --export``) replaces it rather than adding a
second directory for the rank (msprof-analyze keeps only the one with the largest timestamp).
"""
import os

from .. import frameworks
from ..contract.names import ASCEND_FOLDER, HTA_FOLDER
from ..options import EXPORT_TYPES


def kinds(value):
    """The export kinds named by ``export_type`` (a list, or one name, or comma-separated text)."""
    if not value:
        return []
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(n).strip().lower() for n in names if str(n).strip()]
    wrong = [n for n in names if n not in EXPORT_TYPES]
    if wrong:
        raise ValueError(f"export_type: {wrong[0]!r} is not an export; accepted: {', '.join(EXPORT_TYPES)}")
    return [k for k in EXPORT_TYPES if k in names]


def framework_profile(data):
    """The run's framework profile; MindSpore's for a run no framework attached to."""
    return frameworks.profile_of(data.meta.get("framework")) or frameworks.MINDSPORE


def ascend_dir(data, profiler_dir):
    """``{output}/{host}_{pid}_{start ms}_ascend_{pt|ms}`` beside ``profiler_dir``, from the run's meta."""
    meta = data.meta
    started_ms = int(meta.get("started_ns") or 0) // 1_000_000
    suffix = framework_profile(data).export_suffix
    host = str(meta.get("host") or "localhost").replace(os.sep, "-")
    folder = ASCEND_FOLDER.format(host=host, pid=meta.get("pid", 0), started_ms=started_ms, suffix=suffix)
    return os.path.join(os.path.dirname(os.path.abspath(profiler_dir)), folder)


def hta_dir(profiler_dir):
    """The run's (or window's) directory of PyTorch-style traces, holding nothing else (HTA reads every JSON there)."""
    return os.path.join(os.path.dirname(os.path.abspath(profiler_dir)), HTA_FOLDER)


def write(data, ctx, results, names=None):
    """Write the exports ``names`` (default: those the run's options ask for, ``Options.exports``); returns what was written where."""
    names = kinds(data.options.exports() if names is None else names)
    if not names:
        return None
    from . import ascend_db, ascend_text, hta_trace
    from .overlap import Overlap

    stages = results["step_trace"]["rows"]
    overlap = Overlap(data, stages)
    root = ascend_dir(data, ctx.profiler_dir)
    written = {"dir": root, "dirs": [root]}
    if "text" in names:
        written["text"] = ascend_text.write(data, ctx, root, overlap, results)
        if framework_profile(data).hta_trace:
            written["hta"] = hta_trace.write(data, hta_dir(ctx.profiler_dir), stages)
            written["dirs"].append(hta_dir(ctx.profiler_dir))
    if "db" in names:
        written["db"] = ascend_db.write(data, root, overlap)
    return written
