"""The Cluster page: every rank side by side, the slowest rank, the cluster findings, communication per step."""
from ..render import STAGE_COLORS, STAGES, ok, table
from .overview import findings_view
from .steps import timeline_chart

CLUSTER_COLUMNS = (("rank", "Rank", "count"), ("total", "Step (ms)", "num"), ("iteration_interval", "Interval (ms)", "num"),
                   ("fp_and_bp", "Fwd+bwd (ms)", "num"), ("tail", "Tail (ms)", "num"), ("communication", "Communication (ms)", "num"),
                   ("wait", "Comm. wait (ms)", "num"), ("slowest", "", "text"))


def cluster_page(page, run, rank, loaded, report=False):
    ranks, slowest = loaded["ranks"], loaded["slowest"]
    cluster = loaded["cluster_summary"]
    findings = findings_view(cluster["data"].get("findings"), run, rank, report) if ok(cluster) and isinstance(cluster["data"], dict) else []
    timeline = timeline_chart(page, "cl-timeline", loaded["step_timeline"])
    rows, problems = [], []
    for r, sections in ranks.items():
        st, hccl = sections["step_trace"], sections["hccl"]
        row = {"rank": r}
        if ok(st) and st["data"]["average"]:
            row.update({k: st["data"]["average"].get(k) for k in ("total", "iteration_interval", "fp_and_bp", "tail")})
        elif st["status"] == "error":
            problems.append((r, st))
        if ok(hccl) and hccl["data"]["average"]:
            row.update({"communication": hccl["data"]["average"]["communication_ms"], "wait": hccl["data"]["average"]["wait_ms"]})
        elif hccl["status"] == "error":
            problems.append((r, hccl))
        row["slowest"] = "slowest" if r == slowest else ""
        rows.append(row)
    labels = [f"rank {row['rank']}" + (" (slowest)" if row["slowest"] else "") for row in rows]
    stage_traces = [{"type": "bar", "x": labels, "y": [row.get(k) for row in rows], "name": label, "marker": {"color": STAGE_COLORS[k]}}
                    for k, label in STAGES]
    context = {"several": len(ranks) > 1, "problems": problems, "findings": findings, "cluster_summary": cluster,
               "table": table("cluster-ranks", CLUSTER_COLUMNS, rows), "timeline": timeline,
               "stage_chart": page.chart("cl-stages", stage_traces, {"barmode": "stack", "title": {"text": "Mean stage times per rank (ms)"}}),
               "comm_chart": None}
    if any(row.get("communication") is not None for row in rows):
        comm = [{"type": "bar", "x": labels, "y": [row.get(k) for row in rows], "name": label}
                for k, label in (("communication", "communication"), ("wait", "wait"))]
        context["comm_chart"] = page.chart("cl-comm", comm, {"barmode": "group", "title": {"text": "Communication per step per rank (ms)"}})
    return context
