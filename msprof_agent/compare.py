"""``msprof-agent compare BASE NEW`` and the CI gate (``--fail-on``, ``run --baseline``).

Reads only analysed output, through ``contract``: ``summary_{r}.json`` (its per-step stage times),
``dataset_iterator_profiling_{r}.txt`` / ``device_queue_profiling_{r}.txt`` (per-step data wait)
and ``cpu_op_type_info_{r}.csv`` (op time, shown per step, not gated). With several ranks, their steps are pooled
(data-parallel ranks run the same steps), op time is summed, and peak memory is the largest rank's.

The regression rule, for a limit such as ``step_time>5%``:
the statistic (p50 unless the limit names ``.p90`` or ``.mean``) of NEW minus that of BASE must
exceed the limit (relative to BASE, or absolute with ``ms`` / ``MB``) AND exceed the noise: the
half-width of the 99 % bootstrap interval of that difference, from resampling each run's steps
(2000 resamples, fixed seed, so a verdict is reproducible). A change inside the noise is reported
as "noise", not as a regression. Peak memory is one number per run, so its limit alone decides.
Only increases count: every metric here is better lower. Warm-up steps (named in the summary) are
left out of every sample. Each run records its machine's speed (``summary.machine_speed``); when the
new run's machine was slower, the noise of the times is widened by the slowdown (not normalised: a
probe of a few ms can misjudge, and widening can only turn a failure into "noise", never the reverse),
and machines differing by more than ``SPEED_LIMIT`` are flagged in the notes. Slower is the lower of two
ratios, the probed speeds' and the CPU shares' (``machine_speeds``): on a busy machine the share is exact.

Two runs of different jobs (framework, world size, or less than ``SHARED_OP_TIME`` of their op time
and of their op calls shared by op type: a different model, not a code change; calls too, because a small
model's op times are mostly the machine's noise) are said as warnings, and under ``--fail-on``
the gate does not pass (exit 2) unless ``--allow-different`` is given.
"""
from __future__ import annotations

import json
import os
import re
import sys
from types import SimpleNamespace

import numpy as np

from . import environment, log, supervise
from .contract.columns import STAGES
from .contract.names import REPORT, STEP_TRACE, SUMMARY, earlier_runs, queue_file, rank_file, summary_ranks
from .contract.names import profiler_dirs as profiler_dirs_holding
from .contract.readers import fetch_waits, op_type_totals, read_queue
from .contract.summary import read_summary, step_samples, warmup_step_numbers

TYPE_CHECKING = False  # what follows is for the type checker only
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence
    from typing import Any, TypedDict

    from numpy.typing import NDArray

    Samples = NDArray[np.float64]  # one metric's per-step values (ms), every rank's pooled

    class Run(TypedDict):
        """One side of the comparison, as ``load_run`` reads it."""
        path: str
        profiler_dirs: list[str]
        ranks: list[int]
        steps: int
        samples: dict[str, Samples]
        op_ms_per_step: dict[str, float]
        peaks: dict[str, list[float]]  # "allocated" / "rss": each rank's peak, MB
        reports: list[str]
        machine_speed: dict[str, float] | None  # "speed" and "cpu_share", each the ranks' mean
        findings: dict[str, str]  # id -> text
        frameworks: list[str]
        op_calls: dict[str, float]

    class Limit(TypedDict):
        """One ``--fail-on`` limit, as ``_limit`` parses it."""
        metric: str
        stat: str
        value: float
        unit: str
        text: str

