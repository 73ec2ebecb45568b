"""The Cluster page: the job's ranks from its cluster summary alone (findings, rank x step heatmaps with the slow
ranks and nodes marked, the paged rank table). The viewer draws it for any rank of the job; the roll-up writes
it once as ``cluster_report.html`` beside cluster_summary.json (``report``), where its links go to the ranks' reports."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...contract import names
from ..merged_timeline import BUDGET_BYTES, default_ranks, step_timeline
from ..render import ok, plot_text, run_url, table
from ..sections import cluster_summary
from ..views import View
from .overview import findings_view
from .steps import timeline_chart

if TYPE_CHECKING:
    from ..render import Page
    from ..sections import Loaded, Run

CLUSTER_COLUMNS = (("rank_id", "Rank", "count"), ("host", "Host", "text"), ("step_time_ms", "Step (ms)", "num"),
                   ("own_work_ms", "Own work (ms)", "num"), ("iteration_interval", "Interval (ms)", "num"), ("fp_and_bp", "Fwd+bwd (ms)", "num"),
                   ("tail", "Tail (ms)", "num"), ("communication_ms", "Communication (ms)", "num"), ("slow", "", "text"))
GROUP_COLUMNS = (("group", "Group", "text"), ("size", "Ranks", "count"), ("calls_per_step", "Calls a step", "num"),
                 ("ms_per_step", "Time a step (ms, ranks' mean)", "num"), ("most", "Most time", "text"), ("least", "Least time", "text"))
CLUSTER_PAGE_ROWS = 50  # the rank table shows this many at a time; viewer.js sorts and pages every rank
# (per_step key, title, how a column of several steps shows them): the slowest step of a column for the step and own work,
# so a straggler's one slow step stays visible; the mean for the wait in collectives, which every fast rank shares
HEATMAPS = (("step_ms", "Step time (ms)", "max"), ("own_ms", "Own work: step minus collectives (ms)", "max"),
            ("comm_ms", "Waiting in collectives (ms)", "mean"))
HEATMAP_CELLS = 60_000  # cells a heatmap holds at most: past it the steps are binned (1 024 ranks: 58 columns; the page stays small)
HEATMAP_COLUMNS = 200  # and columns, whatever the ranks: a column of a few pixels at least
MARKED_MAX = 16  # slow ranks, and slow nodes, marked on each heatmap; the findings and the table name every one
SLOW_RANK_COLOR, SLOW_NODE_COLOR = "#1f3a5f", "#6a3d9a"


def cluster_page(page: Page, run: Run, rank: int | None, loaded: Loaded, report: bool = False) -> dict[str, Any]:
    """The page's context; ``report``: for cluster_report.html (no rank of its own: ranks link to their reports, no timeline,
    no download: a file has no server behind it)."""
    cluster = loaded["cluster_summary"]
    data = cluster["data"] if ok(cluster) and isinstance(cluster["data"], dict) else {}
    slow, nodes = set(data.get("slow_ranks") or []), set(data.get("slow_nodes") or [])
    rows = [dict(r, slow="slow rank" if r.get("rank_id") in slow else "slow node" if r.get("host") in nodes else "")
            for r in data.get("ranks") or [] if isinstance(r, dict)]
    rows.sort(key=lambda r: -(r.get("own_work_ms") or 0.0))
    link = _rank_report if report else _rank_page
    findings = findings_view(data.get("findings"), run, rank, report, rank_link=(lambda r: _rank_report(run, r, "#steps")) if report else None)
    per_step = data.get("per_step") or {}
    order = per_step.get("rank") or []
    labels = [f"rank {r}" + (" (slow)" if r in slow else "") for r in order]
    x, bins = _step_columns(per_step.get("step") or [], len(order))
    shapes, notes = _marks(order, slow, nodes, {r.get("rank_id"): r.get("host") for r in rows}, x[-1] if x else None)
    heatmaps = [_heatmap(page, key, title, how, per_step[key], x, bins, labels, shapes, notes) for key, title, how in HEATMAPS if per_step.get(key)]
    groups = [{"group": g["group"], "size": len(g["ranks"]), "calls_per_step": g["calls_per_step"], "ms_per_step": g["ms_per_step"],
               **{end: f"rank {g[end]['rank']}: {g[end]['ms_per_step']:.3f} ms" for end in ("most", "least")}}
              for g in data.get("communication_groups") or []]
    return {"several": len(run.ranks) > 1, "report": report, "findings": findings, "cluster_summary": cluster, "rule": data.get("rule"),
            "slow_ranks": sorted(slow), "slow_nodes": sorted(nodes), "missing": data.get("missing_ranks") or [],
            "table": table("cluster-ranks", CLUSTER_COLUMNS, rows, search_keys=("rank_id", "host", "slow"),
                           href=lambda row: link(run, row["rank_id"]), page_size=CLUSTER_PAGE_ROWS),
            "heatmaps": heatmaps,
            "groups": table("cluster-groups", GROUP_COLUMNS, groups) if groups else None,
            "communication": ok(loaded.get("hccl")) or any(r.get("communication_ms") for r in rows),
            "timeline": timeline_chart(page, "cl-timeline", loaded["step_timeline"]) if "step_timeline" in loaded else None,
            "download": None if report or not run.ranks else {"run": run.id, "ranks": ",".join(map(str, default_ranks(run, sorted(slow)))),
                                                              "budget_mb": BUDGET_BYTES // 1_000_000}}


def _heatmap(page: Page, key: str, title: str, how: str, matrix: list[list[float | None]], x: list[Any], bins: list[int] | None,
             labels: list[str], shapes: list[dict[str, Any]], notes: list[dict[str, Any]]) -> str:
    """One rank x step heatmap: a cell a step, or with ``bins`` a cell a column of steps (their ``how``), its title and hover saying so."""
    column = "step %{x}"
    if bins is not None:  # two or more columns
        title, column, matrix = f"{title}: each column the {how} of {bins[1] - bins[0]} steps", f"steps %{{x}} ({how})", _binned(matrix, bins, how)
    return page.chart(f"cl-heat-{key}", [{"type": "heatmap", "z": matrix, "x": x, "y": labels, "colorscale": "YlOrRd", "reversescale": True,
                                          "hoverongaps": False, "hovertemplate": f"%{{y}}, {column}: %{{z:.3f}} ms<extra></extra>"}],
                      {"title": {"text": title}, "height": min(900, 120 + 12 * len(labels)), "shapes": shapes, "annotations": notes,
                       "xaxis": {"title": {"text": "step"}, **({} if bins is None else {"type": "category", "nticks": 12, "tickangle": 0})},
                       "yaxis": {"autorange": "reversed"}, "margin": {"l": 110, "r": 20, "t": 36, "b": 40}})


def _step_columns(steps: list[int], ranks: int) -> tuple[list[Any], list[int] | None]:
    """The heatmaps' x: every step when they fit in ``HEATMAP_CELLS`` and ``HEATMAP_COLUMNS``, with no bins (None);
    else as many columns of equal steps as fit, labelled by the steps they hold ("1–35"), and each column's first index."""
    columns = max(1, min(HEATMAP_COLUMNS, HEATMAP_CELLS // max(1, ranks)))
    if len(steps) <= columns:
        return list(steps), None
    width = math.ceil(len(steps) / columns)
    starts = list(range(0, len(steps), width))
    return [f"{steps[i]}\u2013{steps[min(i + width, len(steps)) - 1]}" for i in starts], starts


def _binned(matrix: list[list[float | None]], starts: list[int], how: str) -> list[list[float | None]]:
    """Each row's steps in the columns that begin at ``starts``: their max or mean (ms), None where a column has none
    (plain Python: the viewer needs no numpy)."""
    spans = list(zip(starts, starts[1:] + [None]))
    rows: list[list[float | None]] = []
    for row in matrix:
        values = [v for v in row if v is not None]
        columns = ([values[begin:end] for begin, end in spans] if len(values) == len(row)  # every step there: the row's own slices
                   else [[v for v in row[begin:end] if v is not None] for begin, end in spans])
        rows.append([None if not column else max(column) if how == "max" else round(sum(column) / len(column), 3) for column in columns])
    return rows


def _rank_page(run: Run, rank: int) -> str | None:
    """In the viewer: the rank's Overview page."""
    return run_url("overview", run.id, rank) if rank in run.ranks else None


def _rank_report(run: Run, rank: int, fragment: str = "") -> str | None:
    """In cluster_report.html: the rank's report_{rank}.html, relative to the page."""
    if rank not in run.ranks:
        return None
    return names.rank_report_href(names.cluster_dir(run.ranks[rank]), run.ranks[rank], rank) + fragment


def _marks(order: list[int], slow: set[int], nodes: set[str], host_of: dict[Any, Any],
           last_step: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The heatmaps' marks of each slow rank's row and each slow node's rows (by their place in ``order``, the
    heatmap's rows): a tick in the right margin and the name with an arrow, leaving the cells to show their time,
    so one row of a thousand stands out and is named."""
    at = {r: i for i, r in enumerate(order)}
    pad = max(0.5, len(order) / 300)  # a tick of a few pixels at a thousand rows
    shapes, notes = [], []
    for host in sorted(nodes)[:MARKED_MAX]:  # first: a slow rank of a slow node is drawn over its node's tick
        rows = sorted(at[r] for r in order if host_of.get(r) == host)
        if rows:
            shapes.append(_tick(rows[0] - pad, rows[-1] + pad, SLOW_NODE_COLOR))
            notes.append(_note(rows[len(rows) // 2], last_step, f"slow node {plot_text(host)}", SLOW_NODE_COLOR, len(order)))
    for rank in sorted(r for r in slow if r in at)[:MARKED_MAX]:
        shapes.append(_tick(at[rank] - pad, at[rank] + pad, SLOW_RANK_COLOR))
        notes.append(_note(at[rank], last_step, f"slow rank {rank}", SLOW_RANK_COLOR, len(order)))
    return shapes, notes


def _tick(low: float, high: float, color: str) -> dict[str, Any]:
    return {"type": "rect", "xref": "paper", "x0": 1.002, "x1": 1.012, "yref": "y", "y0": low, "y1": high,
            "fillcolor": color, "line": {"color": color, "width": 1}}


def _note(row: int, step: Any, text: str, color: str, rows: int) -> dict[str, Any]:
    return {"xref": "x", "x": step, "yref": "y", "y": row, "text": text, "showarrow": True, "arrowhead": 2, "arrowcolor": color,
            "ax": -60, "ay": 24 if row < rows / 2 else -24, "font": {"color": color, "size": 11}, "bgcolor": "rgba(255,255,255,0.9)",
            "bordercolor": color}


CLUSTER_TIMELINE_RANKS = 8  # the page draws every rank's step timeline up to this many; past it, this rank's and the slow ones'


def _cluster_and_timelines(run: Run, rank: int, loaded: Loaded) -> None:
    """The job's cluster summary (no rank's own files) and the step-level timelines of its ranks: every rank's up to
    ``CLUSTER_TIMELINE_RANKS``, past it this rank's and the slow ones'."""
    cluster = cluster_summary(run)
    slow = cluster["data"].get("slow_ranks") or [] if cluster["status"] == "ok" and isinstance(cluster["data"], dict) else []
    shown = sorted(run.ranks) if len(run.ranks) <= CLUSTER_TIMELINE_RANKS else sorted({rank, *(r for r in slow if r in run.ranks)})
    loaded.update(cluster_summary=cluster, step_timeline=step_timeline(run, shown))


VIEW = View("cluster", "Cluster", ("info", "hccl"), cluster_page,
            hints={"hccl": "Set profile_communication: true on a multi-card run to record communication."},
            more=_cluster_and_timelines,
            takes_report=True,
            compares_ranks=True)
