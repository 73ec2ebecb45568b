"""Load one rank's raw records into the arrays every analysis reads.

Ops become numpy columns sorted by start time (their names, types, threads... as integer codes, see
``opcolumns``), each tagged with the step it ran in, so that the analyses are column arithmetic
rather than Python loops over millions of events.
"""
from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ..options import Options
from ..records import (
    BUFFER,
    COMM,
    CPU,
    DEVICE_STEPS,
    END,
    ENTER,
    FORMAT,
    GPU,
    GPU_PEAK,
    HOSTIO,
    KIND,
    LAUNCH,
    MEM,
    META,
    MSTX,
    NOTE,
    OPS,
    PAUSE,
    PIPELINE,
    PROBE,
    QUEUE,
    STACK,
    STEP,
    WINDOW,
)
from ..store import rank_raw_dir, raw_lines
from . import shapefill
from .opcolumns import OpBatches, OpColumns, split_ops_line
from .workers import COUNT, Job, Workers

if TYPE_CHECKING:
    from ..records import Buffer, Comm, Cpu, DeviceSteps, End, Enter, Gpu, GpuPeak, Launch, Mem, Mstx, Note, Pause, Pipeline, Probe, Queue, Stack, Step, Window


class RunData:
    """Everything one rank recorded, with ``ops`` as aligned numpy columns."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.meta: dict[str, Any] = {}  # records.Meta's fields, and ``job_started_ns`` when ranks are analysed together
        self.options = Options()  # the recorded ones (``Options.from_record``), once loaded
        self.steps = []
        self.ops = OpColumns({}, {})
        # the string of each name_id / type_id code (object arrays), once ops are loaded
        self.op_names: np.ndarray = np.empty(0, dtype=object)
        self.op_types: np.ndarray = np.empty(0, dtype=object)
        self.cpu: list[Cpu] = []
        self.mem: list[Mem] = []
        self.queue: list[Queue] = []
        self.pipeline: list[Pipeline] = []
        self.comm: list[Comm] = []
        self.stacks: list[Stack] = []
        self.host_io: list[dict[str, Any]] = []  # host_sys disk/network samples (records.HostIo), read by counter name
        self.mstx: list[Mstx] = []  # the user's mstx marks and ranges
        self.windows: list[Window] = []
        self.notes: list[Note] = []
        self.pauses: list[Pause] = []
        self.probes: list[Probe] = []
        self.entered: list[Enter] = []  # collectives as entered, before they could block (with their group's ranks the first time)
        self.launches: list[Launch] = []  # what launched each device activity (CUDA), a record per profiler session
        self.device_steps: list[DeviceSteps] = []  # steps timed on the device's clock (CUDA events)
        self.gpu: list[Gpu] = []  # the device's samples (allocator bytes, NVML)
        self.gpu_peaks: list[GpuPeak] = []  # the allocator's peaks, at each window's stop and at exit
        self.buffers: list[Buffer] = []  # the framework profiler's sessions: span, events, RSS before and after its stop
        self.shapes: dict[str, Any] | None = None  # which profiler sessions recorded shapes, and how the others' ops got theirs (shapefill.fill)
        self.end: End | None = None

    @property
    def steps(self) -> list[Step]:
        """All steps (always-on timing), sorted by n. Those outside every window keep only n, start, end and win."""
        return self._steps

    @steps.setter
    def steps(self, steps: list[Step]) -> None:
        self._steps = steps
        self.window_steps = [s for s in steps if s.get("win")]  # recorded with op collection on: the step-trace pages' steps

    @property
    def op_count(self) -> int:
        return len(self.ops.get("start", ()))

    def restrict_to_steps(self, step_numbers: Iterable[int]) -> None:
        """Keep only the listed steps (``--step-list``) in every step-based view."""
        wanted = set(step_numbers)
        self.steps = [s for s in self.steps if s["n"] in wanted]
        if self.op_count:
            keep = np.isin(self.ops["step"], list(wanted))
            self.ops = self.ops.take(keep)
        self.comm = [c for c in self.comm if c.get("step") in wanted]
        self.queue = [q for q in self.queue if q.get("step") in wanted]
        if self.steps:
            lo, hi = self.steps[0]["start"], self.steps[-1]["end"]
            self.cpu = [c for c in self.cpu if lo <= c["ts"] <= hi]
            self.host_io = [c for c in self.host_io if lo <= c["ts"] <= hi]
            self.mstx = [m for m in self.mstx if m.get("step") in wanted]
            self.stacks = [c for c in self.stacks if lo <= c["ts"] <= hi]
            self.pauses = [p for p in self.pauses if lo <= p["start"] <= hi]

    def paused_ns(self, start: int, end: int) -> int:
        """How much of [start, end) (ns) the agent's own pauses (profiler start-up, hand-overs) took."""
        return sum(max(min(p["end"], end) - max(p["start"], start), 0) for p in self.pauses)


