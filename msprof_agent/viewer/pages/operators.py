"""The Operators page: by type, by operator, by operator and input shape; FLOPs."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..render import Column, ok, op_type_charts, table
from ..views import View

if TYPE_CHECKING:
    from ..render import Page
    from ..sections import Loaded, Run

# The op tables' time is self time (nested ops left out, so shares add up to 1); "incl_ms" is the total
# with nested ops, summed from the by-shape table where the run has one.
TYPE_COLUMNS: tuple[Column, ...] = (("op_type", "Type", "text"), ("occurrences", "Occurrences", "count"), ("per_step", "Per step", "count"),
                ("total_ms", "Self (ms)", "num"), ("incl_ms", "Total (ms)", "num"), ("avg_ms", "Avg self (ms)", "num"),
                ("percent", "Share", "pct"))
OP_COLUMNS: tuple[Column, ...] = (("op_name", "Operator", "text"), ("op_type", "Type", "text"), ("occurrences", "Occurrences", "count"),
              ("total_ms", "Self (ms)", "num"), ("incl_ms", "Total (ms)", "num"), ("avg_ms", "Avg self (ms)", "num"),
              ("proportion", "Share", "pct"), ("full_op_name", "Full name", "text"))
SHAPE_COLUMNS: tuple[Column, ...] = (("op_name", "Operator", "text"), ("op_type", "Type", "text"), ("input_shape", "Input shapes", "text"),
                 ("occurrences", "Occurrences", "count"), ("self_ms", "Self (ms)", "num"), ("total_ms", "Total (ms)", "num"))
FLOPS_COLUMNS: tuple[Column, ...] = (("mflops_cube", "MFLOPs (cube)", "num"), ("gflops_cube", "GFLOPS (cube)", "num"),
                 ("mflops_vec", "MFLOPs (vec)", "num"), ("gflops_vec", "GFLOPS (vec)", "num"))


def _including_nested(shapes: Iterable[Mapping[str, Any]], key: str) -> dict[str, float]:
    """Total time with nested ops (ms) per op name or type, summed over the by-shape rows."""
    totals: dict[str, float] = {}
    for row in shapes:
        totals[row[key]] = totals.get(row[key], 0.0) + (row["total_ms"] or 0.0)
    return totals


def operators_page(page: Page, run: Run, rank: int, sections: Loaded) -> dict[str, Any]:
    flops_summary, types, detail, flops = sections["flops_summary"], sections["op_types"], sections["op_detail"], sections["flops"]
    shapes = sections["op_shapes"]
    context: dict[str, Any] = {"flops_summary": flops_summary, "types": types, "detail": detail, "flops": flops, "shapes": shapes}
    shape_rows = shapes["data"] if ok(shapes) else []
    by_type, by_name = _including_nested(shape_rows, "op_type"), _including_nested(shape_rows, "op_name")
    if ok(shapes):
        context["shape_table"] = table("op-shapes", SHAPE_COLUMNS, shape_rows, ("op_name", "op_type", "input_shape"))
    if ok(types):
        context["type_charts"] = op_type_charts(page, "op-", types["data"])
        context["type_table"] = table("op-types", TYPE_COLUMNS, [dict(r, incl_ms=by_type.get(r["op_type"])) for r in types["data"]], ("op_type",))
    if ok(detail):
        columns, rows = OP_COLUMNS, [dict(r, incl_ms=by_name.get(r["full_op_name"])) for r in detail["data"]]
        if ok(flops):
            by_name = flops["data"]
            rows = [dict(r, **dict(zip(("mflops_cube", "gflops_cube", "mflops_vec", "gflops_vec"),
                                       by_name.get(r["full_op_name"]) or by_name.get(r["op_name"]) or [None] * 4))) for r in rows]
            columns = OP_COLUMNS + FLOPS_COLUMNS
        context["detail_table"] = table("op-detail", columns, rows, ("op_name", "op_type", "full_op_name"))
    return context


VIEW = View("operators", "Operators", ("info", "op_types", "op_detail", "op_shapes", "flops", "flops_summary"), operators_page,
            hints={"op_types": "Set op_time: true (the default) to record operators.",
                   "op_detail": "Set op_time: true (the default) to record operators.",
                   "op_shapes": "Set op_time: true (the default) to record operators; analyse again (msprof-agent analyse) if the run predates this table.",
                   "flops": "With record_shapes: true (the default) FLOPs are estimated from input shapes."})
