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
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from .. import frameworks
from ..contract.names import ASCEND_FOLDER, HTA_FOLDER
from ..frameworks.profile import FrameworkProfile
from ..options import EXPORT_TYPES

if TYPE_CHECKING:
    from ..analysis import Run


class Export(Protocol):
    NAME: str

    def target(self, run: "Run") -> str | None:
        """The directory this export writes for ``run``; None where it is not for this run."""

    def write(self, run: "Run", out: str) -> Any:
        """Write the export into ``out``; returns what was written."""


def kinds(value: str | Iterable[object] | None) -> list[str]:
    """The export kinds named by ``export_type`` (a list, or one name, or comma-separated text)."""
    if not value:
        return []
    names = value.split(",") if isinstance(value, str) else list(value)
    names = [str(n).strip().lower() for n in names if str(n).strip()]
    wrong = [n for n in names if n not in EXPORT_TYPES]
    if wrong:
        raise ValueError(f"export_type: {wrong[0]!r} is not an export; accepted: {', '.join(EXPORT_TYPES)}")
    return [k for k in EXPORT_TYPES if k in names]


def framework_profile(data: Any) -> FrameworkProfile:
    """The run's framework profile; MindSpore's for a run no framework attached to."""
    return frameworks.profile_of(data.meta.get("framework")) or frameworks.MINDSPORE


def ascend_dir(run: "Run") -> str:
    """``{output}/{host}_{pid}_{start ms}_ascend_{pt|ms}`` beside the run's profiler directory, from the run's meta."""
    data, profiler_dir = run.data, run.ctx.profiler_dir
    meta = data.meta
    started_ms = int(meta.get("started_ns") or 0) // 1_000_000
    suffix = framework_profile(data).export_suffix
    host = str(meta.get("host") or "localhost").replace(os.sep, "-")
    folder = ASCEND_FOLDER.format(host=host, pid=meta.get("pid", 0), started_ms=started_ms, suffix=suffix)
    return os.path.join(os.path.dirname(os.path.abspath(profiler_dir)), folder)


def hta_dir(run: "Run") -> str:
    """The run's (or window's) directory of PyTorch-style traces, holding nothing else (HTA reads every JSON there)."""
    return os.path.join(os.path.dirname(os.path.abspath(run.ctx.profiler_dir)), HTA_FOLDER)


def write(run: "Run", names: str | Iterable[object] | None = None) -> dict[str, Any] | None:
    """Write the exports ``names`` (default: those the run's options ask for, ``Options.exports``); returns what
    was written where (``dirs``: each folder written, once)."""
    names = kinds(run.data.options.exports() if names is None else names)
    if not names:
        return None
    from .registry import EXPORTS

    written: dict[str, Any] = {"dir": ascend_dir(run), "dirs": []}
    for kind in names:
        for exporter in EXPORTS[kind]:
            out = exporter.target(run)
            if out is not None:
                written[exporter.NAME] = exporter.write(run, out)
                written["dirs"] += [out] if out not in written["dirs"] else []
    return written
