"""Writing the exports a run asks for, in ``registry.EXPORTS``'s order (the registry, and so every export's module,
imported only when one is asked for)."""
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .base import ascend_dir, kinds

if TYPE_CHECKING:
    from ..analysis import Run


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
