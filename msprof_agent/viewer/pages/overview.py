"""The Overview page: the findings first, step time, stage split, top op types, the run and its timeline."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ...contract import names
from ...contract.columns import IDLE_WORDS
from ..render import fmt, info_rows, ok, op_type_charts, pct, profile_of_run, run_url, short, stage_bar, step_numbers
from ..views import View
from .steps import HOT_SPOTS_ANCHOR, mean_step

if TYPE_CHECKING:
    from ..render import Page
    from ..sections import Loaded, Run


def _evidence_text(value: object) -> object:
    """An evidence value as the findings card prints it: floats formatted, dicts and lists as JSON."""
    if isinstance(value, float):
        return fmt(value)
    return json.dumps(value) if isinstance(value, (dict, list)) else value



def steps_text(numbers: Iterable[int]) -> str:
    """Step numbers as "3-5,9": the fragment ``#steps=...`` viewer.js reads to highlight them on the Step trace page."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive numbers
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def page_href(page_name: str, run: Run, rank: int | None, report: bool, fragment: str = "") -> str:
    """A link to another page of this rank: in the report an anchor in the same file, in the viewer the page's URL.
    In the report the page's own anchor is the fragment when one is given (viewer.js scrolls to its page)."""
    if report:
        return "#" + (fragment or page_name)
    if rank is None:
        raise ValueError(f"a link to the viewer's {page_name} page needs its rank")
    return run_url(page_name, run.id, rank) + (f"#{fragment}" if fragment else "")


def findings_view(findings: object, run: Run, rank: int | None, report: bool = False,
                  rank_link: Callable[[int], str | None] | None = None) -> list[dict[str, Any]]:
    """The advisor's findings as the findings card shows them: evidence as text rows, and links (label, href, kind)
    to the steps they rest on, to the Python hot spots (host work) and to a straggler's own step trace
    (``rank_link(rank)`` where given: the job's cluster_report.html links to the rank's report)."""
    out = []
    for f in findings if isinstance(findings, list) else []:
        if not isinstance(f, dict):
            continue
        given = f.get("evidence")
        evidence = given if isinstance(given, dict) else {}
        links: list[tuple[str, str, str]] = []  # (label, href, kind)
        numbers = step_numbers(evidence.get("steps"))
        if numbers:
            text = steps_text(numbers)
            label = f"step{'s' * (len(numbers) > 1)} {text.replace(',', ', ')} on the Step trace"
            links.append((label, page_href("steps", run, rank, report, f"steps={text}"), "steps"))
        if f.get("id") == "host_work":
            links.append(("Python hot spots", page_href("steps", run, rank, report, HOT_SPOTS_ANCHOR), "hot-spots"))
        slow = evidence.get("rank")
        if f.get("id") == "straggler" and isinstance(slow, int) and slow in run.ranks and (rank_link or not (report and slow != rank)):
            href = rank_link(slow) if rank_link else page_href("steps", run, slow, report)
            if href:
                links.append((f"rank {slow}'s Step trace", href, "rank"))
        out.append(dict(f, evidence=[(k, _evidence_text(v)) for k, v in evidence.items()], links=links))
    return out


def data_stats(sections: Loaded) -> dict[str, Any]:
    """What the data preparation card shows: the summary's wait per step and the queue file's statistics."""
    summary = sections.get("summary")
    return {"queue": sections["queue"], "wait": (summary["data"].get("data_wait_ms") or {}) if ok(summary) else None}


