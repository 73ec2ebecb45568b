"""One rank's analysis: its raw store -> its pages (``analyse_pages``, the registered pages in turn: ``pages``), then
its summary (``summarise``)."""
import os

from ..contract import names
from ..contract.summary import Summary
from ..store import raw_ranks
from . import cpu_util, info, pages, step_trace, summary, timeline, warmup
from .run import Context, Run
from .rundata import load_rank


def analyse_pages(profiler_dir: str, rank: int, step_list: list[int] | None = None, pretty: bool = False,
                  output: names.RunFolders | None = None, job_started_ns: int | None = None) -> Run:
    """Read one rank's raw data in ``profiler_dir`` and write its pages into ``output``'s profiler directory, its
    exports beside it (default: the raw data's own, ``names.named_profiler_dir``); ``job_started_ns``: the earliest
    start of the job's ranks, which every rank's traces then count from (``timeline.time_base``)."""
    data = load_rank(profiler_dir, rank)
    if job_started_ns:
        data.meta["job_started_ns"] = job_started_ns
    data.cpu = cpu_util.measured(data.cpu)  # every page (CPU file, timeline counters, memory) reads only samples that cover time
    if step_list:
        data.restrict_to_steps(step_list)
    output = output or names.named_profiler_dir(profiler_dir)
    os.makedirs(output.profiler, exist_ok=True)
    run = Run(data, Context(output, rank, pretty, data.options.cpu_sampling_interval))
    ctx, results = run.ctx, run.results
    results.update(info=info.write(data, ctx), step_trace=step_trace.write(data, ctx))
    ctx.warmup = warmup.of_window(data)
    results["timeline"], run.timeline_writing = run.guarded("timeline", (None, None), timeline.write, data, ctx, results["step_trace"]["rows"])
    for page in pages.registered():
        if page.write is not None:
            results[page.name] = run.guarded(page.noted_as, page.fallback, page.write, data, ctx, *(results[name] for name in page.reads))
    return run


def summarise(run: Run) -> Summary:
    """The rank's ``summary_{r}.json`` (figures, findings, verdict) from its pages, the timeline's written; returns the summary."""
    run.timeline_written()
    written: Summary = summary.build(run.data, run.ctx, run.results)
    return written


def raw_runs(path: str) -> list[names.RunFolders]:
    """The runs under PATH holding raw data (``names.runs_under``)."""
    return names.runs_under(path, raw_ranks)
