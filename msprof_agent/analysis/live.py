"""The online rules on a running job's live records (``live.py``, one per rank; their contract: ``contract/live.py``).

A rank's findings from its recent steps and heap samples (``rank_findings``): data-bound, slow steps now, a
periodic pause, memory growth: the diagnosis's own rules and thresholds on rows of the record's stages (data
wait; host, the rest of the step outside collectives: no op split). The job's view over every rank
(``job_view``): steps per second, the step time now and its trend, the stragglers by the cluster step's rule
on the recent steps' own work, the slowest ranks and why, each rank's findings, and a hang (``contract.live.hang``).
Drawn here, by the readers (``top``, the viewer), not in the ranks: these rules need numpy and the analysis.
"""
from __future__ import annotations

import types
from typing import Any

from ..contract import live as contract
from ..contract.live import RECENT_STEPS, median
from . import cluster, warmup
from .diagnosis import verdict
from .diagnosis.breakdown import mad_of
from .diagnosis.data_wait import data_finding
from .diagnosis.findings import JITTER_MIN_MS, MIN_SHARE, make_finding
from .diagnosis.memory_growth import judge_memory
from .diagnosis.patterns import jitter_finding
from .diagnosis.words import ms_words, ranges, steps_words

Row = dict[str, Any]

TREND_STEPS = 50  # the step time now against the median of the steps before it
RATE_WINDOW_S = 10.0  # steps per second over the last seconds


def _rows(columns: dict[str, list[Any]]) -> list[Row]:
    """The diagnosis's rows: total, wait, communication and host (the rest) in ms, start and end in ns; warm-up steps left out."""
    rows = []
    for i, n in enumerate(columns["n"]):
        total, wait, comm = columns["ms"][i], columns["wait_ms"][i], columns["comm_ms"][i]
        end = columns["end_ns"][i]
        rows.append({"n": n, "start": end - int(total * 1e6), "end": end, "total": total, "wait": wait, "communication": comm,
                     "host": max(total - wait - comm, 0.0)})
    if rows and rows[0]["n"] == 1:
        rows = warmup.steady(rows, warmup.detect([r["n"] for r in rows], [r["total"] for r in rows]))
    return rows[1:] if rows and rows[0]["n"] == 1 else rows  # step 1 carries the start-up


def slow_steps_finding(steady: list[Row]) -> dict[str, Any] | None:
    """The last steps run slow: over the median by the diagnosis's slow-step margin (JITTER_MIN_MS and 3 MADs), most of the last few."""
    if len(steady) < 2 * RECENT_STEPS:
        return None
    earlier = [r["total"] for r in steady[:-RECENT_STEPS]]
    middle, mad = median(earlier), mad_of(earlier)
    recent = steady[-RECENT_STEPS:]
    slow = [r for r in recent if r["total"] - middle >= max(JITTER_MIN_MS, 3 * mad)]
    if len(slow) <= RECENT_STEPS // 2:
        return None
    now = median([r["total"] for r in recent])
    extra = now - middle
    numbers = [r["n"] for r in slow]
    evidence = {"steps": ranges(numbers), "step_ms_now": round(now, 3), "median_ms_before": round(middle, 3)}
    text = f"Slow steps now: {steps_words(numbers)} take {ms_words(now)}, {ms_words(extra)} over the median before"
    words = [f"median of the last {RECENT_STEPS} steps {ms_words(now)}, of the {len(earlier)} before {ms_words(middle)} "
             f"(MAD {ms_words(mad)})"]
    severity = "high" if extra >= MIN_SHARE * max(middle, 1e-9) * 3 else "medium"
    return make_finding("slow_steps", "jitter", severity, extra, evidence, words, text,
                        "the capture rule records op detail of the next steps on every rank (capture option slow_step), or "
                        "run msprof-agent capture DIR --steps 5 to see where the time goes")


