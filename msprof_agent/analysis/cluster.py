"""The cluster step: ``cluster_summary.json`` (and MindInsight's cluster CSV) from the ranks' summaries alone.

Each rank's summary is cut down to its ``entry`` (per-step arrays and a few means) as soon as it is read
or comes back from a worker, so the roll-up holds entries, never summaries. The output depends only on
the set of entries (sorted by rank), so the ranks of a job that write it at exit in any order, and
``msprof-agent analyse``, write the same bytes; a rank writes it at exit only once every rank of the job
(``rank_size`` of its meta) has its summary.

Straggler rule (one for the whole agent): a rank's own work per step is its step time minus its time in
collectives (where a fast rank waits for the slow one), its median over the steady steps. A rank is slow
when its own work exceeds the other ranks' median by ``MAD_TIMES`` of their MAD (scaled to a standard
deviation), by ``MIN_EXTRA_MS`` and by ``MIN_EXTRA_SHARE`` of the median. Ranks are grouped by host: a
host of several ranks whose median own work is slow by the same rule against the other hosts is a slow
node, and its ranks are then judged only against each other. The rule reads durations, which need no
common clock; the hosts' clock offsets (the median gap between their step ends, which follow the same
collectives) are recorded for readers that compare instants across hosts (``contract.timebase.clock_shifts_ns``: the timeline download).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..contract import names
from ..contract.columns import CLUSTER_HEADER
from ..contract.summary import NO_END_RECORD, Summary, summaries, warmup_step_numbers
from ..writers import write_csv, write_json
from .diagnosis.actions import action
from .diagnosis.breakdown import STAGE_WORDS
from .diagnosis.findings import make_finding
from .diagnosis.words import ms_words

Entry = dict[str, Any]

MAD_TIMES = 5.0
MIN_EXTRA_MS = 5.0  # below this a difference is noise on a shared machine
MIN_EXTRA_SHARE = 0.10
RULE = (f"own work per step (step time minus time in collectives, median of the steady steps) over the other ranks' median "
        f"by {MAD_TIMES:g} MADs, {MIN_EXTRA_MS:g} ms and {MIN_EXTRA_SHARE:.0%}; a host whose ranks' median is slow by the same rule "
        f"against the other hosts is a slow node")


def entry(summary: Summary | dict[str, Any]) -> Entry:
    """What the roll-up keeps of one rank's summary: its per-step times (ms) and means."""
    per_step = summary.get("per_step_ms") or {}
    steps = list(per_step.get("step") or [])
    totals = list(per_step.get("total") or [])
    comm = list(per_step.get("communication") or [0.0] * len(steps))
    warm = warmup_step_numbers(summary)
    steady = [i for i, n in enumerate(steps) if n not in warm] or list(range(len(steps)))
    own = [round(t - c, 4) for t, c in zip(totals, comm)]
    stages = summary.get("stages_ms") or {}
    return {"rank_id": summary.get("rank_id"), "host": summary.get("host") or "", "rank_size": int(summary.get("rank_size") or 1),
            "framework": summary.get("framework"), "steps": steps, "step_ms": totals, "own_ms": own, "comm_ms": comm,
            "end_ns": list(per_step.get("end_ns") or []),
            "own_work_ms": round(float(np.median([own[i] for i in steady])), 4) if steady else None,
            "step_time_ms": (summary.get("step_time_ms") or {}).get("mean"), "iteration_interval": stages.get("iteration_interval"),
            "fp_and_bp": stages.get("fp_and_bp"), "tail": stages.get("tail"),
            "communication_ms": (summary.get("communication") or {}).get("mean_ms"), "breakdown_ms": summary.get("step_breakdown_ms"),
            "closed": summary.get("end_reason") != NO_END_RECORD, "collectives": summary.get("collectives") or {},
            "comm_groups": (summary.get("communication") or {}).get("groups") or {}}


def _mad(values: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(values - np.median(values)))) if len(values) else 0.0


