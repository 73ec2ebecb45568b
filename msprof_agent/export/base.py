"""What every export shares: the ``Export`` protocol, the export kinds ``export_type`` names, and where a run's
exports go (the Ascend layout's folder, the PyTorch-style traces')."""
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from ..contract.names import ASCEND_FOLDER, HTA_FOLDER
from ..options import EXPORT_TYPES
from .layouts import layout_of

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


def ascend_dir(run: "Run") -> str:
    """``{output}/{host}_{pid}_{start ms}_ascend_{pt|ms}`` beside the run's profiler directory, from the run's meta."""
    data = run.data
    meta = data.meta
    started_ms = int(meta.get("started_ns") or 0) // 1_000_000
    suffix = layout_of(data).suffix
    host = str(meta.get("host") or "localhost").replace(os.sep, "-")
    folder = ASCEND_FOLDER.format(host=host, pid=meta.get("pid", 0), started_ms=started_ms, suffix=suffix)
    return os.path.join(os.path.abspath(run.ctx.folders.folder), folder)


def hta_dir(run: "Run") -> str:
    """The run's (or window's) directory of PyTorch-style traces, holding nothing else (HTA reads every JSON there)."""
    return os.path.join(os.path.abspath(run.ctx.folders.folder), HTA_FOLDER)