_LISTS = {CPU: "cpu", MEM: "mem", QUEUE: "queue", PIPELINE: "pipeline", COMM: "comm", STACK: "stacks",
          HOSTIO: "host_io", MSTX: "mstx", WINDOW: "windows", NOTE: "notes", PAUSE: "pauses", PROBE: "probes", BUFFER: "buffers",
          ENTER: "entered", LAUNCH: "launches", DEVICE_STEPS: "device_steps", GPU: "gpu", GPU_PEAK: "gpu_peaks"}
_META_MARK = orjson.dumps({KIND: META})[1:-1]  # b'"k":"meta"'
_LARGE_LINE = 1 << 16  # big ops records are parsed straight into arrays; small lines are cheaper left to orjson


class StoreFormatError(ValueError):
    """A raw store another version of msprof-agent wrote: its records mean something else."""


def started_ns(profiler_dir: str, rank: int) -> int | None:
    """When the rank's run started (its meta record's ``started_ns``), read without loading the rank; None if unrecorded."""
    for line in raw_lines(profiler_dir, rank):
        if len(line) < 1 << 16 and _META_MARK in line:  # not an ops line of megabytes
            with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                return int(orjson.loads(line)["started_ns"])
    return None


def load_rank(profiler_dir: str, rank: int) -> RunData:
    """One rank's raw lines as RunData. Large ops lines are split in worker threads while the lines
    after them are read; every line is still taken in file order."""
    data = RunData(rank)
    batches = OpBatches()
    steps: dict[int, Step] = {}

    def take(line: bytes, split: dict[str, Any] | None) -> None:
        """One line, in file order; ``split``: the line already split as an ops record, or None."""
        if split is not None:
            batches.add(split)
            return
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:  # a torn last line (killed mid-write)
            return
        kind = record.get(KIND)
        if kind == STEP:
            if not record.get("win"):  # only its time is ever read (run step time, ops' steps): a long run has millions
                record = {"n": record["n"], "start": record["start"], "end": record["end"], "win": False}
            steps[record["n"]] = record  # a step recorded twice (re-run flush) keeps the last copy
        elif kind == OPS:
            batches.add(record)
        elif kind == META:
            record.pop(KIND, None)
            data.meta.update(record)
        elif kind == END:
            data.end = record
        elif kind in _LISTS:
            getattr(data, _LISTS[kind]).append(record)

    with Workers(name="msprof-agent-load") as pool:
        # (line, the job splitting it or None for a small line), in file order
        waiting: collections.deque[tuple[bytes, Job[dict[str, Any] | None] | None]] = collections.deque()
        splitting = 0
        for line in raw_lines(profiler_dir, rank):
            large = len(line) > _LARGE_LINE
            if not large and not waiting:
                take(line, None)
                continue
            waiting.append((line, pool.submit(split_ops_line, line) if large else None))
            splitting += large
            while waiting and (waiting[0][1] is None or waiting[0][1].done() or splitting > 2 * COUNT):
                line, split = waiting.popleft()
                splitting -= split is not None
                take(line, None if split is None else split.result())
        for line, split in waiting:
            take(line, None if split is None else split.result())
    _check_format(profiler_dir, rank, data.meta)
    data.steps = [steps[n] for n in sorted(steps)]
    if batches.size:
        data.ops = batches.columns()
        data.op_names, data.op_types = data.ops.code_values["name"], data.ops.code_values["type"]
        data.ops["step"] = _assign_steps(data.ops["start"], data.steps)
        data.ops["self"] = _self_durations(data.ops["dur"], parents(data.ops)) if data.meta.get("nested_ops") else data.ops["dur"]
        data.shapes = shapefill.fill(data)
    data.options = Options.from_record(data.meta)
    return data


