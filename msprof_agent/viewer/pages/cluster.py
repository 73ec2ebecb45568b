"""The Cluster page: the job's ranks from its cluster summary alone (findings, rank x step heatmaps, the rank table)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..render import ok, table
from .overview import findings_view
from .steps import timeline_chart

if TYPE_CHECKING:
    from ..render import Page
    from ..sections import Loaded, Run

CLUSTER_COLUMNS = (("rank_id", "Rank", "count"), ("host", "Host", "text"), ("step_time_ms", "Step (ms)", "num"),
                   ("own_work_ms", "Own work (ms)", "num"), ("iteration_interval", "Interval (ms)", "num"), ("fp_and_bp", "Fwd+bwd (ms)", "num"),
                   ("tail", "Tail (ms)", "num"), ("communication_ms", "Communication (ms)", "num"), ("slow", "", "text"))
CLUSTER_TABLE_ROWS = 128  # the ranks with the most own work first; cluster_summary.json holds every rank
HEATMAPS = (("step_ms", "Step time (ms)"), ("own_ms", "Own work: step minus collectives (ms)"), ("comm_ms", "Waiting in collectives (ms)"))


def cluster_page(page: Page, run: Run, rank: int, loaded: Loaded, report: bool = False) -> dict[str, Any]:
    cluster = loaded["cluster_summary"]
    data = cluster["data"] if ok(cluster) and isinstance(cluster["data"], dict) else {}
    findings = findings_view(data.get("findings"), run, rank, report)
    slow, nodes = set(data.get("slow_ranks") or []), set(data.get("slow_nodes") or [])
    rows = [dict(r, slow="slow rank" if r.get("rank_id") in slow else "slow node" if r.get("host") in nodes else "")
            for r in data.get("ranks") or [] if isinstance(r, dict)]
    rows.sort(key=lambda r: -(r.get("own_work_ms") or 0.0))
    per_step = data.get("per_step") or {}
    labels = [f"rank {r}" + (" (slow)" if r in slow else "") for r in per_step.get("rank") or []]
    heatmaps = [page.chart(f"cl-heat-{key}", [{"type": "heatmap", "z": per_step[key], "x": per_step.get("step"), "y": labels,
                                               "colorscale": "YlOrRd", "hoverongaps": False}],
                           {"title": {"text": title}, "height": min(900, 120 + 12 * len(labels)), "yaxis": {"autorange": "reversed"}})
                for key, title in HEATMAPS if per_step.get(key)]
    return {"several": len(run.ranks) > 1, "findings": findings, "cluster_summary": cluster, "rule": data.get("rule"),
            "slow_ranks": sorted(slow), "slow_nodes": sorted(nodes), "missing": data.get("missing_ranks") or [],
            "table": table("cluster-ranks", CLUSTER_COLUMNS, rows, search_keys=("rank_id", "host", "slow"), limit=CLUSTER_TABLE_ROWS),
            "heatmaps": heatmaps, "communication": ok(loaded["hccl"]) or any(r.get("communication_ms") for r in rows),
            "timeline": timeline_chart(page, "cl-timeline", loaded["step_timeline"])}