TIME_METRICS = ("step_time",) + STAGES + ("data_wait",)
METRICS = TIME_METRICS + ("peak_memory",)
SHOWN = [("step_time", "p50"), ("step_time", "p90")] + [(s, "p50") for s in STAGES] + [("data_wait", "p50"), ("data_wait", "p90"), ("peak_memory", "peak")]
RESAMPLES = 2000
TOP_OPS = 8
EXIT_BREACH, EXIT_ERROR = 1, 2
SPEED_LIMIT = 0.2  # machines whose probed speeds differ by more than this fraction are flagged
SHARED_OP_TIME = 0.5  # runs sharing less of their op time by op type are of different models
SPEED_UNIT = "million probe-loop iterations/s on a CPU, higher is faster"
RULE = ("regression = the statistic grew by more than the limit AND by more than the noise "
        "(half-width of the 99% bootstrap interval of the difference, from the per-step spread of the steady steps of both runs, "
        "widened for times by the new machine's slowdown: (1 / ratio - 1) x the base value, when the new machine is slower; "
        "the ratio is the lower of the probed speeds' new/base and the CPU shares' new/base)")


class CompareError(Exception):
    """Input the comparison cannot use: said as one line, exit status 2."""


# -- reading a run -------------------------------------------------------------------------------

def profiler_dirs(path: str) -> list[str]:
    """PATH itself, PATH/profiler or PATH/rank_*/profiler: those holding an analysed summary."""
    return profiler_dirs_holding(path, summary_ranks)


def _waits(directory: str, rank: int, warm: set[int]) -> list[float]:
    """The per-step data waits of the steps not in ``warm`` (the warm-up step numbers)."""
    name = queue_file(directory, rank)
    if name is None:
        return []
    with open(os.path.join(directory, name), "rb") as handle:
        return fetch_waits([f for f in read_queue(handle.read())["fetch"] if f.get("step") not in warm])


def load_run(path: str) -> Run:
    """Pooled per-step samples (ms), op time per step and peak memory of every rank under PATH."""
    directories = profiler_dirs(path)
    if not directories:
        raise CompareError(f"no analysed profile under {path} (looked for summary_*.json in it, profiler/ and rank_*/profiler/)")
    samples: dict[str, list[float]] = {m: [] for m in TIME_METRICS}
    ops: dict[str, float] = {}
    calls: dict[str, float] = {}
    ranks: list[int] = []
    reports: list[str] = []
    steps = 0
    speeds: list[tuple[float, float]] = []
    findings: dict[str, str] = {}
    frameworks: set[str] = set()
    peaks: dict[str, list[float]] = {"allocated": [], "rss": []}
    for directory in directories:
        for rank in summary_ranks(directory):
            summary = read_summary(directory, rank)
            try:
                per_step = step_samples(directory, rank, summary)
            except FileNotFoundError:
                raise CompareError(f"{os.path.join(directory, rank_file(SUMMARY, rank))} has no per-step times "
                                   f"and no {rank_file(STEP_TRACE, rank)} beside it") from None
            samples["step_time"] += per_step["total"]
            for stage in STAGES:
                samples[stage] += per_step[stage]
            samples["data_wait"] += _waits(directory, rank, warmup_step_numbers(summary))
            probed = summary.get("machine_speed") or {}
            if probed.get("speed") and probed.get("cpu_share"):
                speeds.append((probed["speed"], probed["cpu_share"]))
            steps += summary.get("steps_profiled") or 0
            totals = op_type_totals(directory, rank)  # every op type (the summary keeps only the top 20, without calls)
            for name, total, count in totals if totals is not None else [(op["op_type"], op["total_ms"], 0.0) for op in summary.get("top_op_types") or []]:
                ops[name] = ops.get(name, 0.0) + total
                calls[name] = calls.get(name, 0.0) + count
            memory = summary.get("memory") or {}
            for key in peaks:
                if memory.get(f"peak_{key}_mb") is not None:
                    peaks[key].append(memory[f"peak_{key}_mb"])
            ranks.append(summary.get("rank_id", rank))
            frameworks.add(summary.get("framework") or "no framework")
            for finding in summary.get("findings") or []:
                findings.setdefault(finding["id"], finding.get("text", finding["id"]))
            report = os.path.join(directory, rank_file(REPORT, rank))
            if os.path.isfile(report):
                reports.append(report)
    if not samples["step_time"]:
        raise CompareError(f"the profile under {path} has no profiled steps")
    return {"path": os.path.abspath(path), "profiler_dirs": directories, "ranks": ranks, "steps": steps,
            "samples": {m: np.asarray(v, dtype=np.float64) for m, v in samples.items()},
            "op_ms_per_step": {k: v / steps for k, v in ops.items()} if steps else {}, "peaks": peaks, "reports": reports,
            "machine_speed": dict(zip(("speed", "cpu_share"), np.mean(speeds, axis=0).tolist())) if speeds else None,
            "findings": findings, "frameworks": sorted(frameworks),
            "op_calls": calls}