def gpu_view(summary: dict[str, Any]) -> dict[str, Any] | None:
    """What the GPU card shows, from the summary's ``device`` (analysis/device.py): the device's busy share and idle time
    by cause, its step on its own clock, MFU, the allocator's peaks and NVML's samples, and the top kernels."""
    device = summary.get("device")
    if not isinstance(device, dict) or not device:
        return None
    rows: list[tuple[str, Any]] = []
    if "busy_share" in device:
        rows.append(("device busy, profiled steps", f"{pct(device['busy_share'])} ({fmt(device['busy_ms'])} of {fmt(device['step_ms'])} ms)"))
    if "busy_share_unprofiled" in device:
        rows.append(("device busy, steps without the profiler", f"{pct(device['busy_share_unprofiled'])} (of a {fmt(device['unprofiled_step_ms'])} ms "
                                                                 f"step, {device['unprofiled_steps']} steps)"))
    timed = device.get("device_step_ms")
    if isinstance(timed, dict):
        rows.append(("step on the device (CUDA events) mean / p50 / p90 / max", " / ".join(fmt(timed.get(k)) for k in ("mean", "p50", "p90", "max"))))
    mfu = (summary.get("flops") or {}).get("mfu") or {}
    if mfu:
        outside = mfu.get("unprofiled") or {}
        without = f"; {pct(outside.get('ratio'))} without the profiler" if outside else ""
        rows.append(("MFU", f"{pct(mfu.get('ratio'))}{without} ({mfu.get('peak_source')})"))
    memory = device.get("memory") or {}
    if memory.get("peak_allocated_mb") is not None:
        peaks = " / ".join(fmt(memory.get(k), 0) for k in ("peak_allocated_mb", "peak_reserved_mb", "total_mb"))
        rows.append(("memory peak allocated / reserved / total (MiB)", peaks))
    nvml = device.get("nvml") or {}
    if nvml:
        rows.append(("NVML utilisation / power / SM clock (means)", f"{fmt(nvml.get('util_mean'), 1)} % / {fmt(nvml.get('power_w_mean'), 1)} W / "
                                                                   f"{fmt(nvml.get('sm_mhz_mean'), 0)} MHz"))
    idle = [(IDLE_WORDS.get(cause, cause), ms) for cause, ms in (device.get("idle_ms") or {}).items()]
    kernels = [{"kernel": short(k.get("kernel"), 90), "launched_by": k.get("launched_by") or "—", "count": k.get("count"), "total_ms": k.get("total_ms"),
                "share": k.get("share")} for k in (device.get("top_kernels") or [])[:10]]
    return {"rows": rows, "idle": idle, "kernels": kernels}


def overview(page: Page, run: Run, rank: int, sections: Loaded, report: bool = False) -> dict[str, Any]:
    summary = sections.get("summary")
    context: dict[str, Any] = {"sections": sections, "report": report, "summary": summary, "data_prep": data_stats(sections), "findings": [], "gpu": None,
               "info_rows": info_rows(sections.get("info"), profile_of_run(sections))}
    if ok(summary):
        context["suggestions"] = [{"id": sug.get("id"), "text": sug.get("text"),
                                   "evidence": [(k, _evidence_text(v)) for k, v in (sug.get("evidence") or {}).items()]}
                                  for sug in (summary["data"].get("suggestions") or []) if isinstance(sug, dict)]
        context["findings"] = findings_view(summary["data"].get("findings"), run, rank, report)
        context["gpu"] = gpu_view(summary["data"])
    st = sections["step_trace"]
    if ok(st):
        context["average"], title = mean_step(sections)
        context["step_chart"] = stage_bar(page, "ov-step", context["average"], title)
    if ok(sections["op_types"]):
        context["op_charts"] = op_type_charts(page, "ov-op", sections["op_types"]["data"])
    timeline_rows: list[tuple[str, Any]] = []
    if ok(summary) and isinstance(summary["data"].get("timeline"), dict):
        tl = summary["data"]["timeline"]
        timeline_rows += [("events", tl.get("events")), ("truncated", tl.get("truncated"))]
        if tl.get("dropped"):
            timeline_rows.append(("dropped", tl.get("dropped")))
    ts = sections["timeline"]
    if ok(ts) and isinstance(ts["data"], dict):
        timeline_rows += [(k, v) for k, v in ts["data"].items() if not isinstance(v, (dict, list))]
    context["timeline_rows"] = timeline_rows
    return context


def _timeline_file(run: Run, rank: int, loaded: Loaded) -> None:
    """The rank's timeline file, which the page offers to download."""
    loaded["timeline_file"] = names.timeline_file(run.ranks[rank], rank)


VIEW = View("overview", "Overview", ("info", "summary", "step_trace", "op_types", "queue", "timeline"), overview,
            hints={"timeline": "Set op_time: true (the default) to write the timeline."},
            more=_timeline_file,
            takes_report=True)
