"""The raw event store: one JSON-lines file per process under ``profiler/raw/rank_{r}/``.

Records are buffered in memory and appended with a single ``os.write`` at most every
``FLUSH_INTERVAL_NS`` at a step end, when the buffer grows, and at every window start and stop,
SIGTERM, exception and exit. So a crash, SIGTERM or Ctrl-C leaves every completed step on disk for
``msprof-agent analyse``, and even SIGKILL, which runs no handler, loses at most the steps of the
last 0.1 s. A write (and a JSON encoding) per step would cost a training step of a few ms about 1 %.
Ops arrive in column batches (one record holding lists) because the device sessions deliver them in
bulk and the analyses read them as arrays.

The record kinds, their fields and the store's format version are in ``records``; every time is
epoch nanoseconds (``time.time_ns``), the clock MindSpore's and torch's profilers use too.
"""
from __future__ import annotations

import collections
import glob
import mmap
import os
import time

import orjson

from . import log, records
from .contract.names import (
    CLUSTER_SUMMARY,
    EARLIER_FOLDER,
    EARLIER_STAMP,
    MOVING_LOCK,
    RAW_FILE,
    RAW_FILE_GLOB,
    RAW_FOLDER,
    RAW_RANK_FOLDER,
    RUN_FOLDER,
    SUMMARY,
    rank_file,
    rank_pattern,
    summary_ranks,
)

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    from collections.abc import Hashable, Iterator, Mapping, Sequence
    from typing import Any, TypeVar

    Record = Mapping[str, Any]  # one raw record (``records``): a JSON object with its kind under records.KIND
    Value = TypeVar("Value", bound=Hashable)

FLUSH_BYTES = 1 << 20
FLUSH_INTERVAL_NS = 100_000_000


def coded(values: Sequence[Value]) -> tuple[list[int], list[Value]]:
    """(codes, table) for a column of repeating strings: each value's index in the table of distinct
    values, in order of first appearance. Ops records carry names and types this way
    (``name_codes`` + ``name_table``): a batch of 50k ops repeats a few hundred names, and the
    analysis reads small integers far faster than millions of strings."""
    table: dict[Value, int] = {}
    codes = [table.setdefault(value, len(table)) for value in values]
    return codes, list(table)


def rank_raw_dir(profiler_dir: str, rank: int) -> str:
    return os.path.join(profiler_dir, RAW_FOLDER, RAW_RANK_FOLDER.format(rank=rank))


MOVE_WAIT_S = 5.0  # how long a process waits for another one of its job moving the earlier run


def keep_earlier_run(profiler_dir: str, started_ns: int) -> str | None:
    """A rerun into the same folder keeps the run before it: where PROFILER_DIR holds a run analysed before
    STARTED_NS (a summary older than this process), the folder moves whole to ``earlier/<analysed at>/profiler``
    beside it, which every reader (view, compare, analyse, MindInsight) reads as it read the folder, and
    ``profiler/`` stays the newest run's. The job's first process to write moves it, holding a lock folder; its
    other ranks then find no earlier summary there. Returns the earlier run's new folder, or None."""
    parent = os.path.dirname(profiler_dir)
    lock = os.path.join(parent, MOVING_LOCK)
    deadline = time.monotonic() + MOVE_WAIT_S
    while True:
        try:
            os.mkdir(lock)
            break
        except FileExistsError:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)
        except OSError:  # no parent yet: nothing earlier to keep
            return None
    try:
        done = [rank_file(SUMMARY, rank) for rank in summary_ranks(profiler_dir)] + [CLUSTER_SUMMARY]
        times = [os.stat(path).st_mtime_ns for path in (os.path.join(profiler_dir, name) for name in done) if os.path.exists(path)]
        if not any(t < started_ns for t in times):
            return None
        stamp = time.strftime(EARLIER_STAMP, time.gmtime(max(times) / 1e9))
        target, n = os.path.join(parent, EARLIER_FOLDER, stamp), 1
        while os.path.exists(target):
            target, n = os.path.join(parent, EARLIER_FOLDER, f"{stamp}-{n}"), n + 1
        os.makedirs(target)
        os.rename(profiler_dir, os.path.join(target, RUN_FOLDER))
        return target
    finally:
        os.rmdir(lock)


