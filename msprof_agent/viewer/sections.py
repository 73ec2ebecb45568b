"""Find profiled runs under a directory and read their analysed files (the output contract) into plain dicts.

Every reader returns a *section*: ``{"status": "ok"|"missing"|"error", "file", "data", "error"}``, so a
page shows "not collected" for a missing file and an error for a malformed or half-written one, and one
bad file never takes down a page or the server. Nothing here writes.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, TypedDict

from .. import analysis
from ..contract import live as live_record
from ..contract import names, readers

_INFO_RE = names.rank_pattern(names.PROFILER_INFO)
MAX_TABLE_ROWS = 5000  # per table on a page; the API still returns every row


class Section(TypedDict):
    """One contract file as a page reads it: ``data`` is its reader's result (``contract.readers``)."""
    status: Literal["ok", "missing", "error"]
    file: str | None
    data: Any
    error: str | None


Parse = Callable[[bytes], Any]  # a ``contract.readers`` reader
Loaded = dict[str, Any]  # a page's sections by name (``load_page``): Sections, and step_timeline / timeline_file where it has them


class Run:
    """One profiled job: its id (path relative to the base, '/' separated) and the profiler dir of each rank."""

    def __init__(self, run_id: str, ranks: dict[int, str]) -> None:
        self.id = run_id
        self.ranks = ranks  # {rank: absolute profiler dir}
        # {rank: its timeline file without the ops}, where the analysis that wrote the file hands it to the report:
        # the step timeline is drawn from it rather than from a read-back of every op (1.7 s of a 100k-op report)
        self.step_level_timelines: dict[int, bytes] = {}

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.id, "ranks": sorted(self.ranks)}


def _inside(path: str, base_real: str) -> bool:
    real = os.path.realpath(path)
    return real == base_real or real.startswith(base_real.rstrip(os.sep) + os.sep)


def _run_key(directory: str) -> str:
    """Group ``job/rank_N/profiler`` and ``job/profiler`` under ``job``; any other holder is its own run."""
    parent, name = os.path.split(directory)
    if name == names.RUN_FOLDER:
        grand, parent_name = os.path.split(parent)
        return grand if names.JOB_RANK_FOLDER_RE.match(parent_name) else parent
    return directory


def scan(base: str) -> dict[str, Run]:
    """All runs under ``base`` at any depth, keyed by id (export folders are no runs). Symlinks are not followed out of ``base``."""
    base_real = os.path.realpath(base)
    groups: dict[str, dict[int, str]] = {}  # run key -> {rank: profiler dir}
    for directory, subdirs, files in os.walk(base_real, followlinks=False):
        # the exports' folders (export_type) hold other tools' copies of a run, not runs
        subdirs[:] = sorted(d for d in subdirs if _inside(os.path.join(directory, d), base_real) and not names.ASCEND_FOLDER_RE.match(d))
        ranks = sorted(int(m.group(1)) for m in map(_INFO_RE.match, files) if m)
        if not ranks:
            continue
        key = _run_key(directory)
        if not _inside(key, base_real):
            key = directory
        group = groups.setdefault(key, {})
        for rank in ranks:
            group.setdefault(rank, directory)
    runs = {}
    for key, rank_dirs in groups.items():
        rel = os.path.relpath(key, base_real).replace(os.sep, "/")
        runs[rel] = Run(rel, rank_dirs)
    return runs


def running_jobs(base: str) -> dict[str, str]:
    """The jobs under ``base`` running now (a rank's live record fresh, ``contract.live``), keyed by id as ``scan``'s runs."""
    base_real = os.path.realpath(base)
    jobs: dict[str, str] = {}
    for directory, subdirs, _files in os.walk(base_real, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if d != names.RAW_FOLDER and _inside(os.path.join(directory, d), base_real)
                            and not names.ASCEND_FOLDER_RE.match(d))
        if os.path.basename(directory) != names.RUN_FOLDER or not os.path.isdir(os.path.join(directory, names.RAW_FOLDER)):
            continue
        key = _run_key(directory)
        key = key if _inside(key, base_real) else directory
        rel = os.path.relpath(key, base_real).replace(os.sep, "/")
        if rel not in jobs and live_record.is_running(key):
            jobs[rel] = key
    return jobs


