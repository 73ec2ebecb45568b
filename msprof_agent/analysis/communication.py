"""Communication per rank (``hccl_raw_{r}.csv``); the view across ranks is the cluster step's (``cluster``).

The hccl file keeps MindInsight's columns. Its ``wait_cost``, the time a rank waits inside a collective
for its slowest peer, needs every rank's calls side by side, which one rank's analysis does not have:
it is left empty (read back as "not measured"), never written as a 0 that would read as "no wait".
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from ..contract import readers
from ..contract.columns import AVERAGE_ROW, HCCL_HEADER, NOT_MEASURED
from ..contract.names import HCCL
from ..contract.pages import File, Page
from ..writers import write_csv
from .overlap import GROUP

if TYPE_CHECKING:
    from .run import Context
    from .rundata import RunData


def write_rank(data: RunData, ctx: Context) -> dict[str, Any] | None:
    """Per-step communication cost (ms) of this rank; the summary keeps its mean and each group's calls and
    time per step (``groups``), which the cluster step compares across the groups' ranks."""
    if not data.comm:
        return None
    per_step: dict[int, dict[str, Any]] = {}  # step -> {"cost": ms, "ops": {name: [calls, ms]}}
    groups: dict[str, list[float]] = {}  # group -> [calls, ms]
    for call in data.comm:
        entry = per_step.setdefault(call.get("step", 0), {"cost": 0.0, "ops": {}})
        entry["cost"] += call["dur"] / 1e6
        op = entry["ops"].setdefault(call.get("name", "comm"), [0, 0.0])
        op[0] += 1
        op[1] += call["dur"] / 1e6
        group = groups.setdefault(call.get("group") or GROUP, [0, 0.0])
        group[0] += 1
        group[1] += call["dur"] / 1e6
    rows = [[step, round(e["cost"], 4), NOT_MEASURED, "{}", orjson.dumps({k: [v[0], round(v[1], 4)] for k, v in e["ops"].items()}).decode()]
            for step, e in sorted(per_step.items())]
    if rows:
        rows.append([AVERAGE_ROW, round(sum(r[1] for r in rows) / len(rows), 4), NOT_MEASURED, "{}", "{}"])
    write_csv(ctx.path(HCCL), HCCL_HEADER, rows)
    return {"steps": len(per_step), "mean_ms": rows[-1][1] if rows else 0.0,
            "groups": {name: {"calls_per_step": round(calls / len(per_step), 3), "ms_per_step": round(ms / len(per_step), 4)}
                       for name, (calls, ms) in sorted(groups.items())}}


def collectives(data: RunData) -> dict[str, dict[str, Any]]:
    """Per communication group: its ranks, and this rank's last collective entered and completed (the
    group's sequence numbers). A rank that entered a collective it never completed was waiting in it."""
    groups: dict[str, dict[str, Any]] = {}
    for entry in data.entered:
        group = groups.setdefault(entry["group"], {"ranks": None, "entered": 0, "completed": 0, "last": None})
        group["ranks"] = entry.get("ranks") or group["ranks"]
        if entry["seq"] > group["entered"]:
            group["entered"], group["last"] = entry["seq"], {"name": entry.get("name"), "step": entry.get("step")}
    for call in data.comm:
        group_name = call.get("group")
        completed_in = groups.get(group_name) if group_name is not None else None
        if completed_in is not None and call.get("seq", 0) > completed_in["completed"]:
            completed_in["completed"] = call["seq"]
    return {name: groups[name] for name in sorted(groups)}


PAGE = Page("communication", (File("hccl", (HCCL,), readers.read_hccl, tuple(HCCL_HEADER)),), write_rank)