# -- statistics ----------------------------------------------------------------------------------

def _stat(values: Samples, stat: str, axis: int | None = None) -> np.floating[Any] | Samples:
    if stat == "mean":
        return np.mean(values, axis=axis)
    return np.percentile(values, 50 if stat == "p50" else 90, axis=axis)


def bootstrap(values: Samples, stat: str, rng: np.random.Generator) -> Samples:
    """RESAMPLES values of stat ("mean", "p50", "p90") over resamples of VALUES (a numpy array)."""
    out = np.empty(RESAMPLES)
    for lo in range(0, RESAMPLES, 200):  # chunks keep memory flat for long runs
        idx = rng.integers(0, len(values), (min(200, RESAMPLES - lo), len(values)))
        out[lo:lo + len(idx)] = _stat(values[idx], stat, axis=1)
    return out


def noise(base: Samples, new: Samples, stat: str) -> float:
    """Half-width of the 99 % bootstrap interval of stat(new) - stat(base)."""
    rng = np.random.default_rng(0)
    diff = bootstrap(new, stat, rng) - bootstrap(base, stat, rng)
    low, high = np.percentile(diff, [0.5, 99.5])
    return float(high - low) / 2


def _peak_memory(base: Run, new: Run) -> tuple[float, float, str] | None:
    """Allocator peaks when both runs have them (the same source on both sides), else process RSS."""
    for key in ("allocated", "rss"):
        if base["peaks"][key] and new["peaks"][key]:
            return max(base["peaks"][key]), max(new["peaks"][key]), "framework allocator" if key == "allocated" else "process RSS"
    return None


# -- limits --------------------------------------------------------------------------------------

LIMIT_RE = re.compile(r"^\s*([a-z_]+)(?:\.(p50|p90|mean))?\s*>\s*([0-9]*\.?[0-9]+)\s*(%|ms|mb)\s*$", re.IGNORECASE)


def _limit(text: str) -> Limit:
    match = LIMIT_RE.match(text)
    if not match:
        raise CompareError(f'limit {text.strip()!r}: expected METRIC[.p50|.p90|.mean]>N% (or N ms, N MB), e.g. "step_time>5%"')
    metric, stat, value, unit = match.group(1).lower(), (match.group(2) or "").lower(), float(match.group(3)), match.group(4).lower()
    if metric not in METRICS:
        raise CompareError(f"limit {text.strip()!r}: unknown metric {metric!r}; known: {', '.join(METRICS)}")
    if metric == "peak_memory":
        if stat:
            raise CompareError(f"limit {text.strip()!r}: peak_memory is one number per run, it has no .{stat}")
        if unit == "ms":
            raise CompareError(f"limit {text.strip()!r}: peak_memory takes % or MB")
        stat = "peak"
    elif unit == "mb":
        raise CompareError(f"limit {text.strip()!r}: {metric} takes % or ms")
    named = f"{metric}.{stat}" if stat and stat != "peak" else metric
    return {"metric": metric, "stat": stat or "p50", "value": value, "unit": unit, "text": f"{named}>{value:g}{'%' if unit == '%' else ' ' + unit}"}


