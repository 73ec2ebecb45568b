"""Load one rank's raw records into the arrays every analysis reads.

Ops become numpy columns sorted by start time, each tagged with the step it ran in, so that the
analyses are column arithmetic rather than Python loops over millions of events.
"""
import numpy as np

from ..store import read_records


class RunData:
    """Everything one rank recorded, with ``ops`` as aligned numpy columns."""

    def __init__(self, rank):
        self.rank = rank
        self.meta = {}
        self.steps = []  # all steps (always-on timing), sorted by n
        self.ops = {}
        self.op_names = self.op_types = None  # the string of each name_id / type_id code
        self.cpu, self.mem, self.queue, self.pipeline, self.comm, self.stacks = [], [], [], [], [], []
        self.windows, self.notes = [], []
        self.end = None

    @property
    def window_steps(self):
        """Steps recorded with op collection on; the step-trace pages are about these."""
        return [s for s in self.steps if s.get("win")]

    @property
    def op_count(self):
        return len(self.ops.get("start", ()))

    def restrict_to_steps(self, step_numbers):
        """Keep only the listed steps (``--step-list``) in every step-based view."""
        wanted = set(step_numbers)
        self.steps = [s for s in self.steps if s["n"] in wanted]
        if self.op_count:
            keep = np.isin(self.ops["step"], list(wanted))
            self.ops = {k: v[keep] for k, v in self.ops.items()}
        self.comm = [c for c in self.comm if c.get("step") in wanted]
        self.queue = [q for q in self.queue if q.get("step") in wanted]
        if self.steps:
            lo, hi = self.steps[0]["start"] // 1_000_000, self.steps[-1]["end"] // 1_000_000
            self.cpu = [c for c in self.cpu if lo <= c["ts"] <= hi]
            self.stacks = [c for c in self.stacks if lo * 1_000_000 <= c["ts"] <= hi * 1_000_000]


_OP_COLUMNS = ("name", "type", "start", "dur", "tid", "shape", "flops", "stream", "device")
_LISTS = {"cpu": "cpu", "mem": "mem", "queue": "queue", "pipeline": "pipeline", "comm": "comm", "stack": "stacks",
          "window": "windows", "note": "notes"}


def load_rank(profiler_dir, rank):
    data = RunData(rank)
    batches = {c: [] for c in _OP_COLUMNS}
    steps = {}
    for record in read_records(profiler_dir, rank):
        kind = record.get("k")
        if kind == "step":
            steps[record["n"]] = record  # a step recorded twice (re-run flush) keeps the last copy
        elif kind == "ops":
            size = len(record.get("start", ()))
            if not size:
                continue
            for column in _OP_COLUMNS:
                values = record.get(column)
                if column == "device" and isinstance(values, str):
                    values = [values] * size
                batches[column].append(values if values is not None else [None] * size)
        elif kind == "meta":
            record.pop("k", None)
            data.meta.update(record)
        elif kind == "end":
            data.end = record
        elif kind in _LISTS:
            getattr(data, _LISTS[kind]).append(record)
    data.steps = [steps[n] for n in sorted(steps)]
    if batches["start"]:
        data.ops, lookups = _op_columns(batches)
        data.op_names, data.op_types = lookups["name"], lookups["type"]
        data.ops["step"] = _assign_steps(data.ops["start"], data.steps)
        data.ops["self"] = _self_durations(data.ops) if data.meta.get("nested_ops") else data.ops["dur"]
    return data


def _self_durations(ops):
    """Each op's time minus its direct children's, per thread, as torch's "Self CPU" column.

    Only sources that record nested calls (torch's aten ops inside nn.Module ops) need this; summing
    inclusive times there would count the same microseconds several times over.
    """
    own = ops["dur"].copy()
    stacks = {}
    for i, (tid, start, end) in enumerate(zip(ops["tid"].tolist(), ops["start"].tolist(), (ops["start"] + ops["dur"]).tolist())):
        stack = stacks.setdefault(tid, [])
        while stack and stack[-1][0] <= start:
            stack.pop()
        if stack:
            own[stack[-1][1]] -= end - start
        stack.append((end, i))
    return np.maximum(own, 0)


def _op_columns(batches):
    def joined(column, dtype=object):
        flat = [v for batch in batches[column] for v in batch]
        return np.array(flat, dtype=dtype)

    start = joined("start", np.int64)
    order = np.argsort(start, kind="stable")
    columns = {"start": start, "dur": joined("dur", np.int64), "tid": joined("tid"), "shape": joined("shape"),
               "stream": joined("stream"), "device": joined("device"),
               "flops": np.array([np.nan if v is None else v for batch in batches["flops"] for v in batch], dtype=np.float64)}
    lookups = {}
    for column in ("name", "type"):
        columns[column + "_id"], lookups[column] = _factorize([v for batch in batches[column] for v in batch])
        columns[column] = lookups[column][columns[column + "_id"]]
    return {k: v[order] for k, v in columns.items()}, lookups


def _factorize(values):
    """Integer codes and the unique values, in first-seen order: op names repeat every step, so the
    analyses group by small integers (``np.bincount``) instead of sorting millions of strings."""
    index = {}
    codes = np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int64)
    uniques = np.empty(len(index), dtype=object)
    uniques[:] = list(index)
    return codes, uniques


def _assign_steps(op_start, steps):
    """Step number of each op by its start time (0 for ops outside every recorded step)."""
    if not steps:
        return np.zeros(len(op_start), dtype=np.int64)
    starts = np.array([s["start"] for s in steps], dtype=np.int64)
    ends = np.array([s["end"] for s in steps], dtype=np.int64)
    numbers = np.array([s["n"] for s in steps], dtype=np.int64)
    index = np.searchsorted(starts, op_start, side="right") - 1
    valid = (index >= 0) & (op_start < ends[np.clip(index, 0, None)])
    return np.where(valid, numbers[np.clip(index, 0, None)], 0)
