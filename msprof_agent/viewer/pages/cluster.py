"""The Cluster page: the job's ranks from its cluster summary alone (findings, rank x step heatmaps with the slow
ranks and nodes marked, the paged rank table). The viewer draws it for any rank of the job; the roll-up writes
it once as ``cluster_report.html`` beside cluster_summary.json (``report``), where its links go to the ranks' reports."""
from ...contract import names
from ..render import ok, plot_text, run_url, table
from .overview import findings_view
from .steps import timeline_chart

CLUSTER_COLUMNS = (("rank_id", "Rank", "count"), ("host", "Host", "text"), ("step_time_ms", "Step (ms)", "num"),
                   ("own_work_ms", "Own work (ms)", "num"), ("iteration_interval", "Interval (ms)", "num"), ("fp_and_bp", "Fwd+bwd (ms)", "num"),
                   ("tail", "Tail (ms)", "num"), ("communication_ms", "Communication (ms)", "num"), ("slow", "", "text"))
CLUSTER_PAGE_ROWS = 50  # the rank table shows this many at a time; viewer.js sorts and pages every rank
HEATMAPS = (("step_ms", "Step time (ms)"), ("own_ms", "Own work: step minus collectives (ms)"), ("comm_ms", "Waiting in collectives (ms)"))
MARKED_MAX = 16  # slow ranks, and slow nodes, outlined on each heatmap; the findings and the table name every one
SLOW_RANK_COLOR, SLOW_NODE_COLOR = "#1f3a5f", "#6a3d9a"


def cluster_page(page, run, rank, loaded, report=False):
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
    shapes, notes = _marks(order, slow, nodes, {r.get("rank_id"): r.get("host") for r in rows})
    heatmaps = [page.chart(f"cl-heat-{key}", [{"type": "heatmap", "z": per_step[key], "x": per_step.get("step"), "y": labels,
                                               "colorscale": "YlOrRd", "hoverongaps": False,
                                               "hovertemplate": "%{y}, step %{x}: %{z:.3f} ms<extra></extra>"}],
                           {"title": {"text": title}, "height": min(900, 120 + 12 * len(labels)), "shapes": shapes, "annotations": notes,
                            "xaxis": {"title": {"text": "step"}}, "yaxis": {"autorange": "reversed"}})
                for key, title in HEATMAPS if per_step.get(key)]
    return {"several": len(run.ranks) > 1, "report": report, "findings": findings, "cluster_summary": cluster, "rule": data.get("rule"),
            "slow_ranks": sorted(slow), "slow_nodes": sorted(nodes), "missing": data.get("missing_ranks") or [],
            "table": table("cluster-ranks", CLUSTER_COLUMNS, rows, search_keys=("rank_id", "host", "slow"),
                           href=lambda row: link(run, row.get("rank_id")), page_size=CLUSTER_PAGE_ROWS),
            "heatmaps": heatmaps, "communication": ok(loaded.get("hccl")) or any(r.get("communication_ms") for r in rows),
            "timeline": timeline_chart(page, "cl-timeline", loaded["step_timeline"]) if "step_timeline" in loaded else None}


def _rank_page(run, rank):
    """In the viewer: the rank's Overview page."""
    return run_url("overview", run.id, rank) if rank in run.ranks else None


def _rank_report(run, rank, fragment=""):
    """In cluster_report.html: the rank's report_{rank}.html, relative to the page."""
    if rank not in run.ranks:
        return None
    return names.rank_report_href(names.cluster_dir(run.ranks[rank]), run.ranks[rank], rank) + fragment


def _marks(order, slow, nodes, host_of):
    """The heatmaps' shapes and annotations: an outline round each slow rank's row and each slow node's rows
    (by their place in ``order``, the heatmap's rows), and its name beside them, so one row of a thousand shows."""
    at = {r: i for i, r in enumerate(order)}
    shapes, notes = [], []
    for rank in sorted(r for r in slow if r in at)[:MARKED_MAX]:
        shapes.append(_outline(at[rank], at[rank], SLOW_RANK_COLOR, "solid"))
        notes.append(_note(at[rank], f"slow rank {rank}", SLOW_RANK_COLOR))
    for host in sorted(nodes)[:MARKED_MAX]:
        rows = sorted(at[r] for r in order if host_of.get(r) == host)
        if not rows:
            continue
        first = rows[0]
        for before, row in zip(rows, rows[1:] + [None]):
            if row is None or row != before + 1:  # the node's ranks in one run of rows: one outline each
                shapes.append(_outline(first, before, SLOW_NODE_COLOR, "dash"))
                first = row
        notes.append(_note(rows[len(rows) // 2], f"slow node {plot_text(host)}", SLOW_NODE_COLOR))
    return shapes, notes


def _outline(first, last, color, dash):
    return {"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": first - 0.5, "y1": last + 0.5,
            "line": {"color": color, "width": 2, "dash": dash}, "fillcolor": "rgba(0,0,0,0)"}


def _note(row, text, color):
    return {"xref": "paper", "x": 1, "xanchor": "right", "yref": "y", "y": row, "text": text, "showarrow": False,
            "font": {"color": color, "size": 11}, "bgcolor": "rgba(255,255,255,0.85)", "bordercolor": color}
