"""Analysis: one rank's raw event store -> its pages (the MindInsight contract's files) and its summary.

``analyse_pages`` reads the store and writes every page into a ``Run`` (the timeline file on a thread of
its own, beside the other pages and the exports); ``summarise`` waits for it and writes the summary;
``cluster`` rolls the summaries of a job's ranks up. ``msprof_agent.pipeline`` runs them, with the exports
and the report, at exit or later (``msprof-agent analyse``); the raw store is never modified, so analysing
twice gives the same files.

The names imported here are the analysis's public API: the exports read only these.
"""
import functools
import os
from collections.abc import Callable
from typing import Any

from .. import log
from ..contract import names
from ..contract.summary import Summary, WarmupStep
from ..store import raw_ranks
from . import (
    cluster,
    communication,
    cpu_util,
    data_prep,
    device,
    dynamic_shape,
    flops,
    host_io,
    info,
    memory,
    mstx,
    operators,
    step_trace,
    summary,
    timeline,
    warmup,
)
from .communication import collectives as communication_groups
from .device import DeviceActivity
from .operators import counted_op_mask, device_tables
from .opevents import OpEvents
from .overlap import GROUP, Overlap, collectives
from .rundata import RunData, load_rank, parents, started_ns
from .summary import print_table
from .timeline import DEVICE_PID, OPS_PID, fixed_events, step_events, time_base, write_trace
from .workers import Job

__all__ = ["DEVICE_PID", "GROUP", "OPS_PID", "Context", "DeviceActivity", "OpEvents", "Overlap", "Run", "analyse_pages", "cluster", "collectives",
           "communication_groups", "counted_op_mask", "device_tables", "fixed_events", "parents", "print_table", "profiler_dirs", "started_ns",
           "step_events", "summarise", "time_base", "write_trace"]


class Context:
    """Where and how one rank's files are written, and the notes the analyses leave for the summary."""

    def __init__(self, profiler_dir: str, rank: int, pretty: bool, sampling_interval_ms: float) -> None:
        self.profiler_dir, self.rank, self.pretty = profiler_dir, rank, pretty
        self.sampling_interval_ms = sampling_interval_ms
        self.notes: list[str] = []
        self.warmup: list[WarmupStep] = []  # the window's warm-up steps (``warmup.detect``), left out of the steady figures
        self.step_level_timeline: bytes | None = None  # the timeline file without its ops, for the report drawn right after (``timeline.write``)

    def path(self, template: str, **fields: Any) -> str:
        """Where this rank's file of a ``contract`` name template goes."""
        return os.path.join(self.profiler_dir, names.rank_file(template, self.rank, **fields))


class Run:
    """One rank being analysed: its raw data, where and how its files go (``ctx``), and what each page found."""

    def __init__(self, data: RunData, ctx: Context) -> None:
        self.data, self.ctx = data, ctx
        self.results: dict[str, Any] = {}
        self.timeline_writing: Job[None] | None = None  # the timeline file, written beside the other pages (``timeline.write``)

    def timeline_written(self) -> None:
        """Wait for the timeline file: a failure to write it, and the timeline's note, join the pages' notes here,
        after theirs, as when it was written in turn."""
        job, self.timeline_writing = self.timeline_writing, None
        if job is not None and not self.guarded("timeline", False, _waited, job):
            self.results["timeline"] = None
        written = self.results.get("timeline")
        if written and written["dropped"]:
            self.ctx.notes.append(written["dropped"])

    def guarded(self, name: str, fallback: Any, write: Callable[..., Any], *args: Any) -> Any:
        """``write(*args)``, a page or an export: one failing (odd data from a framework) costs that one, not the whole analysis."""
        try:
            return write(*args)
        except Exception as exc:
            log.report_error(f"the {name} analysis", exc)
            self.ctx.notes.append(f"{name} analysis failed: {type(exc).__name__}: {exc}")
            return fallback

    @functools.cached_property
    def overlap(self) -> Overlap:
        """Computing / communication / free per profiled step, which several exports read."""
        return Overlap(self.data, self.results["step_trace"]["rows"])


def _waited(job: Job[None]) -> bool:
    job.result()  # re-raises the job's error
    return True


def analyse_pages(profiler_dir: str, rank: int, step_list: list[int] | None = None, pretty: bool = False, output_dir: str | None = None,
                  job_started_ns: int | None = None) -> Run:
    """Read one rank's raw data in ``profiler_dir`` and write its pages into ``output_dir`` (default: beside the
    raw data); ``job_started_ns``: the earliest start of the job's ranks, which every rank's traces then
    count from (``timeline.time_base``)."""
    data = load_rank(profiler_dir, rank)
    if job_started_ns:
        data.meta["job_started_ns"] = job_started_ns
    data.cpu = cpu_util.measured(data.cpu)  # every page (CPU file, timeline counters, memory) reads only samples that cover time
    if step_list:
        data.restrict_to_steps(step_list)
    profiler_dir = output_dir or profiler_dir
    os.makedirs(profiler_dir, exist_ok=True)
    run = Run(data, Context(profiler_dir, rank, pretty, data.options.cpu_sampling_interval))
    ctx, results = run.ctx, run.results
    results.update(info=info.write(data, ctx), step_trace=step_trace.write(data, ctx))
    ctx.warmup = warmup.of_window(data)
    results["timeline"], run.timeline_writing = run.guarded("timeline", (None, None), timeline.write, data, ctx, results["step_trace"]["rows"])
    pages: tuple[tuple[str, Callable[[RunData, Context], Any], Any], ...] = (
        ("operators", operators.write, {"types": [], "total_ms": 0.0}), ("flops", flops.write, None),
        ("data_prep", data_prep.write, {}), ("memory", memory.write, None),
        ("dynamic_shape", dynamic_shape.write, None), ("communication", communication.write_rank, None),
        ("host_io", host_io.write, {}), ("mstx", mstx.write, None), ("device", device.write, None))
    for name, write, fallback in pages:
        results[name] = run.guarded(name, fallback, write, data, ctx)
    results["cpu"] = run.guarded("cpu_util", None, cpu_util.write, data, ctx, results["data_prep"].get("pipeline"))
    return run


def summarise(run: Run) -> Summary:
    """The rank's ``summary_{r}.json`` (figures, findings, verdict) from its pages, the timeline's written; returns the summary."""
    run.timeline_written()
    written: Summary = summary.build(run.data, run.ctx, run.results)
    return written


def profiler_dirs(path: str) -> list[str]:
    """The profiler directories under PATH holding raw data (``names.profiler_dirs``)."""
    return names.profiler_dirs(path, raw_ranks)