def rank_findings(columns: dict[str, list[Any]], memory: list[list[int]], meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings the online rules give a rank from its live record's steps (``contract.live.step_columns``) and heap
    samples, most severe first."""
    steady = _rows(columns)
    if len(steady) < 4:
        return []
    step_ms = sum(r["total"] for r in steady) / len(steady)
    found = [data_finding(steady, step_ms, {}, meta)]
    slow = slow_steps_finding(steady)
    found.append(slow)
    if slow is None:  # a level shift is not a beat
        found.append(jitter_finding(steady, meta=meta))
    data = types.SimpleNamespace(mem=[], cpu=[{"ts": ts, "heap": value} for ts, value in memory], buffers=[], pauses=[], op_count=0)
    found.append(judge_memory(data, steady, meta.get("framework")).finding)
    kept = verdict.rank([f for f in found if f is not None])
    return [{key: f[key] for key in ("id", "category", "severity", "ms_per_step", "text", "evidence_text", "action")} for f in kept]


def _rank_view(rec: dict[str, Any], now: int) -> dict[str, Any]:
    steps = rec.get("steps") or {}
    ms, ends = steps.get("ms") or [], steps.get("end_ns") or []
    own = [t - c for t, c in zip(ms, steps.get("comm_ms") or [])]
    recent = ms[-RECENT_STEPS:]
    before = ms[-RECENT_STEPS - TREND_STEPS:-RECENT_STEPS]
    rate_from = now - int(RATE_WINDOW_S * 1e9)
    counted = [e for e in ends if e >= rate_from]
    if len(counted) >= 2:
        rate = (len(counted) - 1) / max((now - counted[0]) / 1e9, 1e-3)  # falls while no step ends
    else:
        rate = 0.0
    step_now = median(recent) if recent else None
    on_device = ((rec.get("device_steps") or {}).get("ms") or [])[-RECENT_STEPS:]
    state = contract.state_of(rec, now)
    findings = rank_findings(steps, rec.get("memory") or [], {"framework": rec.get("framework"), **(rec.get("meta") or {})}) if steps else []
    wait_now = median((steps.get("wait_ms") or [])[-RECENT_STEPS:] or [0.0])
    comm_now = median((steps.get("comm_ms") or [])[-RECENT_STEPS:] or [0.0])
    return {"rank": rec["rank"], "host": rec.get("host") or "", "state": state, "steps_done": rec.get("steps_done", 0),
            "step_ms_now": round(step_now, 3) if step_now is not None else None,
            "gpu_step_ms_now": round(median(on_device), 3) if on_device else None,
            "trend": round(step_now / median(before), 3) if before and step_now is not None and median(before) > 0 else None,
            "own_ms_now": round(median(own[-RECENT_STEPS:]), 3) if own else None, "wait_ms_now": round(wait_now, 3),
            "comm_ms_now": round(comm_now, 3), "steps_per_s": round(rate, 2),
            "idle_s": round((now - ends[-1]) / 1e9, 1) if ends else None, "last_end_ns": ends[-1] if ends else None,
            "findings": findings, "framework": rec.get("framework"), "capture": rec.get("capture")}


def _why(view: dict[str, Any]) -> str:
    """Where a rank's step goes now, in words: its parts (data wait, the rest of its own work, collectives), largest first."""
    own, wait, comm = view["own_ms_now"] or 0.0, view["wait_ms_now"] or 0.0, view["comm_ms_now"] or 0.0
    parts = {"data wait": wait, "host and compute": max(own - wait, 0.0), "in collectives": comm}
    return ", ".join(f"{name} {ms_words(ms)}" for name, ms in sorted(parts.items(), key=lambda p: -p[1]) if ms > 0)


def job_view(records: list[dict[str, Any]], now: int) -> dict[str, Any]:
    """The running job as top and the viewer show it, from its ranks' live records."""
    latest = contract.latest_by_rank(records)
    ranks = [_rank_view(r, now) for r in latest.values()]
    running = [v for v in ranks if v["state"] == "running"]
    rank_size = max([int(r.get("rank_size") or 1) for r in latest.values()] + [len(latest)]) if latest else 0
    entries = [{"rank_id": v["rank"], "host": v["host"], "own_work_ms": v["own_ms_now"], "framework": v["framework"],
                "breakdown_ms": {"wait": v["wait_ms_now"], "host": round((v["own_ms_now"] or 0.0) - v["wait_ms_now"], 3)}}
               for v in running if v["own_ms_now"] is not None]
    slow_ranks, _nodes, straggling = cluster.stragglers(entries) if len(entries) > 1 else ([], [], [])
    slowest = sorted((v for v in running if v["own_ms_now"] is not None), key=lambda v: -(v["own_ms_now"] or 0.0))[:3]
    findings = [dict(f, rank=None) for f in straggling]
    for v in ranks:  # a straggler's peers are slow now because they wait for it: the straggler finding says so once
        findings += [dict(f, rank=v["rank"]) for f in v["findings"] if not (slow_ranks and v["rank"] not in slow_ranks and f["id"] == "slow_steps")]
    findings = verdict.rank(findings)
    times = [v["step_ms_now"] for v in running if v["step_ms_now"] is not None]
    trends = [v["trend"] for v in running if v["trend"] is not None]
    view: dict[str, Any] = {
        "now_ns": now, "rank_size": rank_size, "ranks": sorted(ranks, key=lambda v: v["rank"]),
        "missing_ranks": [r for r in range(rank_size) if r not in latest],
        "state": "running" if running else ("ended" if ranks and all(v["state"] == "ended" for v in ranks) else "stale"),
        "steps_per_s": min((v["steps_per_s"] for v in running), default=0.0), "step_ms_now": max(times) if times else None,
        "gpu_step_ms_now": max((v["gpu_step_ms_now"] for v in running if v["gpu_step_ms_now"] is not None), default=None),
        "trend": max(trends) if trends else None, "slow_ranks": slow_ranks,
        "slowest": [{"rank": v["rank"], "own_ms_now": v["own_ms_now"], "step_ms_now": v["step_ms_now"], "why": _why(v)} for v in slowest],
        "findings": findings, "capture": next((v["capture"] for v in ranks if v["capture"]), None), "hang": contract.hang(records, now),
    }
    return view


