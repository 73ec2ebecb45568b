"""Communication per rank (``hccl_raw_{r}.csv``) and the cluster view across the ranks of one directory.

Wait is the part of a collective a rank spends waiting for the slowest peer: for the i-th call of
a step, a rank's duration minus the shortest duration any rank had for that call.
"""
import glob
import os

import orjson

from ..writers import write_csv, write_json

HCCL_HEADER = ["step_num", "communication_cost", "wait_cost", "link_info", "communication_operator_cost"]


def write_rank(data, ctx):
    """Per-step communication cost (ms) of this rank; wait is filled in by the cluster pass."""
    if not data.comm:
        return None
    per_step = {}
    for call in data.comm:
        entry = per_step.setdefault(call.get("step", 0), {"cost": 0.0, "ops": {}})
        entry["cost"] += call["dur"] / 1e6
        op = entry["ops"].setdefault(call.get("name", "comm"), [0, 0.0])
        op[0] += 1
        op[1] += call["dur"] / 1e6
    rows = [[step, round(e["cost"], 4), 0, "{}", orjson.dumps({k: [v[0], round(v[1], 4)] for k, v in e["ops"].items()}).decode()]
            for step, e in sorted(per_step.items())]
    if rows:
        rows.append(["-", round(sum(r[1] for r in rows) / len(rows), 4), 0, "{}", "{}"])
    write_csv(ctx.path(f"hccl_raw_{ctx.rank}.csv"), HCCL_HEADER, rows)
    return {"steps": len(per_step), "mean_ms": rows[-1][1] if rows else 0.0}


def write_cluster(profiler_dir, rank_results, pretty=False):
    """Side-by-side stages and communication of every rank analysed into this directory; names the slowest."""
    summaries = []
    for path in sorted(glob.glob(os.path.join(profiler_dir, "summary_*.json"))):
        try:
            with open(path, "rb") as handle:
                summaries.append(orjson.loads(handle.read()))
        except (OSError, orjson.JSONDecodeError):
            continue
    summaries.extend(s for s in rank_results if s["rank_id"] not in {x.get("rank_id") for x in summaries})
    if len(summaries) < 2:
        return None
    ranks = []
    for s in sorted(summaries, key=lambda x: x.get("rank_id", 0)):
        stages = s.get("stages_ms") or {}
        ranks.append({"rank_id": s.get("rank_id"), "step_time_ms": (s.get("step_time_ms") or {}).get("mean"),
                      "iteration_interval": stages.get("iteration_interval"), "fp_and_bp": stages.get("fp_and_bp"),
                      "tail": stages.get("tail"), "communication_ms": (s.get("communication") or {}).get("mean_ms"),
                      "communication_wait_ms": (s.get("communication") or {}).get("wait_ms"), "steps": s.get("steps_profiled")})
    compute = [r for r in ranks if r["fp_and_bp"] is not None]
    slowest = max(compute, key=lambda r: (r["fp_and_bp"] or 0) + (r["iteration_interval"] or 0)) if compute else None
    result = {"rank_size": len(ranks), "ranks": ranks, "slowest_rank": slowest and slowest["rank_id"],
              "why": slowest and "largest step interval + forward/backward (its own work, before waiting for peers)"}
    write_json(os.path.join(profiler_dir, "cluster_summary.json"), result, pretty)
    write_csv(os.path.join(profiler_dir, f"cpu_cluster_analyse_model-data_parallel_1_{len(ranks)}_0.csv"),
              ["rank_id", "step_time(ms)", "iteration_interval(ms)", "fp_and_bp(ms)", "tail(ms)", "communication(ms)", "communication_wait(ms)"],
              [[r["rank_id"], r["step_time_ms"], r["iteration_interval"], r["fp_and_bp"], r["tail"], r["communication_ms"],
                r["communication_wait_ms"]] for r in ranks])
    return result
