"""One rank's analysis, raw store to report: pages -> exports -> summary -> report, then the job's cluster step.

It sits above ``analysis`` (the pages, the summary, the roll-up), ``export`` (what ``export_type`` asks
for) and ``viewer`` (report.html, cluster_report.html): the one place that runs them in order. ``analyse_rank`` runs at exit
(or on SIGTERM) inside the profiled process, and for a window in a background process;
``offline_analyse`` runs the same steps later on whatever raw data a job left, killed jobs included, one
task per rank (``fanout``: a process pool, or Dask). The exports come before the summary, which carries
their failure notes. The cluster step (``cluster_roll_up``) reads the ranks' summaries alone.
"""
from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from . import analysis, export, log
from .contract import names
from .contract.summary import Summary
from .store import raw_ranks

if TYPE_CHECKING:
    from . import fanout


def analyse_rank(profiler_dir: str, rank: int, announce: bool = False, step_list: list[int] | None = None, pretty: bool = False,
                 export_type: str | Iterable[object] | None = None, output: names.RunFolders | None = None, job_started_ns: int | None = None,
                 roll_up: bool = True) -> Summary:
    """Analyse one rank's raw data in ``profiler_dir`` into ``output`` (default: the raw data's own folders) and write
    its report; returns the summary dict. ``export_type`` (default: the run's option) names the exports written
    beside it; ``job_started_ns``: the earliest start of the job's ranks, which every rank's traces then count
    from. ``roll_up`` (at exit): the job's cluster step, once every one of its ranks has a summary."""
    with _collector_paused():
        run, summary = _analysed(profiler_dir, rank, announce, step_list, pretty, export_type, output, job_started_ns)
        out = run.ctx.profiler_dir
        write_report(out, rank, run.ctx.step_level_timeline)
    if roll_up:
        try:
            rolled = analysis.cluster.write_when_complete(out, int(summary.get("rank_size") or 1), pretty)
        except Exception as exc:
            log.report_error("the cluster summary", exc)
        else:
            if rolled is not None:
                write_cluster_report(names.cluster_dir(out))
    return summary


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a rank is analysed: the pages and the report make hundreds of
    thousands of short-lived dicts and lists, and each full collection they set off walks every object the process
    holds (at exit, all of the training job's). What the analysis makes is freed by reference counting."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def analyse_task(task: fanout.Task) -> Summary:
    """One rank of ``offline_analyse`` in a worker (``fanout``): its files on the shared file system, its summary sent back."""
    directory, rank, kwargs = task
    return analyse_rank(directory, rank, roll_up=False, **kwargs)


def _analysed(profiler_dir: str, rank: int, announce: bool, step_list: list[int] | None, pretty: bool, export_type: str | Iterable[object] | None,
              output: names.RunFolders | None, job_started_ns: int | None) -> tuple[analysis.Run, Summary]:
    """The rank's own files: its pages, its exports and its summary; returns the analysed run and the summary."""
    run = analysis.analyse_pages(profiler_dir, rank, step_list, pretty, output, job_started_ns)
    run.results["export"] = run.guarded("export", None, export.write, run, export_type)
    summary = analysis.summarise(run)
    if announce:
        analysis.print_table(summary)
    return run, summary


def cluster_roll_up(cluster_dir: str, entries: list[dict[str, Any]], pretty: bool = False) -> dict[str, Any] | None:
    """The cluster step: the job's ``cluster_summary.json`` from its ranks' entries (``analysis.cluster.entry`` of
    each summary), the same in any order, and its Cluster page beside it; None for fewer than two ranks."""
    rolled = analysis.cluster.write(cluster_dir, entries, pretty)
    if rolled is not None:
        write_cluster_report(cluster_dir)
    return rolled


def write_report(profiler_dir: str, rank: int, step_level_timeline: bytes | None = None) -> None:
    """report.html needs the viewer extra (jinja2, plotly); without it the analysis says so once and goes on.
    ``step_level_timeline``: the rank's timeline file without its ops, as the analysis just wrote it."""
    from .viewer.report import write_report as write_html

    _viewer_file("writing report.html", write_html, profiler_dir, rank, step_level_timeline)


def write_cluster_report(cluster_dir: str) -> None:
    """The job's cluster_report.html, written with its cluster summary; like report.html it needs the viewer extra."""
    from .viewer.report import write_cluster_report as write_html

    _viewer_file("writing the cluster page", write_html, cluster_dir)


def _viewer_file(what: str, write: Callable[..., str], *args: Any) -> None:
    """One of the viewer's offline files: without the viewer extra the analysis says so once, on any error it says
    so, and goes on either way."""
    from .viewer.report import ViewerExtraMissing

    try:
        write(*args)
    except ViewerExtraMissing as exc:
        log.warn_once(str(exc))
    except Exception as exc:
        log.report_error(what, exc)


def offline_analyse(path: str, pretty: bool = False, step_list: list[int] | None = None, data_simplification: bool = True, announce: bool = False,
                    export_type: str | Iterable[object] | None = None, output: str | None = None, scheduler: str | None = None,
                    scheduler_file: str | None = None, keep_summaries: bool = True) -> list[Summary]:
    """The MindSpore Profiler guide's ``Profiler.offline_analyse``: analyse every rank found under PATH; returns
    the summaries (none with ``keep_summaries`` false: a thousand ranks' summaries need not stay in memory).

    The whole run is analysed in place (the files the job wrote at exit, again). A ``step_list``
    analysis is a different one: it goes to ``output`` (default ``PATH/steps_{first}-{last}``),
    laid out as PATH is (``profiler/`` or ``rank_*/profiler/``), and never over the run's files.
    ``data_simplification`` is accepted for compatibility: the raw store is what a second analysis
    needs, so it is always kept; nothing else is left to simplify. The ranks are analysed in parallel
    (``fanout``: a process pool, or Dask with ``scheduler`` / ``scheduler_file``), then each job's cluster
    step runs on their summaries.
    """
    from . import fanout  # here, not at the top: the exit of every profiled job imports this module, and only this needs a pool

    if step_list is not None:
        ordered = sorted(step_list)
        if ordered != list(range(ordered[0], ordered[-1] + 1)):
            raise ValueError(f"step_list must be consecutive steps, got {step_list}")
        output = output or os.path.join(os.path.abspath(path), names.STEP_LIST_FOLDER.format(first=ordered[0], last=ordered[-1]))
    runs = {folders.profiler: folders for folders in analysis.raw_runs(path)}
    directories = list(runs)
    if not directories:
        raise FileNotFoundError(f"no msprof-agent raw data under {path} (looked for profiler/raw/rank_*/ and rank_*/profiler/)")
    targets = {d: _mirrored(path, runs[d], output) for d in directories}
    overwritten = [d for d in directories if step_list is not None and os.path.realpath(targets[d].profiler) == os.path.realpath(d)]
    if overwritten:
        raise ValueError(f"output {output} would overwrite the run's analysis in {overwritten[0]}; choose another directory")
    jobs = [(d, r) for d in directories for r in raw_ranks(d)]
    starts = [s for s in (analysis.started_ns(d, r) for d, r in jobs) if s] if len(jobs) > 1 else []
    common = {"announce": announce and len(jobs) == 1, "step_list": step_list, "pretty": pretty, "export_type": export_type,
              "job_started_ns": min(starts, default=None)}
    tasks = [(d, r, dict(common, output=targets[d])) for d, r in jobs]
    progress = fanout.Progress(len(tasks), fanout.engine(tasks, scheduler, scheduler_file))
    entries: dict[str, list[dict[str, Any]]] = {}
    results: list[Summary] = []
    failed: list[int] = []
    exported: dict[str, None] = {}  # the export folders written, in the order they came
    for (directory, rank, _), outcome in fanout.run(analyse_task, tasks, scheduler, scheduler_file):
        if isinstance(outcome, BaseException):
            failed.append(rank)
            log.say(f"analyse: rank {rank} in {directory} failed: {type(outcome).__name__}: {outcome}")
        else:
            entries.setdefault(names.cluster_dir(targets[directory].profiler), []).append(analysis.cluster.entry(outcome))
            exported.update(dict.fromkeys(outcome.get("exports") or ()))
            if keep_summaries:
                results.append(outcome)
        progress.step(rank, failed=isinstance(outcome, BaseException))
    for where, ranks in sorted(entries.items()):
        rolled = cluster_roll_up(where, ranks, pretty)
        if rolled and len(jobs) > 1:
            log.say(f"cluster: {rolled['ranks_analysed']} of {rolled['rank_size']} ranks -> {os.path.join(where, names.CLUSTER_SUMMARY)}; "
                    f"slow ranks {rolled['slow_ranks'] or 'none'}, slow nodes {rolled['slow_nodes'] or 'none'}")
    if announce:
        for written in exported:
            log.say(f"export written: {written}")
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(tasks)} ranks could not be analysed: {sorted(failed)}")
    results.sort(key=lambda s: s.get("rank_id", 0))
    return results


def _mirrored(path: str, run: names.RunFolders, output: str | None) -> names.RunFolders:
    """Where the run ``run`` (found under PATH) is analysed to: the same place under ``output``, else itself."""
    if output is None:
        return run

    def under_output(directory: str) -> str:
        return os.path.normpath(os.path.join(os.path.abspath(output), os.path.relpath(directory, os.path.abspath(path))))

    return names.RunFolders(under_output(run.folder), under_output(run.profiler))
