"""The Data preparation page: the wait for data per step, the dataset pipeline's queues and its bottleneck."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...contract.columns import FETCH_GET
from ..render import Column, count, ok, plot_text, table
from ..views import View
from .overview import data_stats

if TYPE_CHECKING:
    from ..render import Page
    from ..sections import Loaded, Run

PIPELINE_COLUMNS: tuple[Column, ...] = (("op_id", "Id", "count"), ("op_type", "Op", "text"), ("num_workers", "Workers", "count"),
                    ("queue_average", "Avg queue", "num"), ("queue_length", "Queue capacity", "count"),
                    ("queue_usage", "Queue usage", "pct"), ("why", "Bottleneck", "text"))


def data_page(page: Page, run: Run, rank: int, sections: Loaded) -> dict[str, Any]:
    queue, pipeline = sections["queue"], sections["pipeline"]
    context: dict[str, Any] = {"data_prep": data_stats(sections), "queue": queue, "pipeline": pipeline}
    if ok(queue):  # a chart only over records there are: no empty axes
        q, f = queue["data"]["queue"], [r for r in queue["data"]["fetch"] if r["kind"] == FETCH_GET]
        charts = []
        if q:
            charts.append(page.chart("dp-queue", [{"type": "bar", "x": [r["step"] for r in q], "y": [r["size"] for r in q], "name": "queue size"}],
                                     {"title": {"text": f"Data queue size at each fetch ({len(q)} samples)"}, "xaxis": {"title": {"text": "step"}}}))
        if f:
            charts.append(page.chart("dp-fetch", [{"type": "scatter", "mode": "lines+markers", "x": [r["step"] for r in f],
                                                   "y": [r["cost_ms"] for r in f], "name": "wait (ms)"}],
                                     {"title": {"text": "Wait for data in each step (ms)"}, "xaxis": {"title": {"text": "step"}}}))
        if charts:
            context["gap_charts"] = charts
    if not ok(pipeline):
        return context
    ops, marked = pipeline["data"]["ops"], {m["op_id"]: m["why"] for m in pipeline["data"]["bottlenecks"]}
    context["graph"] = pipeline_columns(ops, marked)
    context["pipeline_table"] = table("pipeline-ops", PIPELINE_COLUMNS, [dict(op, why=marked.get(op["op_id"], "")) for op in ops], ("op_type",))
    sampled = [op for op in ops if op["queue_sizes"]]
    traces = [{"type": "scatter", "mode": "lines+markers", "x": list(range(1, len(op["queue_sizes"]) + 1)), "y": op["queue_sizes"],
               "name": plot_text(f'{op["op_type"]} #{op["op_id"]}')} for op in sampled]
    if traces:
        counts = sorted({len(op["queue_sizes"]) for op in sampled})
        every = sorted({op["sample_interval"] for op in sampled if op["sample_interval"]})
        samples = f"{'/'.join(map(str, counts))} samples of the dataset profiler" + (f", every {'/'.join(count(v) for v in every)} ms" if every else "")
        if any(size for op in sampled for size in op["queue_sizes"]):
            context["queue_chart"] = page.chart("dp-op-queues", traces, {"title": {"text": f"Pipeline ops' output queue size: {samples}"},
                                                                          "xaxis": {"title": {"text": "sample"}}})
        else:  # a flat zero says less than the sentence
            context["queue_note"] = f"Every pipeline op's output queue was empty at each of its {samples}: each row was taken as soon as it was made."
    return context


def pipeline_columns(ops: Sequence[Mapping[str, Any]], marked: Mapping[int, str]) -> list[list[dict[str, Any]]]:
    """Dataset ops laid out by depth, sources on the left: a list of columns of boxes (op, usage bar width, why)."""
    by_id = {op["op_id"]: op for op in ops}
    depth: dict[int, int] = {}  # op id -> its depth (sources deepest)

    def level(op_id: int, seen: tuple[int, ...] = ()) -> int:
        if op_id in depth:
            return depth[op_id]
        op = by_id[op_id]
        children = [c for c in op["children"] if c in by_id and c not in seen]
        depth[op_id] = 1 + max((level(c, seen + (op_id,)) for c in children), default=-1)
        return depth[op_id]

    for op_id in by_id:
        level(op_id)
    columns: dict[int, list[Mapping[str, Any]]] = {}  # depth -> its ops
    for op_id, d in depth.items():
        columns.setdefault(d, []).append(by_id[op_id])
    return [[{"op": op, "bottleneck": op["op_id"] in marked, "why": marked.get(op["op_id"]),
              "width": f'{0 if op["queue_usage"] is None else max(0.0, min(op["queue_usage"], 1.0)) * 100:.0f}'}
             for op in sorted(columns[d], key=lambda o: o["op_id"])] for d in sorted(columns)]


VIEW = View("data", "Data preparation", ("info", "summary", "queue", "pipeline"), data_page)