def parse_limits(spec: str | None) -> list[Limit]:
    """``"step_time>5%,data_wait>10%"`` or a TOML file (top-level keys or a ``[fail_on]`` table, e.g. ``step_time = "5%"``)."""
    if not spec:
        return []
    if spec.endswith(".toml") or os.path.isfile(spec):
        try:
            import tomllib
        except ImportError:  # the package supports 3.9; tomllib is stdlib from 3.11
            raise CompareError(f"--fail-on {spec}: a TOML file needs Python 3.11+; give the limits as a string") from None
        try:
            with open(spec, "rb") as handle:
                table = tomllib.load(handle)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise CompareError(f"--fail-on {spec}: {exc}") from None
        table = table.get("fail_on", table)
        items: list[str] = []
        for key, value in table.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise CompareError(f"--fail-on {spec}: {key} = {value!r}: give a number (percent) or a string like \"5%\" or \"2ms\"")
            items.append(f"{key}>{value}%" if not isinstance(value, str) else f"{key}>{value}")
        return [_limit(item) for item in items]
    return [_limit(item) for item in spec.split(",") if item.strip()]


# -- the comparison ------------------------------------------------------------------------------

def _row(metric: str, stat: str, unit: str, base_value: float, new_value: float, noise_value: float | None,
         limit: Limit | None) -> dict[str, Any]:
    change = new_value - base_value
    pct = (change / base_value * 100) if base_value else (0.0 if change == 0 else float("inf"))
    row: dict[str, Any] = {"metric": metric, "stat": stat, "unit": unit, "base": round(base_value, 3), "new": round(new_value, 3),
           "change": round(change, 3), "change_pct": round(pct, 1) if np.isfinite(pct) else None,
           "noise": None if noise_value is None else round(noise_value, 3), "limit": limit and limit["text"], "status": "-"}
    if limit:
        over = (pct > limit["value"]) if limit["unit"] == "%" else (change > limit["value"])
        if not over:
            row["status"] = "ok"
        elif noise_value is not None and change <= noise_value:
            row["status"] = "noise"
        else:
            row["status"] = "regression"
    return row


def shared_op_time(base_ops: Mapping[str, float], new_ops: Mapping[str, float]) -> float | None:
    """The share of op time two runs have in common by op type (the sum of each type's smaller share), or None
    when a run has no op time."""
    base_total, new_total = sum(base_ops.values()), sum(new_ops.values())
    if base_total <= 0 or new_total <= 0:
        return None
    return sum(min(ms / base_total, new_ops.get(name, 0.0) / new_total) for name, ms in base_ops.items())


def differences(base: Run, new: Run) -> list[str]:
    """Why BASE and NEW look like two different jobs rather than one job before and after a change."""
    found: list[str] = []
    if base["frameworks"] != new["frameworks"]:
        found.append(f"the runs differ in framework: base {', '.join(base['frameworks'])}, new {', '.join(new['frameworks'])}")
    if len(base["ranks"]) != len(new["ranks"]):
        found.append(f"the runs differ in world size: base {len(base['ranks'])} ranks, new {len(new['ranks'])}")
    shared = shared_op_time(base["op_ms_per_step"], new["op_ms_per_step"])
    called = shared_op_time(base["op_calls"], new["op_calls"])  # a small model's op times are mostly the machine's noise
    if shared is not None and shared < SHARED_OP_TIME and (called is None or called < SHARED_OP_TIME):
        found.append(f"the runs share {shared:.0%} of their op time by op type"
                     + (f" and {called:.0%} of their op calls" if called is not None else "")
                     + f" (under {SHARED_OP_TIME:.0%}): a different model, not a code change")
    return found


