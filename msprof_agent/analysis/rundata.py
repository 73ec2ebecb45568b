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
    batches = _OpBatches()
    steps = {}
    for record in read_records(profiler_dir, rank):
        kind = record.get("k")
        if kind == "step":
            steps[record["n"]] = record  # a step recorded twice (re-run flush) keeps the last copy
        elif kind == "ops":
            batches.add(record)
        elif kind == "meta":
            record.pop("k", None)
            data.meta.update(record)
        elif kind == "end":
            data.end = record
        elif kind in _LISTS:
            getattr(data, _LISTS[kind]).append(record)
    data.steps = [steps[n] for n in sorted(steps)]
    if batches.size:
        data.ops, data.op_names, data.op_types = batches.columns()
        data.ops["step"] = _assign_steps(data.ops["start"], data.steps)
        data.ops["self"] = _self_durations(data.ops) if data.meta.get("nested_ops") else data.ops["dur"]
    return data


class _OpBatches:
    """Op column batches turned into numpy arrays batch by batch (numbers converted in C, names and
    types factorized into integer codes against one growing table): op names repeat every step, so
    the analyses group by small integers instead of sorting millions of strings."""

    def __init__(self):
        self.size = 0
        self.parts = {c: [] for c in _OP_COLUMNS + ("name_id", "type_id")}
        self.codes = {"name": {}, "type": {}}

    def add(self, record):
        size = len(record.get("start", ()))
        if not size:
            return
        self.size += size
        parts = self.parts
        parts["start"].append(np.asarray(record["start"], dtype=np.int64))
        parts["dur"].append(np.asarray(record["dur"], dtype=np.int64))
        flops = record.get("flops")
        parts["flops"].append(np.full(size, np.nan) if flops is None else np.array(flops, dtype=np.float64))  # None -> nan
        for column in ("tid", "shape", "stream", "device"):
            values = record.get(column)
            array = np.empty(size, dtype=object)
            array[:] = values if isinstance(values, list) else [values] * size
            parts[column].append(array)
        for column in ("name", "type"):
            index = self.codes[column]
            parts[column + "_id"].append(np.array([index.setdefault(v, len(index)) for v in record[column]], dtype=np.int64))

    def columns(self):
        """(columns sorted by start, the name of each name code, the name of each type code)."""
        columns = {c: np.concatenate(v) for c, v in self.parts.items() if v}
        order = np.argsort(columns["start"], kind="stable")
        lookups = {}
        for column in ("name", "type"):
            lookups[column] = np.empty(len(self.codes[column]), dtype=object)
            lookups[column][:] = list(self.codes[column])
            columns[column] = lookups[column][columns[column + "_id"]]
        return {k: v[order] for k, v in columns.items()}, lookups["name"], lookups["type"]


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
