"""Analysis: raw event store -> the analysed files of the MindInsight contract, the summary and report.

``analyse_rank`` runs at exit (or on SIGTERM) inside the profiled process; ``offline_analyse`` runs
the same code later on whatever raw data a job left, killed jobs included, and is re-runnable:
the raw store is never modified, so analysing twice gives the same files.
"""
import os
import sys
import time

from .. import export, log
from ..contract import names
from ..store import raw_ranks
from . import communication, cpu_util, data_prep, dynamic_shape, flops, host_io, info, memory, mstx, operators, step_trace, summary, timeline, warmup
from .rundata import load_rank, started_ns


class Context:
    """Where and how one rank's files are written, and the notes the analyses leave for the summary."""

    def __init__(self, profiler_dir, rank, pretty, sampling_interval_ms):
        self.profiler_dir, self.rank, self.pretty = profiler_dir, rank, pretty
        self.sampling_interval_ms = sampling_interval_ms
        self.notes = []
        self.warmup = []  # the window's warm-up steps (``warmup.detect``), left out of the steady figures

    def path(self, template, **fields):
        """Where this rank's file of a ``contract`` name template goes."""
        return os.path.join(self.profiler_dir, names.rank_file(template, self.rank, **fields))


def analyse_rank(profiler_dir, rank, announce=False, step_list=None, pretty=False, export_type=None, output_dir=None, job_started_ns=None):
    """Analyse one rank's raw data in ``profiler_dir`` into ``output_dir`` (default: beside the raw
    data); returns the summary dict. ``export_type`` (default: the run's option) names the exports
    written beside it (``export``); ``job_started_ns``: the earliest start of the job's ranks, which
    every rank's traces then count from (``timeline.time_base``)."""
    data = load_rank(profiler_dir, rank)
    if job_started_ns:
        data.meta["job_started_ns"] = job_started_ns
    data.cpu = cpu_util.measured(data.cpu)  # every page (CPU file, timeline counters, memory) reads only samples that cover time
    if step_list:
        data.restrict_to_steps(step_list)
    profiler_dir = output_dir or profiler_dir
    os.makedirs(profiler_dir, exist_ok=True)
    ctx = Context(profiler_dir, rank, pretty, data.options.cpu_sampling_interval)
    results = {"info": info.write(data, ctx), "step_trace": step_trace.write(data, ctx)}
    rows = results["step_trace"]["rows"]
    ctx.warmup = warmup.detect([r["n"] for r in rows], [r["total"] / 1e6 for r in rows])
    pages = (("operators", operators.write, {"types": [], "total_ms": 0.0}), ("flops", flops.write, None),
             ("data_prep", data_prep.write, {}), ("memory", memory.write, None),
             ("dynamic_shape", dynamic_shape.write, None), ("communication", communication.write_rank, None),
             ("host_io", host_io.write, {}), ("mstx", mstx.write, None))
    for name, write, fallback in pages:
        results[name] = _page(name, fallback, write, data, ctx)
    results["cpu"] = _page("cpu_util", None, cpu_util.write, data, ctx, results["data_prep"].get("pipeline"))
    results["timeline"] = _page("timeline", None, timeline.write, data, ctx, results["step_trace"]["rows"])
    results["export"] = _page("export", None, export.write, data, ctx, results, export_type)
    headline = summary.build(data, ctx, results)
    communication.write_cluster(profiler_dir, [headline], pretty)
    _write_report(profiler_dir, rank)
    if announce:
        summary.print_table(headline)
    return headline


def _page(name, fallback, write, data, ctx, *extra):
    """One page failing (odd data from a framework) costs that page, not the whole analysis."""
    try:
        return write(data, ctx, *extra)
    except Exception as exc:
        log.report_error(f"the {name} analysis", exc)
        ctx.notes.append(f"{name} analysis failed: {type(exc).__name__}: {exc}")
        return fallback


def _write_report(profiler_dir, rank):
    """report.html needs the viewer extra (jinja2, plotly); without it the analysis says so once and goes on."""
    from ..viewer.report import ViewerExtraMissing, write_report

    try:
        write_report(profiler_dir, rank)
    except ViewerExtraMissing as exc:
        log.warn_once(str(exc))
    except Exception as exc:
        log.report_error("writing report.html", exc)


def profiler_dirs(path):
    """The profiler directories under PATH holding raw data (``names.profiler_dirs``)."""
    return names.profiler_dirs(path, raw_ranks)


def offline_analyse(path, pretty=False, step_list=None, data_simplification=True, announce=False, export_type=None, output=None):
    """The MindSpore Profiler guide's ``Profiler.offline_analyse``: analyse every rank found under PATH; returns the summaries.

    The whole run is analysed in place (the files the job wrote at exit, again). A ``step_list``
    analysis is a different one: it goes to ``output`` (default ``PATH/steps_{first}-{last}``),
    laid out as PATH is (``profiler/`` or ``rank_*/profiler/``), and never over the run's files.
    ``data_simplification`` is accepted for compatibility: the raw store is what a second analysis
    needs, so it is always kept; nothing else is left to simplify.
    """
    if step_list is not None:
        ordered = sorted(step_list)
        if ordered != list(range(ordered[0], ordered[-1] + 1)):
            raise ValueError(f"step_list must be consecutive steps, got {step_list}")
        output = output or os.path.join(os.path.abspath(path), names.STEP_LIST_FOLDER.format(first=ordered[0], last=ordered[-1]))
    directories = profiler_dirs(path)
    if not directories:
        raise FileNotFoundError(f"no msprof-agent raw data under {path} (looked for profiler/raw/rank_*/ and rank_*/profiler/)")
    targets = {d: _mirrored(path, d, output) for d in directories}
    overwritten = [d for d in directories if step_list is not None and os.path.realpath(targets[d]) == os.path.realpath(d)]
    if overwritten:
        raise ValueError(f"output {output} would overwrite the run's analysis in {overwritten[0]}; choose another directory")
    jobs = [(d, r) for d in directories for r in raw_ranks(d)]
    starts = [s for s in (started_ns(d, r) for d, r in jobs) if s] if len(jobs) > 1 else []
    results = []
    for number, (directory, rank) in enumerate(jobs, 1):
        began = time.perf_counter()
        results.append(analyse_rank(directory, rank, announce=announce, step_list=step_list, pretty=pretty, export_type=export_type,
                                    output_dir=targets[directory], job_started_ns=min(starts, default=None)))
        sys.stderr.write(f"\rmsprof-agent: analysed {number}/{len(jobs)} (rank {rank}, {time.perf_counter() - began:.2f} s) -> {targets[directory]}\n")
    for directory, rank in jobs:  # now that every rank is analysed, each rank's report gets the cluster page of its directory
        if len(names.summary_ranks(targets[directory])) > 1:
            _write_report(targets[directory], rank)
    if announce:
        for written in dict.fromkeys(d for headline in results for d in headline["exports"]):
            log.say(f"export written: {written}")
    return results


def _mirrored(path, profiler_dir, output):
    """Where ``profiler_dir`` (found under PATH) is analysed to: the same place under ``output``, else itself."""
    if output is None:
        return profiler_dir
    return os.path.normpath(os.path.join(os.path.abspath(output), os.path.relpath(profiler_dir, os.path.abspath(path))))