def _outliers(values: dict[Any, float]) -> dict[Any, dict[str, float]]:
    """The keys whose value is slow against the others' median and MAD (the module's rule), with the figures."""
    keys = list(values)
    array = np.array([values[k] for k in keys], dtype=np.float64)
    found = {}
    for i, key in enumerate(keys):
        others = np.delete(array, i)
        if not len(others):
            continue
        median, mad = float(np.median(others)), _mad(others)
        extra = float(array[i]) - median
        if extra > max(MAD_TIMES * mad, MIN_EXTRA_MS, MIN_EXTRA_SHARE * abs(median)):
            found[key] = {"own_work_ms": round(float(array[i]), 3), "others_median_ms": round(median, 3),
                          "others_mad_ms": round(mad, 3), "extra_ms": round(extra, 3)}
    return found


def _severity(extra: float, median: float) -> str:
    return "high" if extra >= 0.3 * max(median + extra, 1e-9) else "medium"


def stragglers(entries: list[Entry]) -> tuple[list[int], list[str], list[dict[str, Any]]]:
    """(slow ranks, slow nodes, their findings) by the module's rule."""
    own = {e["rank_id"]: e["own_work_ms"] for e in entries if e["own_work_ms"] is not None}
    by_rank = {e["rank_id"]: e for e in entries}
    hosts: dict[str, list[int]] = {}
    for rank in own:
        hosts.setdefault(by_rank[rank]["host"], []).append(rank)
    host_own = {h: float(np.median([own[r] for r in ranks])) for h, ranks in hosts.items() if len(ranks) > 1}
    slow_nodes = _outliers(host_own) if len(host_own) > 1 else {}
    findings: list[dict[str, Any]] = []
    for host, figures in sorted(slow_nodes.items()):
        evidence = {"host": host, "ranks": sorted(hosts[host]), **figures}
        text = (f"Slow node: the {len(hosts[host])} ranks on {host} work {ms_words(figures['extra_ms'])} more per step than the other "
                f"hosts' ranks (median), who wait for them in collectives")
        words = [f"its ranks' median own work {ms_words(figures['own_work_ms'])} a step, the other hosts' {ms_words(figures['others_median_ms'])}"]
        findings.append(make_finding("slow_node", "straggler", _severity(figures["extra_ms"], figures["others_median_ms"]), figures["extra_ms"],
                                     evidence, words, text, action("slow_node", None, host=host)))
    slow: dict[int, dict[str, float]] = {}
    ordinary = {r: ms for r, ms in own.items() if by_rank[r]["host"] not in slow_nodes}
    slow.update(_outliers(ordinary) if len(ordinary) > 1 else {})
    for host in slow_nodes:  # on a slow node a rank is judged against its node's other ranks
        slow.update(_outliers({r: own[r] for r in hosts[host]}))
    for rank, figures in sorted(slow.items()):
        breakdown = by_rank[rank]["breakdown_ms"] or {}
        kind = max(("host", "compute", "wait"), key=lambda key: breakdown.get(key) or 0.0)
        evidence = {"rank": rank, "host": by_rank[rank]["host"], **figures, "slow_rank_breakdown_ms": breakdown}
        text = (f"Straggler: rank {rank} works {ms_words(figures['extra_ms'])} more per step than the other ranks' median "
                f"(mostly {kind}), who wait for it in collectives")
        words = [f"rank {rank} works {ms_words(figures['own_work_ms'])} a step (step minus collectives), the others' median "
                 f"{ms_words(figures['others_median_ms'])} (MAD {ms_words(figures['others_mad_ms'])})"] + _breakdown_words(breakdown)
        findings.append(make_finding("straggler", "straggler", _severity(figures["extra_ms"], figures["others_median_ms"]), figures["extra_ms"],
                                     evidence, words, text, action("straggler", by_rank[rank]["framework"], rank=rank, kind=kind)))
    findings.sort(key=lambda f: -f["ms_per_step"])
    return sorted(slow), sorted(slow_nodes), findings


def _breakdown_words(breakdown: dict[str, Any]) -> list[str]:
    """The slow rank's own step split (medians over its steady steps), in words: where its extra time goes."""
    parts = [f"{STAGE_WORDS.get(key, key)} {ms_words(ms)}" for key, ms in breakdown.items() if key != "total" and ms]
    return [f"its step (median): {', '.join(parts)}"] if parts else []


