"""One rank's analysis, raw store to report: pages -> exports -> summary -> cluster roll-up -> report.

It sits above ``analysis`` (the pages, the summary, the roll-up), ``export`` (what ``export_type`` asks
for) and ``viewer`` (report.html): the one place that runs them in order. ``analyse_rank`` runs at exit
(or on SIGTERM) inside the profiled process, and for a window in a background process;
``offline_analyse`` runs the same steps later on whatever raw data a job left, killed jobs included.
The exports come before the summary, which carries their failure notes.
"""
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from . import analysis, export, log
from .contract import names
from .contract.summary import Summary
from .store import raw_ranks


def analyse_rank(profiler_dir: str, rank: int, announce: bool = False, step_list: list[int] | None = None, pretty: bool = False,
                 export_type: str | Iterable[object] | None = None, output_dir: str | None = None, job_started_ns: int | None = None) -> Summary:
    """Analyse one rank's raw data in ``profiler_dir`` into ``output_dir`` (default: beside the raw data), roll up
    the directory's ranks and write the rank's report; returns the summary dict. ``export_type`` (default: the
    run's option) names the exports written beside it; ``job_started_ns``: the earliest start of the job's
    ranks, which every rank's traces then count from."""
    summary = _analysed(profiler_dir, rank, announce, step_list, pretty, export_type, output_dir, job_started_ns)
    out = output_dir or profiler_dir
    cluster_roll_up(out, [summary], pretty)
    write_report(out, rank)
    return summary


def _analysed(profiler_dir: str, rank: int, announce: bool, step_list: list[int] | None, pretty: bool, export_type: str | Iterable[object] | None,
              output_dir: str | None, job_started_ns: int | None) -> Summary:
    """The rank's own files: its pages, its exports and its summary."""
    run = analysis.analyse_pages(profiler_dir, rank, step_list, pretty, output_dir, job_started_ns)
    run.results["export"] = run.guarded("export", None, export.write, run, export_type)
    summary = analysis.summarise(run)
    if announce:
        analysis.print_table(summary)
    return summary


def cluster_roll_up(profiler_dir: str, summaries: list[Summary], pretty: bool = False) -> Any:
    """Every rank's summary in ``profiler_dir`` side by side (``cluster_*``), once two or more ranks are there."""
    return analysis.write_cluster(profiler_dir, summaries, pretty)


def write_report(profiler_dir: str, rank: int) -> None:
    """report.html needs the viewer extra (jinja2, plotly); without it the analysis says so once and goes on."""
    from .viewer.report import ViewerExtraMissing
    from .viewer.report import write_report as write_html

    try:
        write_html(profiler_dir, rank)
    except ViewerExtraMissing as exc:
        log.warn_once(str(exc))
    except Exception as exc:
        log.report_error("writing report.html", exc)


def offline_analyse(path: str, pretty: bool = False, step_list: list[int] | None = None, data_simplification: bool = True, announce: bool = False,
                    export_type: str | Iterable[object] | None = None, output: str | None = None) -> list[Summary]:
    """The MindSpore Profiler guide's ``Profiler.offline_analyse``: analyse every rank found under PATH; returns the summaries.

    The whole run is analysed in place (the files the job wrote at exit, again). A ``step_list``
    analysis is a different one: it goes to ``output`` (default ``PATH/steps_{first}-{last}``),
    laid out as PATH is (``profiler/`` or ``rank_*/profiler/``), and never over the run's files.
    ``data_simplification`` is accepted for compatibility: the raw store is what a second analysis
    needs, so it is always kept; nothing else is left to simplify. Every rank is analysed before any
    directory is rolled up and any report written, so each report has its directory's cluster page.
    """
    if step_list is not None:
        ordered = sorted(step_list)
        if ordered != list(range(ordered[0], ordered[-1] + 1)):
            raise ValueError(f"step_list must be consecutive steps, got {step_list}")
        output = output or os.path.join(os.path.abspath(path), names.STEP_LIST_FOLDER.format(first=ordered[0], last=ordered[-1]))
    directories = analysis.profiler_dirs(path)
    if not directories:
        raise FileNotFoundError(f"no msprof-agent raw data under {path} (looked for profiler/raw/rank_*/ and rank_*/profiler/)")
    targets = {d: _mirrored(path, d, output) for d in directories}
    overwritten = [d for d in directories if step_list is not None and os.path.realpath(targets[d]) == os.path.realpath(d)]
    if overwritten:
        raise ValueError(f"output {output} would overwrite the run's analysis in {overwritten[0]}; choose another directory")
    jobs = [(d, r) for d in directories for r in raw_ranks(d)]
    starts = [s for s in (analysis.started_ns(d, r) for d, r in jobs) if s] if len(jobs) > 1 else []
    summaries: list[Summary] = []
    for number, (directory, rank) in enumerate(jobs, 1):
        began = time.perf_counter()
        summaries.append(_analysed(directory, rank, announce, step_list, pretty, export_type, targets[directory], min(starts, default=None)))
        sys.stderr.write(f"\rmsprof-agent: analysed {number}/{len(jobs)} (rank {rank}, {time.perf_counter() - began:.2f} s) -> {targets[directory]}\n")
    for target in dict.fromkeys(targets.values()):
        cluster_roll_up(target, [s for (d, _), s in zip(jobs, summaries) if targets[d] == target], pretty)
    for directory, rank in jobs:
        write_report(targets[directory], rank)
    if announce:
        for written in dict.fromkeys(d for summary in summaries for d in summary["exports"]):
            log.say(f"export written: {written}")
    return summaries


def _mirrored(path: str, profiler_dir: str, output: str | None) -> str:
    """Where ``profiler_dir`` (found under PATH) is analysed to: the same place under ``output``, else itself."""
    if output is None:
        return profiler_dir
    return os.path.normpath(os.path.join(os.path.abspath(output), os.path.relpath(profiler_dir, os.path.abspath(path))))