def compare(base_path: str, new_path: str, limits: Sequence[Limit] = (), allow_different: bool = False) -> dict[str, Any]:
    """The comparison as one JSON-ready dict: rows (what every output shows), top ops, breaches, and the
    differences that make the runs two jobs (failing a gate unless ALLOW_DIFFERENT)."""
    base, new = load_run(base_path), load_run(new_path)
    by_key = {(limit["metric"], limit["stat"]): limit for limit in limits}
    wanted = SHOWN + [k for k in by_key if k not in SHOWN]
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    speed = machine_speeds(base["machine_speed"], new["machine_speed"])
    if speed and abs(speed["ratio"] - 1) > SPEED_LIMIT:
        notes.append(f"the machines differ: the new run's probed speed is {speed['ratio']:.2f}x the base's (limit ±{SPEED_LIMIT:.0%}); "
                     "other work shared the cores or the hosts differ, so time changes are partly the machine's")
    slowdown = max(0.0, 1 / speed["ratio"] - 1) if speed else 0.0
    for metric, stat in wanted:
        limit = by_key.get((metric, stat))
        if metric == "peak_memory":
            peak = _peak_memory(base, new)
            if peak is None:
                if limit:
                    notes.append(f"limit {limit['text']} not checked: peak memory is missing from a run")
                continue
            before, after, source = peak
            rows.append(dict(_row(metric, stat, "MB", before, after, None, limit), source=source))
            continue
        x, y = base["samples"][metric], new["samples"][metric]
        if not len(x) or not len(y):
            if limit:
                notes.append(f"limit {limit['text']} not checked: no per-step {metric} in a run")
            continue
        before = float(_stat(x, stat))
        rows.append(_row(metric, stat, "ms", before, float(_stat(y, stat)), noise(x, y, stat) + slowdown * abs(before), limit))
    names = sorted(set(base["op_ms_per_step"]) | set(new["op_ms_per_step"]),
                   key=lambda n: -max(new["op_ms_per_step"].get(n, 0.0), base["op_ms_per_step"].get(n, 0.0)))[:TOP_OPS]
    ops: list[dict[str, Any]] = []
    for name in names:
        before, after = base["op_ms_per_step"].get(name, 0.0), new["op_ms_per_step"].get(name, 0.0)
        ops.append({"op_type": name, "base_ms_per_step": round(before, 3), "new_ms_per_step": round(after, 3),
                    "change": round(after - before, 3), "change_pct": round((after - before) / before * 100, 1) if before else None})
    breaches = [_breach_line(r) for r in rows if r["status"] == "regression"]
    describe = lambda run: {k: run[k] for k in ("path", "profiler_dirs", "ranks", "steps", "reports", "frameworks")}
    changed = {"appeared": [{"id": k, "text": t} for k, t in new["findings"].items() if k not in base["findings"]],
               "vanished": [{"id": k, "text": t} for k, t in base["findings"].items() if k not in new["findings"]]}
    different = differences(base, new)
    comparable = allow_different or not different
    return {"base": describe(base), "new": describe(new), "rows": rows, "top_op_types": ops, "findings": changed,
            "limits": [limit["text"] for limit in limits], "breaches": breaches, "notes": notes, "passed": not breaches and comparable,
            "rule": RULE, "machine_speed": speed, "differences": different, "comparable": comparable}


def machine_speeds(base: Mapping[str, float] | None, new: Mapping[str, float] | None) -> dict[str, Any] | None:
    """The two runs' probed machine speeds and the ratio that counts (new / base, below 1: the new machine was
    slower), or None. The ratio is the lower of the speeds' ratio and the CPU shares' ratio: the scheduler's
    count of time spent waiting for a core is exact, while the loop speed of one VM read 22 to 36 M iterations/s
    in processes minutes apart, so a loop that happened to run fast must not hide the cores other work took."""
    if not base or not new:
        return None
    ratio = min(new["speed"] / base["speed"], new["cpu_share"] / base["cpu_share"])
    return {"base": round(base["speed"], 3), "new": round(new["speed"], 3), "ratio": round(ratio, 3),
            "cpu_share": {"base": round(base["cpu_share"], 4), "new": round(new["cpu_share"], 4)},
            "noise_widened_by": f"{max(0.0, 1 / ratio - 1):.1%} of the base value"}