def hangs(entries: list[Entry], rank_size: int) -> list[dict[str, Any]]:
    """For a job whose ranks ended without closing: per communication group, the ranks that entered its
    latest collective and never left it (waiting) while other members never entered it (missing)."""
    if all(e["closed"] for e in entries):
        return []
    groups: dict[str, dict[str, Any]] = {}
    for e in entries:
        for name, state in e["collectives"].items():
            group = groups.setdefault(name, {"ranks": state.get("ranks"), "state": {}})
            group["ranks"] = group["ranks"] or state.get("ranks")
            group["state"][e["rank_id"]] = state
    findings = []
    for name, group in sorted(groups.items()):
        members = sorted(group["ranks"] or range(rank_size))
        top = max(s["entered"] for s in group["state"].values())
        waiting = [r for r in members if r in group["state"] and group["state"][r]["entered"] == top and group["state"][r]["completed"] < top]
        missing = [r for r in members if r not in group["state"] or group["state"][r]["entered"] < top]
        if not waiting or not missing:
            continue
        last = group["state"][waiting[0]]["last"] or {}
        collective = f"{last.get('name')} #{top} of group {name}"
        evidence = {"step": last.get("step"), "collective": collective, "group": name, "seq": top, "ranks_missing": missing, "ranks_waiting": waiting,
                    "missing_last_entered": {str(r): group["state"][r]["entered"] if r in group["state"] else None for r in missing[:16]}}
        text = (f"Hang: {len(waiting)} rank(s) ({_few(waiting)}) wait in {collective} at step {last.get('step')}; "
                f"{len(missing)} rank(s) ({_few(missing)}) never entered it")
        words = [f"ranks {_few(waiting)} entered {collective} and never left it; ranks {_few(missing)} never entered it"]
        findings.append(make_finding("hang", "communication", "high", 0.0, evidence, words, text,
                                     action("hang", None, ranks=_few(missing), step=last.get("step"))))
    return findings


def group_roll_up(entries: list[Entry]) -> list[dict[str, Any]]:
    """Each communication group's calls and time per step, the mean over the ranks that ran it, and its ranks of most
    and least time (a member that arrives late waits least), slowest group first."""
    groups: dict[str, dict[int, dict[str, float]]] = {}
    for e in entries:
        for name, figures in e["comm_groups"].items():
            groups.setdefault(name, {})[e["rank_id"]] = figures
    rows = []
    for name, by_rank in groups.items():
        ms = {rank: figures["ms_per_step"] for rank, figures in by_rank.items()}
        most, least = max(ms, key=lambda r: (ms[r], -r)), min(ms, key=lambda r: (ms[r], r))
        rows.append({"group": name, "ranks": sorted(by_rank), "calls_per_step": round(float(np.mean([f["calls_per_step"] for f in by_rank.values()])), 3),
                     "ms_per_step": round(float(np.mean(list(ms.values()))), 4), "most": {"rank": most, "ms_per_step": ms[most]},
                     "least": {"rank": least, "ms_per_step": ms[least]}})
    return sorted(rows, key=lambda row: (-row["ms_per_step"], row["group"]))


