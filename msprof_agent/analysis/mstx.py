"""The user's mstx marks and ranges: a per-range table (count, total, mean, max per name, overall and per
step) in ``mstx_ranges_{rank}.json``, and the marks and ranges as a timeline track."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..contract.names import MSTX_RANGES
from ..contract.pages import File, Page
from ..writers import write_json

if TYPE_CHECKING:
    from ..records import Mstx
    from .run import Context
    from .rundata import RunData


def _table(ranges: list[Mstx], key: Callable[[Mstx], tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Rows of count / total / mean / max (ms) per KEY(range)."""
    groups: dict[tuple[Any, ...], list[float]] = {}  # ms of each range, per key
    for r in ranges:
        groups.setdefault(key(r), []).append((r["end"] - r["start"]) / 1e6)
    return [dict(zip(("name", "domain", "step"), group), count=len(ms), total_ms=round(sum(ms), 3),
                 mean_ms=round(sum(ms) / len(ms), 3), max_ms=round(max(ms), 3))
            for group, ms in sorted(groups.items(), key=lambda item: tuple(str(part) for part in item[0]))]


def write(data: RunData, ctx: Context) -> dict[str, int] | None:
    if not data.mstx:
        return None
    ranges = [r for r in data.mstx if r["kind"] == "range"]
    marks: dict[tuple[str, str], int] = {}  # count per (name, domain)
    for m in data.mstx:
        if m["kind"] == "mark":
            marks[(m["name"], m["domain"])] = marks.get((m["name"], m["domain"]), 0) + 1
    page = {
        "ranges": _table(ranges, lambda r: (r["name"], r["domain"])),
        "per_step": _table(ranges, lambda r: (r["name"], r["domain"], r.get("step"))),
        "marks": [{"name": name, "domain": domain, "count": count} for (name, domain), count in sorted(marks.items())],
    }
    write_json(ctx.path(MSTX_RANGES.format(rank=ctx.rank)), page, ctx.pretty)
    return {"ranges": len(ranges), "marks": sum(marks.values())}


def events(data: RunData, pid: int, base: int = 0) -> list[dict[str, Any]]:
    """Ranges as slices, marks as instants, one row per thread; ``ts`` in us from ``base`` (epoch ns)."""
    out = []
    for m in data.mstx:
        common = {"name": m["name"], "cat": f"mstx.{m['domain']}", "pid": pid, "tid": m.get("tid", 0),
                  "ts": round((m["start"] - base) / 1000.0, 3), "args": {"domain": m["domain"], "step": m.get("step")}}
        if m["kind"] == "range":
            out.append(dict(common, ph="X", dur=round((m["end"] - m["start"]) / 1000.0, 3)))
        else:
            out.append(dict(common, ph="i", s="t"))
    return out


PAGE = Page("mstx", (File("mstx_ranges", (MSTX_RANGES,)),), write)
