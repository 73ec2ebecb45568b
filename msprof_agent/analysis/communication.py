"""Communication per rank (``hccl_raw_{r}.csv``) and the cluster view across the ranks of one directory.

The hccl file keeps MindInsight's columns. Its ``wait_cost``, the time a rank waits inside a collective
for its slowest peer, needs every rank's calls side by side, which one rank's analysis does not have:
it is left empty (read back as "not measured"), never written as a 0 that would read as "no wait".
"""
import os

import orjson

from ..contract.columns import AVERAGE_ROW, CLUSTER_HEADER, HCCL_HEADER, NOT_MEASURED
from ..contract.names import CLUSTER_ANALYSE, CLUSTER_SUMMARY, HCCL
from ..contract.summary import summaries
from ..writers import write_csv, write_json
from . import advisor
from .ranks import SLOWEST_RANK_WHY, slowest_rank


def write_rank(data, ctx):
    """Per-step communication cost (ms) of this rank."""
    if not data.comm:
        return None
    per_step = {}
    for call in data.comm:
        entry = per_step.setdefault(call.get("step", 0), {"cost": 0.0, "ops": {}})
        entry["cost"] += call["dur"] / 1e6
        op = entry["ops"].setdefault(call.get("name", "comm"), [0, 0.0])
        op[0] += 1
        op[1] += call["dur"] / 1e6
    rows = [[step, round(e["cost"], 4), NOT_MEASURED, "{}", orjson.dumps({k: [v[0], round(v[1], 4)] for k, v in e["ops"].items()}).decode()]
            for step, e in sorted(per_step.items())]
    if rows:
        rows.append([AVERAGE_ROW, round(sum(r[1] for r in rows) / len(rows), 4), NOT_MEASURED, "{}", "{}"])
    write_csv(ctx.path(HCCL), HCCL_HEADER, rows)
    return {"steps": len(per_step), "mean_ms": rows[-1][1] if rows else 0.0}


def write_cluster(profiler_dir, rank_results, pretty=False):
    """Side-by-side stages and communication of every rank analysed into this directory; names the slowest."""
    found = [summary for _, summary in summaries(profiler_dir)]
    found.extend(s for s in rank_results if s["rank_id"] not in {x.get("rank_id") for x in found})
    if len(found) < 2:
        return None
    ranks = []
    for s in sorted(found, key=lambda x: x.get("rank_id", 0)):
        stages = s.get("stages_ms") or {}
        ranks.append({"rank_id": s.get("rank_id"), "step_time_ms": (s.get("step_time_ms") or {}).get("mean"),
                      "iteration_interval": stages.get("iteration_interval"), "fp_and_bp": stages.get("fp_and_bp"),
                      "tail": stages.get("tail"), "communication_ms": (s.get("communication") or {}).get("mean_ms"), "steps": s.get("steps_profiled")})
    slowest = slowest_rank({r["rank_id"]: r for r in ranks})
    straggler = advisor.straggler_finding(found)
    result = {"rank_size": len(ranks), "ranks": ranks, "slowest_rank": slowest,
              "why": SLOWEST_RANK_WHY if slowest is not None else None, "findings": [straggler] if straggler else []}
    write_json(os.path.join(profiler_dir, CLUSTER_SUMMARY), result, pretty)
    write_csv(os.path.join(profiler_dir, CLUSTER_ANALYSE.format(ranks=len(ranks))), CLUSTER_HEADER,
              [[r["rank_id"], r["step_time_ms"], r["iteration_interval"], r["fp_and_bp"], r["tail"], r["communication_ms"]] for r in ranks])
    return result