class EventWriter:
    """Append-only writer owned by one process; other threads hand records over through ``queue``."""

    def __init__(self, profiler_dir: str, rank: int, started_ns: int) -> None:
        self.profiler_dir = profiler_dir
        self.started_ns = started_ns
        self._settled = False
        self.directory = rank_raw_dir(profiler_dir, rank)
        self.path = os.path.join(self.directory, RAW_FILE.format(pid=os.getpid()))
        self.queue: collections.deque[Record] = collections.deque()  # small records encoded at the next flush(); sampler threads append here too
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._fd: int | None = None
        self._flushed_ns = 0
        self._pending_steps: list[int] = []  # the end offset, in the pending lines, of each step record
        self._torn = False  # a failed write left a part of a line: the next write ends it first
        self.lost_steps = 0  # step records a failed write (a full disk) lost, with their ops and samples
        self.lost_because: str | None = None

    def add_later(self, record: Record) -> None:
        """A small, frequent record (a step): encoded with the next flush, off the step's critical path."""
        self.queue.append(record)

    def add(self, record: Record) -> None:
        line = orjson.dumps(record, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        self._pending.append(line)
        self._pending_bytes += len(line)
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()

    def flush_if_due(self, now_ns: int) -> None:
        if now_ns - self._flushed_ns >= FLUSH_INTERVAL_NS:
            self.flush()

    def flush(self) -> None:
        """Write what is pending. A failed write (a full disk) loses this batch, counted in ``lost_steps``
        (the steps whose records did not reach the file); the first is raised for the caller to say, the
        later ones only counted (the summary and the exit line give the total), so a job says it once."""
        self._flushed_ns = time.time_ns()
        queue, pending, step_ends, size = self.queue, self._pending, self._pending_steps, self._pending_bytes
        dumps, numpy, kind, step = orjson.dumps, orjson.OPT_SERIALIZE_NUMPY, records.KIND, records.STEP  # a step's record each: locals
        while queue:
            record = queue.popleft()
            line = dumps(record, option=numpy) + b"\n"
            pending.append(line)
            size += len(line)
            if record.get(kind) == step:
                step_ends.append(size)
        self._pending_bytes = size
        if not self._pending:
            return
        batch, steps = self._pending, self._pending_steps
        self._pending, self._pending_bytes, self._pending_steps = [], 0, []
        data = (b"\n" if self._torn else b"") + b"".join(batch)
        offset = len(data) - sum(map(len, batch))  # step end offsets count from the batch's own start
        done = 0
        try:
            fd = self._open()
            while done < len(data):
                done += os.write(fd, data[done:])
            self._torn = False
        except OSError as exc:
            self._torn = self._torn or 0 < done
            self.lost_steps += sum(1 for end in steps if end + offset > done)
            said, self.lost_because = self.lost_because is not None, exc.strerror
            if not said:
                raise

    def write_now(self, record: Record) -> None:
        """A record that must be on disk before the caller goes on (a collective's entry, before it can
        block): written at once, one line in one append, so a SIGKILL later keeps it."""
        line = (b"\n" if self._torn else b"") + orjson.dumps(record) + b"\n"
        os.write(self._open(), line)
        self._torn = False

    def settle(self) -> None:
        """Before this store's first write or its collection's first recording (whose profiler may write into
        the folder): an earlier run in the folder is kept aside (``keep_earlier_run``), and said where."""
        if self._settled:
            return
        self._settled = True
        try:
            kept = keep_earlier_run(self.profiler_dir, self.started_ns)
        except OSError as exc:
            log.warn_once(f"could not keep the earlier run in {self.profiler_dir} aside ({exc.strerror}); this run replaces it")
            return
        if kept:
            log.say(f"the earlier run in {self.profiler_dir} is kept in {os.path.join(kept, RUN_FOLDER)}")

    def _open(self) -> int:
        if self._fd is None:
            self.settle()
            os.makedirs(self.directory, exist_ok=True)
            self._clear_earlier_runs()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _clear_earlier_runs(self) -> None:
        """A new run of this rank replaces the raw data an earlier run left in the same directory."""
        for path in glob.glob(os.path.join(self.directory, RAW_FILE_GLOB)):
            try:
                if path != self.path and os.stat(path).st_mtime_ns < self.started_ns:
                    os.remove(path)
            except OSError:
                pass

    def close(self) -> None:
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def abandon(self) -> None:
        """In a fork child: drop the parent's buffer and descriptor without writing anything."""
        self._pending, self._pending_bytes, self._pending_steps, self._fd = [], 0, [], None
        self.queue = collections.deque()


def raw_ranks(profiler_dir: str) -> list[int]:
    """Ranks that left raw data under this profiler directory."""
    raw = os.path.join(profiler_dir, RAW_FOLDER)
    found = map(rank_pattern(RAW_RANK_FOLDER).match, os.listdir(raw) if os.path.isdir(raw) else ())
    return sorted(int(m.group(1)) for m in found if m and glob.glob(os.path.join(raw, m.group(0), RAW_FILE_GLOB)))


def raw_lines(profiler_dir: str, rank: int) -> Iterator[bytes]:
    """Every line of one rank's raw files. The files are mapped rather than read line by line:
    buffered readline copies an ops line of megabytes many times over."""
    for path in sorted(glob.glob(os.path.join(rank_raw_dir(profiler_dir, rank), RAW_FILE_GLOB))):
        with open(path, "rb") as handle:
            if not os.fstat(handle.fileno()).st_size:
                continue
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                begin = 0
                while begin < len(mapped):
                    end = mapped.find(b"\n", begin) + 1 or len(mapped)
                    yield mapped[begin:end]
                    begin = end