def _speed_line(result: Mapping[str, Any]) -> str:
    speed = result.get("machine_speed")
    if not speed:
        return "machine speed: not probed in both runs"
    which = "the new machine was faster" if speed["ratio"] > 1 else "the new machine was slower" if speed["ratio"] < 1 else "alike"
    share = speed["cpu_share"]
    return (f"machine speed ({SPEED_UNIT}): base {speed['base']:.1f}, new {speed['new']:.1f}; share of the job's runnable time on a CPU: "
            f"base {share['base']:.2f}, new {share['new']:.2f} (new/base, the lower of the two: {speed['ratio']:.2f}: {which}); "
            f"time noise widened by {speed['noise_widened_by']}")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"


def _breach_line(row: Mapping[str, Any]) -> str:
    return (f"{row['metric']} {row['stat']} regressed: {row['base']:.3f} -> {row['new']:.3f} {row['unit']} "
            f"({row['change']:+.3f} {row['unit']}, {_pct(row['change_pct'])}); limit {row['limit']}, noise ±{row['noise'] or 0:.3f} {row['unit']}")


# -- rendering -----------------------------------------------------------------------------------

HEADER = ["metric", "stat", "base", "new", "change", "change %", "noise ±", "limit", "status"]


def _cells(row: Mapping[str, Any]) -> list[str]:
    noise_text = "-" if row["noise"] is None else f"{row['noise']:.3f}"
    return [f"{row['metric']} ({row['unit']})", row["stat"], f"{row['base']:.3f}", f"{row['new']:.3f}", f"{row['change']:+.3f}",
            _pct(row["change_pct"]), noise_text, row["limit"] or "-", row["status"]]


def _op_cells(op: Mapping[str, Any]) -> list[str]:
    return [op["op_type"], f"{op['base_ms_per_step']:.3f}", f"{op['new_ms_per_step']:.3f}", f"{op['change']:+.3f}", _pct(op["change_pct"])]


def _verdict(result: Mapping[str, Any]) -> str:
    if not result["limits"]:
        return "no limits given"
    if not result["comparable"]:
        return "FAIL (the runs are of different jobs; --allow-different compares them anyway)"
    return "PASS" if result["passed"] else f"FAIL ({len(result['breaches'])} limit{'s' if len(result['breaches']) > 1 else ''} breached)"


def _run_line(run: Mapping[str, Any]) -> str:
    return f"{run['path']} ({run['steps']} steps, rank{'s' if len(run['ranks']) > 1 else ''} {', '.join(map(str, run['ranks']))})"


def _finding_lines(result: Mapping[str, Any]) -> list[str]:
    """The advisor's findings that appeared in NEW or vanished from it (by finding id)."""
    return [f"finding {change}: {f['text']}" for change in ("appeared", "vanished") for f in result["findings"][change]]


def to_text(result: Mapping[str, Any]) -> str:
    def table(header: list[str], body: list[list[str]]) -> list[str]:
        widths = [max(len(str(c)) for c in column) for column in zip(header, *body)]
        return ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in [header] + body]

    lines = [f"msprof-agent compare: {_verdict(result)}", f"base: {_run_line(result['base'])}", f"new:  {_run_line(result['new'])}",
             _speed_line(result)] + [f"warning: {d}" for d in result["differences"]] + [""]
    lines += table(HEADER, [_cells(r) for r in result["rows"]])
    if result["top_op_types"]:
        lines += ["", "top op types, ms per step:"] + table(["op type", "base", "new", "change", "change %"], [_op_cells(o) for o in result["top_op_types"]])
    lines += [""] + _finding_lines(result) + [f"note: {n}" for n in result["notes"]] + [f"rule: {result['rule']}"]
    return "\n".join(lines) + "\n"