def _few(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def clock_offsets(entries: list[Entry]) -> dict[str, float | None]:
    """Each host's clock against the first host's (ms): the median over common steps of the gap between the
    median step end of its ranks and of the first host's. Synchronised ranks end a step in the same collective."""
    ends: dict[str, dict[int, list[int]]] = {}
    for e in entries:
        for n, end in zip(e["steps"], e["end_ns"]):
            ends.setdefault(e["host"], {}).setdefault(n, []).append(end)
    if len(ends) < 2:
        return {}
    per_host = {h: {n: float(np.median(v)) for n, v in steps.items()} for h, steps in ends.items()}
    reference = per_host[min(per_host)]
    offsets: dict[str, float | None] = {}
    for host, steps in sorted(per_host.items()):
        gaps = [steps[n] - reference[n] for n in steps if n in reference]
        offsets[host] = round(float(np.median(gaps)) / 1e6, 3) if gaps else None
    return offsets


RANK_COLUMNS = ("rank_id", "host", "steps", "step_time_ms", "iteration_interval", "fp_and_bp", "tail", "communication_ms", "own_work_ms")


def roll_up(entries: Iterable[Entry]) -> dict[str, Any]:
    """The cluster summary of the ranks' entries; the same for the same entries in any order."""
    ranks = sorted(entries, key=lambda e: e["rank_id"])
    rank_size = max([e["rank_size"] for e in ranks] + [len(ranks)])
    slow_ranks, slow_nodes, findings = stragglers(ranks)
    hosts: dict[str, list[int]] = {}
    for e in ranks:
        hosts.setdefault(e["host"], []).append(e["rank_id"])
    offsets = clock_offsets(ranks)
    steps = sorted({n for e in ranks for n in e["steps"]})
    column = {n: i for i, n in enumerate(steps)}
    # each rank's columns: all of them where it has every step (then its rows need no gaps filled)
    columns = [slice(None) if e["steps"] == steps else [column[n] for n in e["steps"]] for e in ranks]

    def matrix(key: str) -> list[list[float | None]]:
        """KEY of every rank and step, to the µs (a step a rank lacks: None); numpy: 1 024 ranks x 2 000 steps
        are 2 M values a matrix."""
        values = np.full((len(ranks), len(steps)), np.nan)
        for i, e in enumerate(ranks):
            values[i, columns[i]] = np.asarray(e[key], dtype=np.float64)  # None -> NaN
        rows: list[list[float | None]] = np.round(values, 3).tolist()
        return [row if not np.isnan(values[i]).any() else [None if v != v else v for v in row] for i, row in enumerate(rows)]

    present = {e["rank_id"] for e in ranks}
    return {"rank_size": rank_size, "ranks_analysed": len(ranks), "missing_ranks": [r for r in range(rank_size) if r not in present],
            "ranks": [{key: (len(e["steps"]) if key == "steps" else e[key]) for key in RANK_COLUMNS} for e in ranks],
            "hosts": [{"host": h, "ranks": len(rs), "clock_offset_ms": offsets.get(h)} for h, rs in sorted(hosts.items())],
            "rule": RULE, "slow_ranks": slow_ranks, "slow_nodes": slow_nodes, "findings": hangs(ranks, rank_size) + findings,
            "communication_groups": group_roll_up(ranks),
            "per_step": {"step": steps, "rank": [e["rank_id"] for e in ranks], "step_ms": matrix("step_ms"), "own_ms": matrix("own_ms"),
                         "comm_ms": matrix("comm_ms")}}


def write(directory: str, entries: Iterable[Entry], pretty: bool = False) -> dict[str, Any] | None:
    """Write the roll-up of two or more ranks into ``directory`` (atomically); None for fewer."""
    result = roll_up(entries)
    if result["ranks_analysed"] < 2:
        return None
    write_json(os.path.join(directory, names.CLUSTER_SUMMARY), result, pretty)
    write_csv(os.path.join(directory, names.CLUSTER_ANALYSE.format(ranks=len(result["ranks"]))), CLUSTER_HEADER,
              [[r["rank_id"], r["step_time_ms"], r["iteration_interval"], r["fp_and_bp"], r["tail"], r["communication_ms"]] for r in result["ranks"]])
    return result


def _entries(directories: list[str]) -> Iterator[Entry]:
    for directory in directories:
        for _, summary in summaries(directory):
            yield entry(summary)


def write_when_complete(profiler_dir: str, rank_size: int, pretty: bool = False) -> dict[str, Any] | None:
    """At a rank's exit: the job's roll-up, once every one of its ``rank_size`` ranks has a summary (else None)."""
    directories = names.job_dirs(profiler_dir)
    present = {rank for d in directories for rank in names.summary_ranks(d)}
    if len(present) < 2 or not set(range(rank_size)) <= present:
        return None
    return write(names.cluster_dir(profiler_dir), _entries(directories), pretty)