def _check_format(profiler_dir: str, rank: int, meta: dict[str, Any]) -> None:
    """Refuse a store of another format (``records.FORMAT``), saying which and what to do."""
    written = meta.get("format")
    if meta and written != FORMAT:
        raise StoreFormatError(f"{rank_raw_dir(profiler_dir, rank)}: a raw store of format {written!r}, written by another "
                               f"msprof-agent version; this one reads format {FORMAT}: analyse it with the version that recorded it, "
                               "or record the job again")


def _self_durations(durations: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each op's time minus its direct children's, per thread, as torch's "Self CPU" column.

    Only sources that record nested calls (torch's aten ops inside nn.Module ops) need this; summing
    inclusive times there would count the same microseconds several times over. An op's parent is the
    latest earlier op of its thread still running when it starts (what a stack of open ops gives), found
    for all ops at once by pointer jumping: each op's candidate starts at the thread's previous op and,
    while that one had ended, moves to that one's own candidate, so chains halve each round.
    """
    own = durations.copy()
    children = np.flatnonzero(parent >= 0)
    np.subtract.at(own, parent[children], durations[children])
    clipped: np.ndarray = np.maximum(own, 0)
    return clipped


def parents(ops: OpColumns) -> np.ndarray:
    """Each op's parent (-1: none): the latest earlier op of its thread still running when it starts."""
    starts, durations = ops["start"], ops["dur"]
    ends = starts + durations
    by_thread = np.argsort(ops["tid_id"], kind="stable")  # each thread's ops, in start order
    same_thread = np.append(False, ops["tid_id"][by_thread][1:] == ops["tid_id"][by_thread][:-1])
    candidate = np.full(len(starts), -1, dtype=np.int64)
    candidate[by_thread[1:][same_thread[1:]]] = by_thread[:-1][same_thread[1:]]
    ended = np.flatnonzero(candidate >= 0)
    while len(ended):
        ended = ended[ends[candidate[ended]] <= starts[ended]]
        candidate[ended] = candidate[candidate[ended]]
        ended = ended[candidate[ended] >= 0]
    return candidate


def _assign_steps(op_start: np.ndarray, steps: list[Step]) -> np.ndarray:
    """Step number of each op by its start time (0 for ops outside every recorded step).

    ``op_start`` is sorted, so the ops of a step are one slice, found by two binary searches per step
    rather than one per op. An op after the start of two overlapping steps goes to the later one.
    """
    if not steps:
        return np.zeros(len(op_start), dtype=np.int64)
    starts = np.array([s["start"] for s in steps], dtype=np.int64)
    ends = np.array([s["end"] for s in steps], dtype=np.int64)
    numbers = np.array([s["n"] for s in steps], dtype=np.int64)
    firsts = np.maximum.accumulate(np.searchsorted(op_start, starts))
    nexts = np.append(firsts[1:], len(op_start))
    lasts = np.clip(np.searchsorted(op_start, ends), firsts, nexts)
    edges = np.concatenate(([0], np.stack([firsts, lasts], axis=1).ravel(), [len(op_start)]))
    values = np.concatenate(([0], np.stack([numbers, np.zeros_like(numbers)], axis=1).ravel()))
    per_op: np.ndarray = np.repeat(values, np.diff(edges))
    return per_op