def to_markdown(result: Mapping[str, Any]) -> str:
    def table(header: list[str], body: list[list[str]]) -> list[str]:
        escape = lambda cell: str(cell).replace("|", "\\|")
        return ["| " + " | ".join(map(escape, header)) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(map(escape, r)) + " |" for r in body]

    lines = [f"### msprof-agent compare: {_verdict(result)}", "", f"- base: `{_run_line(result['base'])}`", f"- new: `{_run_line(result['new'])}`",
             f"- {_speed_line(result)}"] + [f"- **warning**: {d}" for d in result["differences"]] + [""]
    lines += table(HEADER, [_cells(r) for r in result["rows"]])
    if result["breaches"]:
        lines += ["", "**Breached limits**", ""] + [f"- {b}" for b in result["breaches"]]
    if result["top_op_types"]:
        lines += ["", "#### Top op types (ms per step)", ""] + table(["op type", "base", "new", "change", "change %"],
                                                                      [_op_cells(o) for o in result["top_op_types"]])
    if result["new"]["reports"]:
        lines += ["", "Reports (keep as artifacts): " + ", ".join(f"`{r}`" for r in result["new"]["reports"])]
    lines += [""] + [f"- {line}" for line in _finding_lines(result)] + [f"> note: {n}" for n in result["notes"]] + [f"<sub>Rule: {result['rule']}.</sub>", ""]
    return "\n".join(lines)


def main(args: argparse.Namespace | SimpleNamespace) -> int:
    """``msprof-agent compare``: 0 when the gate passes, 1 when a limit is breached, 2 when the input is unusable
    (also runs of different jobs under a gate, unless ``--allow-different``)."""
    try:
        limits = parse_limits(args.fail_on)
        result = compare(args.base, args.new, limits, allow_different=getattr(args, "allow_different", False))
    except (CompareError, OSError, ValueError, KeyError, IndexError) as exc:
        log.say(f"compare: {exc}" if isinstance(exc, CompareError) else f"compare: cannot read the profiles: {type(exc).__name__}: {exc}")
        return EXIT_ERROR
    markdown = to_markdown(result)
    sys.stdout.write(markdown if getattr(args, "markdown", False) else to_text(result))
    sys.stdout.flush()
    if getattr(args, "json_out", None):
        with open(args.json_out, "w") as handle:
            json.dump(result, handle, indent=1)
    summary_file = os.environ.get(environment.GITHUB_STEP_SUMMARY)
    if summary_file:
        with open(summary_file, "a") as handle:
            handle.write(markdown + "\n")
    for line in result["differences"]:
        log.say(f"compare: warning: {line}" + ("" if result["comparable"] or not limits else "; the gate fails (--allow-different compares them anyway)"))
    for line in result["breaches"]:
        log.say(f"FAIL {line}")
    if limits and not result["comparable"]:
        return EXIT_ERROR
    return EXIT_BREACH if result["breaches"] else 0


# -- run --baseline ------------------------------------------------------------------------------

def _output_path(env: Mapping[str, str]) -> str:
    try:
        path = json.loads(env.get(environment.OPTIONS) or "{}").get("output_path")
    except (ValueError, AttributeError):
        path = None
    return os.path.abspath(path or "./data")


def run_with_baseline(executable: str, command: Sequence[str], env: Mapping[str, str], args: argparse.Namespace) -> int:
    """Run the job as a child, then compare its profile with ``args.baseline``.

    Exit status: the job's when it failed, else the gate's (0 pass, 1 breached, 2 no usable profile).
    A job killed by a signal: after the comparison we die of the same signal (``supervise.end_like``).
    """
    status = supervise.run_job(executable, command, env)
    base, new = args.baseline, _output_path(env)
    if os.path.realpath(base) == os.path.realpath(new) and earlier_runs(new):  # the job's start kept the baseline aside
        base = earlier_runs(new)[-1]
    log.say(f"job exited with status {status}; comparing with the baseline {base}")
    gate = main(SimpleNamespace(base=base, new=new, fail_on=args.fail_on,
                                markdown=getattr(args, "markdown", False), json_out=getattr(args, "json_out", None),
                                allow_different=getattr(args, "allow_different", False)))
    return gate if status == 0 else supervise.end_like(status)