class RunIndex:
    """Scan results cached for a moment; a miss rescans, so new runs appear without a restart."""

    def __init__(self, base: str, ttl: float = 2.0) -> None:
        self.base = os.path.realpath(base)
        self.ttl = ttl
        self._runs: dict[str, Run] = {}
        self._at = 0.0

    def runs(self, fresh: bool = False) -> dict[str, Run]:
        if fresh or time.monotonic() - self._at > self.ttl:
            self._runs, self._at = scan(self.base), time.monotonic()
        return self._runs

    def get(self, run_id: str) -> Run | None:
        run = self.runs().get(run_id)
        if run is None:
            run = self.runs(fresh=True).get(run_id)
        return run


# ---- sections ---------------------------------------------------------------------------------------

def _section(status: Literal["ok", "missing", "error"], file: str | None = None, data: Any = None, error: str | None = None) -> Section:
    return {"status": status, "file": file, "data": data, "error": error}


_shared: dict[tuple[str, int, int, Parse], Section] | None = None  # {(path, mtime, size, parse): section} inside shared_reads()


@contextlib.contextmanager
def shared_reads() -> Iterator[None]:
    """Within the block, a file several pages show (the step trace: overview and steps) is read and
    parsed once. Sections are read-only for the renderers, so sharing them is safe."""
    global _shared
    _shared = {}
    try:
        yield
    finally:
        _shared = None


def _read_file(profiler_dir: str, name: str, parse: Parse) -> Section:
    """Read one contract file with ``parse(bytes)``; symlinks leading out of the profiler dir are refused."""
    path = os.path.join(profiler_dir, name)
    if not os.path.isfile(path):
        return _section("missing", name)
    if not _inside(path, os.path.realpath(profiler_dir)):
        return _section("error", name, error="refused: the file links outside the profiler directory")
    key = None
    if _shared is not None:
        stat = os.stat(path)
        key = (path, stat.st_mtime_ns, stat.st_size, parse)
        if key in _shared:
            return _shared[key]
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
        section = _section("ok", name, parse(raw))
    except Exception as exc:  # a malformed or half-written file is shown on its page
        section = _section("error", name, error=f"{type(exc).__name__}: {exc}")
    if key is not None and _shared is not None:
        _shared[key] = section
    return section


def _first(profiler_dir: str, candidates: Sequence[str], parse: Parse) -> Section:
    """The first of several alternative files that exists (e.g. cpu/gpu variants)."""
    for name in candidates:
        if os.path.isfile(os.path.join(profiler_dir, name)):
            return _read_file(profiler_dir, name, parse)
    return _section("missing", " or ".join(candidates))


def load_section(profiler_dir: str, rank: int, name: str) -> Section:
    """The rank's section ``name``: the first present of its file's templates, read by its reader (the page that
    writes it declares both: ``analysis.pages``)."""
    file = analysis.pages.files()[name]
    if file.read is None:
        raise KeyError(f"section {name!r}: its file ({file.templates[0]}) has no reader")
    section = _first(profiler_dir, [names.rank_file(template, rank) for template in file.templates], file.read)
    if name == "step_trace" and section["status"] == "ok" and not section["data"]["steps"]:
        return _section("missing", section["file"])  # a header and no step: nothing profiled, no chart to draw
    return section


def present(profiler_dir: str, rank: int, name: str) -> bool:
    """Whether the rank has the file of section ``name`` (any of its templates), unread."""
    templates = analysis.pages.files()[name].templates
    return any(os.path.isfile(os.path.join(profiler_dir, names.rank_file(template, rank))) for template in templates)


def load_cluster_report(run: Run, cluster: str) -> dict[str, Any]:
    """What the job's cluster_report.html reads: the cluster summary in ``cluster`` and the lowest rank's
    profiler_info (the framework's words), no rank's timeline (each rank's report has its own), so it is
    the same whichever rank writes it."""
    first = min(run.ranks, default=None)
    info = load_section(run.ranks[first], first, "info") if first is not None else _section("missing", names.PROFILER_INFO)
    return {"info": info, "cluster_summary": _read_file(cluster, names.CLUSTER_SUMMARY, readers.read_json)}


def cluster_summary(run: Run) -> Section:
    """The job's cluster_summary.json (``names.cluster_dir``: one place for all its ranks)."""
    return _read_file(names.cluster_dir(next(iter(run.ranks.values()))), names.CLUSTER_SUMMARY, readers.read_json)
