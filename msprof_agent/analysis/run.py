"""One rank being analysed: where and how its files go (``Context``), its raw data and what each page found (``Run``).

Every page module types against these; the exports read a ``Run``.
"""
import functools
import os
from collections.abc import Callable
from typing import Any

from .. import log
from ..contract import names
from ..contract.summary import WarmupStep
from .overlap import Overlap
from .rundata import RunData
from .workers import Job


class Context:
    """Where and how one rank's files are written (``folders``: its pages into ``folders.profiler``, the exports
    beside it), and the notes the analyses leave for the summary."""

    def __init__(self, folders: names.RunFolders, rank: int, pretty: bool, sampling_interval_ms: float) -> None:
        self.folders, self.profiler_dir, self.rank, self.pretty = folders, folders.profiler, rank, pretty
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
