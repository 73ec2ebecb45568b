"""The torch device session: torch.profiler for the op-collection window, read back as raw records.

The run-loop patches (``patch.py``) drive it: ``start`` / ``stop`` at the window's edges (the
``DeviceSession`` protocol), ``step_ended`` at each close and ``hand_over`` between two steps when a
profiler session holds ~SESSION_EVENTS events.
"""
from __future__ import annotations

import bisect
import os
import re
import sys
import time
from typing import Any

import orjson

from ... import environment, log, records
from ...collectors import heap
from ...contract.cuda import is_runtime_call
from ...options import Options
from ...store import coded
from .fork_guard import guard_fork_children_against_kineto_exit

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from typing import Any

    from ...collectors.steps import StepRecorder
    from ...session import Recorder

    Batch = dict[str, list[Any]]  # an ops batch's columns, filled event by event
    Collective = tuple[str, int, int, list[list[int]], list[str]]  # name, start, dur, input shapes, dtypes
    HostBatch = tuple[list[int], list[str], list[int]]  # a host ops batch's name codes, name table and starts

OPS_CHUNK = 65536
# torch.profiler keeps every event of a session until its stop(), at ~5 KB each with shapes (6 GB
# for the 1.1 M events of 300 ResNet steps), so a window is collected as a series of profiler
# sessions of about this many events, handed over between two steps.
SESSION_EVENTS = 50_000
FIRST_SESSION_STEPS = 1  # the first session measures the events per step: one step, however big
# On a GPU, torch.profiler costs the training little while it records, and its stop() stalls the device for ~2 us an
# event: a window is one session, as a bare torch.profiler would record it, with shapes throughout, up to this many
# events (~5 KB each in host memory) before a hand-over; the first session is sized in steps, then by its events.
GPU_SESSION_EVENTS = 1_000_000
GPU_DEFAULT_WINDOW = (11, 16)  # ops of these steps where the user chose none: after the warm-up; one stop() of ~30 k events (~0.7 s)
GPU_FIRST_SESSION_STEPS = 100
# record_shapes and with_flops make torch.profiler's stop() ~4x slower per event (13.9 us against 3.6, issue 27):
# shapes are recorded in the first session and a short second one (the first's one step, the window's first,
# often differs from the rest: the optimizer's state is made there), then in a short one after every
# SHAPES_EVERY - 1 sessions without, and in the one after a session whose steps' op sequence or model input shapes were not seen in
# a session with shapes (a session's shapes setting is fixed at its start). The analysis gives the others'
# ops the shapes and FLOPs of the op at the same place in a step with the same sequence (analysis/shapefill.py).
# Every 4th: a shape change that shows in neither the op sequence nor the model's inputs is seen within
# 3 full sessions (~150 k events), while the sampled events stay ~1 % of all.
SHAPES_EVERY = 4
SAMPLE_SHARE = 32  # a sampled session lasts 1/32 of a full one's steps (at least SAMPLE_STEPS): one step's shapes fill all like it
SAMPLE_STEPS = 2
MEM_BUCKET_NS = 1_000_000  # at most one memory sample per millisecond and device,
MEM_MAX_SAMPLES = 20_000  # and at most this many per window (wider buckets on long windows)

# Collectives that run inside C++ (DDP's reducer) reach no Python wrapper; the profiler sees them.
COMM_OP_PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:", "xccl:")
# The profiler stamps its events from an approximate clock, converted to epoch ns once a session: against
# time.time_ns it drifted 10-250 us within a 6-step session here, so a collective a wrapper timed can seem to start
# before that wrapper did, or after it returned.
CLOCK_SLACK_NS = 1_000_000
DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}

# torch.profiler's own step and DataLoader annotations: the agent records steps and data waits
# itself, and the DataLoader one's "self time" is waiting, which would top the op tables.
ANNOTATIONS_NOT_OPS = ("ProfilerStep#", "enumerate(DataLoader)#")

# kineto (linked into libtorch) writes "USDT: ... profiler_start" and "profiler_stop" to stderr for every
# profiler session at its default level, ERROR (4); USDT is 5. It reads KINETO_LOG_LEVEL once, when
# the process's first profiler session starts. Above USDT, kineto prints nothing (its ERROR lines go too).
KINETO_QUIET_LEVEL = "6"

# A memory address in an op name ("... object at 0x7ff7...", a record_function label made from an object):
# removed, so that the same op has the same name in every run and `compare` can match it.
ADDRESS = re.compile(r"\s*(?:at )?0x[0-9a-fA-F]+")


def cuda_in_use() -> bool:
    """True once the script itself initialised CUDA. Never ``torch.cuda.is_available()``: that
    initialises the driver in this process, and a later ``fork`` could then not use CUDA."""
    import torch

    initialized: bool = torch.cuda.is_initialized()  # unannotated in torch
    return initialized



_kineto_level_chosen = False


def _start_quietly(prof: Any, cuda: bool) -> None:
    """Start ``prof`` with kineto's lines off, so the job's output stays its own: the level is set
    for kineto's first start only (it reads it then), and never where the user chose one; the
    variable is removed again, so the job's children do not inherit it."""
    global _kineto_level_chosen
    if _kineto_level_chosen or environment.KINETO_LOG_LEVEL in os.environ:
        (_detaching_cupti if cuda else _without_profiler_warnings)(prof.start)
        return
    _kineto_level_chosen = True
    os.environ[environment.KINETO_LOG_LEVEL] = KINETO_QUIET_LEVEL
    try:
        (_detaching_cupti if cuda else _without_profiler_warnings)(prof.start)
    finally:
        os.environ.pop(environment.KINETO_LOG_LEVEL, None)


def _detaching_cupti(call: Any) -> None:
    """``call()`` (a profiler session's start or stop) with kineto told to detach CUPTI when the session ends
    (``TEARDOWN_CUPTI=1``): left attached, CUPTI's callbacks slowed every later step of a GPT on an H200 by 11-14 %
    and a launch-bound job's by 40 %, long after the window. Not where the user or torch chose a value (torch.compile's
    CUDA graphs set it to 0: CUPTI's re-attach crashes beside them); set only around the call, so children never inherit it."""
    if environment.TEARDOWN_CUPTI in os.environ or _cuda_graphs_compiled():
        _without_profiler_warnings(call)
        return
    os.environ[environment.TEARDOWN_CUPTI] = "1"
    try:
        _without_profiler_warnings(call)
    finally:
        os.environ.pop(environment.TEARDOWN_CUPTI, None)


def _cuda_graphs_compiled() -> bool:
    inductor = sys.modules.get("torch._inductor.config")
    return bool(inductor is not None and getattr(getattr(inductor, "triton", None), "cudagraphs", False))


def _without_profiler_warnings(call: Any) -> None:
    """``call()`` with torch.profiler's own warnings hidden: they speak of our sessions ("Profiler clears events
    at the end of each cycle ... set acc_events=True"), not of the job, whose stderr stays its own."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"torch\.(autograd\.)?profiler")
        warnings.filterwarnings("ignore", message=".*Profiler clears events")
        call()



class TorchDeviceSession:
    """torch.profiler for the op-collection window; the events go out as raw ``ops`` / ``mem`` batches.

    ``key_averages()`` and the profiler's Python event parsing are avoided: on a long window they
    take minutes and gigabytes. Instead the kineto result's events are read once, flat, and streamed
    into column batches. All ops are kept (nested ``aten::`` calls included, no parent links), so
    counts per op name equal torch.profiler's own table.
    """

    def __init__(self, steps: StepRecorder) -> None:
        self.options = Options()  # the recording window's, from start()
        self._events_given = _positive_setting(environment.TORCH_SESSION_EVENTS, 0, "events")  # 0: the device's default
        self.cuda = False  # decided at start(): CUDA activity only where the script uses CUDA
        self._steps = steps
        self.step_ends: list[int] = []  # boundaries of the window's steps, to number the collectives found in it
        self.wrapped_comm: list[tuple[int, int, str]] = []  # (start, end, name) of calls the Python wrappers timed already
        self._first_step = 1
        self._session_steps = FIRST_SESSION_STEPS  # steps per profiler session, sized from the last one
        self._steps_in_session = 0
        self._prof: Any = None  # torch.profiler.profile: stop() reads and clears its internals (profiler.kineto_results)
        self.active = False  # a profiler session runs (``_prof`` is set): an attribute, as the run loop's hooks read it every step
        self._in_torch_ns = 0  # time inside torch.profiler's own stop() and start() since the last hand-over began
        self._sync = (0, 0)  # time.time_ns() before and after the profiler session started, for its clock
        self._mem_base = {"cpu": 0, "cuda": 0}  # allocated bytes where the next profiler session's events start
        self._shapes_every = _positive_setting(environment.TORCH_SHAPES_EVERY, SHAPES_EVERY, "sessions")
        self._shapes_because: str | None = None  # why the running session records shapes; None: it does not
        self._shapes_next: str | None = None  # why the next one must
        self._without_shapes = 0  # sessions without shapes since the last with them
        self._sessions = 0
        self._seen: set[int] = set()  # step signatures (op names in order, model input shapes) of sessions with shapes
        self._names: dict[str, int] = {}  # op name -> a number kept across sessions, for the signatures
        self._inputs: list[list[Any]] = []  # [step, model input shapes] where the running session's steps' inputs changed

    def start(self, options: Options) -> None:
        """Start torch.profiler for a window with the window's OPTIONS."""
        self.options = options
        self._seen, self._without_shapes, self._shapes_next = set(), 0, "the window's first session"
        self._sessions = 0  # profiler sessions started in the window
        self._start_profiler(continuing=False)

    def _start_profiler(self, continuing: bool) -> None:
        """A profiler session for the window, or (``continuing``) its next one after a hand-over."""
        if not self.options.op_time:
            return  # torch.profiler has nothing but ops to give: data waits come from the run loop
        import torch
        from torch.profiler import ProfilerActivity, profile

        self.cuda = cuda_in_use()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        if self.cuda and not continuing:
            self._session_steps = GPU_FIRST_SESSION_STEPS
        self._shapes_because = self._shapes_reason() if self.options.record_shapes else None
        shapes = self._shapes_because is not None
        # with_stack is the agent's own stack sampler (collectors/stacks.py): torch's Python stack events
        # made a 1.7 s training loop take 22 s and named ops after Python objects and their addresses.
        self._prof = profile(activities=activities, record_shapes=shapes,
                             profile_memory=self.options.profile_memory, with_flops=shapes)
        self.active = True
        if not continuing:
            self._mem_base = {"cpu": 0, "cuda": torch.cuda.memory_allocated() if self.cuda and self.options.profile_memory else 0}
        self.step_ends, self.wrapped_comm, self._inputs = [], [], []
        self._steps_in_session = 0
        self._first_step = self._steps.completed + 1
        before = time.time_ns()
        _start_quietly(self._prof, self.cuda)
        self._sync = (before, time.time_ns())
        self._in_torch_ns += self._sync[1] - before
        guard_fork_children_against_kineto_exit()

    @property
    def _events_per_session(self) -> int:
        return self._events_given or (GPU_SESSION_EVENTS if self.cuda else SESSION_EVENTS)

    def _shapes_reason(self) -> str | None:
        """Why the session starting now records shapes (None: it does not): SHAPES_EVERY's rule; every session on
        a GPU, where the sessions are long and shapes cost only their stop."""
        because, self._shapes_next = self._shapes_next, None
        self._sessions += 1
        if self.cuda:
            return "every session on a GPU"
        if because is None and self._sessions == 2:  # the first one's step, the window's first, is often unlike the rest
            because = "the window's second session"
        if because is None and self._without_shapes + 1 >= self._shapes_every:
            because = f"every {self._shapes_every}th session" if self._shapes_every > 1 else "every session"
        self._without_shapes = 0 if because is not None else self._without_shapes + 1
        return because

    def default_window(self) -> tuple[int, int] | None:
        """The op window where the user chose none: on a GPU, GPU_DEFAULT_WINDOW; elsewhere None (every step)."""
        return GPU_DEFAULT_WINDOW if cuda_in_use() else None

    def model_inputs(self, args: tuple[object, ...]) -> None:
        """The shapes of the model's inputs at the step's first forward (its root module's arguments):
        a change tells of new shapes when the session records none."""
        text = _input_shapes(args)
        if not self._inputs or self._inputs[-1][1] != text:
            self._inputs.append([self._steps.completed + 1, text])

    def step_ended(self, now: int) -> None:
        self.step_ends.append(now)
        self._steps_in_session += 1

    @property
    def handover_due(self) -> bool:
        steps = self._session_steps
        if self._shapes_because is not None and steps > 1 and self._shapes_every > 1 and not self.cuda:  # a sample, short
            steps = min(steps, max(SAMPLE_STEPS, steps // SAMPLE_SHARE))
        return self.active and self._steps_in_session >= steps

    def hand_over(self, recorder: Recorder) -> int:
        """Stop the profiler session, write its events, start the next one, sized to ~SESSION_EVENTS; returns
        the ns of it spent inside torch.profiler's own stop() and start() (the rest is the agent's reading)."""
        steps = self._steps_in_session
        self._in_torch_ns = 0
        events = self.stop(recorder)
        if events:
            self._session_steps = max(1, steps * self._events_per_session // events)
        self._start_profiler(continuing=True)
        return self._in_torch_ns

    def stop(self, recorder: Recorder) -> int:
        """Stop torch.profiler and write its events; returns how many it gave. A ``buffer`` record says
        what the session held in this process: the RSS and the heap's bytes in use (``heap.in_use``) before its stop and
        after its events are freed (with the settings that sized them), so the advisor judges the job's
        memory net of it."""
        prof, self._prof, self.active = self._prof, None, False
        if prof is None:
            return 0
        stopped, held, heap_held = time.time_ns(), heap.rss(), heap.in_use()
        began = time.perf_counter_ns()
        if self.cuda:
            _detaching_cupti(prof.stop)
        else:
            _without_profiler_warnings(prof.stop)
        self._in_torch_ns += time.perf_counter_ns() - began
        results = prof.profiler.kineto_results
        events = results.events()
        count: int = len(events)
        host = self._emit(recorder, events, self._clock_offset(results.trace_start_ns()))
        # The profile object sits in reference cycles that only a full garbage collection frees, and
        # with it the C++ events (~10 KB each): drop them now, or every hand-over's stay in memory.
        prof.profiler.kineto_results = None
        prof.profiler = None
        del events, results, prof
        recorder.flush()  # the emitted batches leave memory too before the RSS is read again
        self._compare_steps(host)
        del host  # the session's host columns too (~80 bytes an event): held at the reading, they read as the job's growth
        heap.return_freed_memory()
        buffer: dict[str, Any] = {records.KIND: records.BUFFER, "start": self._sync[0], "stop": stopped, "events": count, "rss_before": held,
                  "rss_after": heap.rss(), "record_shapes": self._shapes_because is not None,
                  "profile_memory": bool(self.options.profile_memory), "first_step": self._first_step,
                  "steps": self._steps_in_session, "inputs": self._inputs}
        if self._shapes_because is not None:
            buffer["shapes_because"] = self._shapes_because
        heap_freed = heap.in_use()
        if heap_held is not None and heap_freed is not None:  # exact: bytes in use, whatever the heap kept of the freed
            buffer.update(heap_before=heap_held, heap_after=heap_freed)
        recorder.record(buffer)
        return count

    def _compare_steps(self, host: list[HostBatch]) -> None:
        """Each step's signature (its host ops' names in start order, its model input shapes): kept from a
        session with shapes; from one without, a signature never kept makes the next session record them."""
        if not self.options.record_shapes or self._shapes_every <= 1 or not host:
            return
        import numpy as np

        starts = np.concatenate([np.asarray(s, dtype=np.int64) for *_, s in host])
        numbers = np.concatenate([np.array([self._names.setdefault(name, len(self._names)) for name in table], dtype=np.int32)[
            np.asarray(codes, dtype=np.intp)] for codes, table, _ in host])  # the batches' codes, numbered across sessions
        order = np.argsort(starts, kind="stable")
        names, starts = numbers[order], starts[order]
        ends = np.sort(np.array(self.step_ends, dtype=np.int64))
        bounds = np.searchsorted(starts, ends, side="right").tolist()
        changes = [step for step, _ in self._inputs]
        for i, (lo, hi) in enumerate(zip([0] + bounds, bounds)):
            step = self._first_step + i
            at = bisect.bisect_right(changes, step) - 1
            signature = hash((names[lo:hi].tobytes(), self._inputs[at][1] if at >= 0 else None))
            if self._shapes_because is not None:
                self._seen.add(signature)
            elif signature not in self._seen:
                self._shapes_next = f"step {step}'s op sequence or input shapes were not seen in a session with shapes"
                return

    def _emit(self, recorder: Recorder, events: Any, offset: int) -> list[HostBatch]:
        """Write the events as ``ops`` batches (and ``mem`` / ``comm`` records); returns the host batches'
        coded names and starts, for the step signatures."""
        cuda = self.cuda
        shapes_on = self._shapes_because is not None
        if not cuda and not self.options.profile_memory and len(events):
            try:
                columns = _host_columns(events, shapes_on)
            except Exception:  # an event that cannot be read: one by one below, skipping only it
                columns = None
            if columns is not None:
                return self._emit_host(recorder, columns, offset)
        batches: dict[str, Batch] = {}
        memory: list[tuple[int, int, bool]] = []  # (ts, bytes allocated (negative: freed), on the GPU)
        comm: list[Collective] = []
        host: list[HostBatch] = []  # for the step signatures
        links = _Links() if cuda else None
        skipped = 0
        for event in events:
            try:  # read the whole row before appending, so a bad event never misaligns the columns
                name = event.name()
                if name == "[memory]":
                    memory.append((event.start_ns(), event.nbytes(), cuda and event.device_type().name == "CUDA"))
                    continue
                if event.is_hidden_event() or name.startswith(ANNOTATIONS_NOT_OPS) or name == "[OutOfMemory]":
                    continue
                on_gpu = cuda and event.device_type().name == "CUDA"
                row = (name, event.start_ns(), event.duration_ns(),
                       event.device_index() if on_gpu else event.start_thread_id(), event.flops() if shapes_on else 0)
                stream = event.device_resource_id() if on_gpu else None
                if links is not None:
                    links.see(event, name, row[1], on_gpu)
                if name.startswith(COMM_OP_PREFIXES):
                    comm.append((name, row[1], row[2], event.shapes(), event.dtypes()))
                shape = orjson.dumps(event.shapes()).decode() if shapes_on else None
            except Exception:  # e.g. UnicodeDecodeError on one odd name: skip the event, keep the window
                skipped += 1
                continue
            device = "cuda" if on_gpu else "cpu"
            batch = batches.get(device)
            if batch is None:
                batch = batches[device] = _new_batch(shapes_on, device)
            batch["name"].append(row[0])
            batch["start"].append(row[1])
            batch["dur"].append(row[2])
            batch["tid"].append(row[3])
            if shapes_on:
                batch["flops"].append(float(row[4]) if row[4] else None)
            if on_gpu:
                batch["stream"].append(stream)
            if shapes_on:
                batch["shape"].append(shape)
            if len(batch["start"]) >= OPS_CHUNK:
                del batches[device]
                flushed = _flush_batch(recorder, batch, offset)
                if not on_gpu:
                    host.append(flushed)
        for device, batch in batches.items():
            flushed = _flush_batch(recorder, batch, offset)
            if device == "cpu":
                host.append(flushed)
        if memory:
            self._emit_memory(recorder, memory, offset)
        if comm:
            self._emit_comm(recorder, comm, offset)
        if links is not None and links.kernels:
            recorder.record(links.record(offset))
        if skipped:
            recorder.record({records.KIND: records.NOTE, "text": f"torch.profiler: {skipped} unreadable events were skipped"})
        return host

    def _emit_host(self, recorder: Recorder, columns: dict[str, Any], offset: int) -> list[HostBatch]:
        """``_emit`` for host-only events read as whole columns (``_host_columns``)."""
        comm = columns.pop("comm")
        count = len(columns["start"])
        host = [_flush_batch(recorder, {k: v[lo:lo + OPS_CHUNK] if count > OPS_CHUNK else v for k, v in columns.items()}, offset)
                for lo in range(0, count, OPS_CHUNK)]
        if comm:
            self._emit_comm(recorder, comm, offset)
        return host

    def _emit_comm(self, recorder: Recorder, comm: list[Collective], offset: int) -> None:
        """``comm`` records for the collectives no Python wrapper saw (DDP's gradient all-reduce).

        A profiler collective a wrapper timed (``_timed_by_wrappers``) is that call, already recorded (an
        ``async_op=True`` call may run after its wrapper returned and then shows twice: once as the launch,
        once from the profiler). Its step is found from the window's step boundaries.
        """
        ends = sorted(self.step_ends)
        named = [(name.split(":", 1)[1], start + offset, dur, shapes, dtypes) for name, start, dur, shapes, dtypes in comm]
        timed = _timed_by_wrappers(sorted(self.wrapped_comm), [(start, op) for op, start, *_ in named])
        for n, (op, start, dur, shapes, dtypes) in enumerate(named):
            if n in timed:
                continue
            recorder.record({records.KIND: records.COMM, "step": self._first_step + bisect.bisect_right(ends, start),
                            "name": op, "start": start, "dur": dur,
                            "bytes": _tensor_bytes(shapes, dtypes), "source": records.COMM_FROM_PROFILER})

    def _clock_offset(self, trace_start_ns: int) -> int:
        """Kineto stamps epoch ns in torch 2.x (checked: its trace start falls inside our start() call);
        should a build use another clock, the ops are shifted onto ``time.time_ns``."""
        before, after = self._sync
        if before - 1_000_000 <= trace_start_ns <= after + 1_000_000:
            return 0
        log.warn_once("torch.profiler's clock differs from time.time_ns(); op times are shifted to the wall clock")
        return (before + after) // 2 - trace_start_ns

    def _emit_memory(self, recorder: Recorder, memory: list[tuple[int, int, bool]], offset: int) -> None:
        """Allocated bytes over time from the allocator's [memory] events, the peak of each time bucket.

        CUDA counts from ``torch.cuda.memory_allocated()`` at the window start; the CPU allocator
        keeps no total, so CPU values are bytes allocated since the window start (may go negative
        when tensors from before the window are freed).
        """
        import numpy as np

        for on_gpu, device in ((False, "cpu"), (True, "cuda")):
            rows = [(ts, delta) for ts, delta, gpu in memory if gpu == on_gpu]
            if not rows:
                continue
            data = np.array(rows, dtype=np.int64)
            data = data[np.argsort(data[:, 0], kind="stable")]
            ts = data[:, 0] + offset
            allocated = np.cumsum(data[:, 1]) + self._mem_base[device]
            self._mem_base[device] = int(allocated[-1])
            width = max(MEM_BUCKET_NS, (int(ts[-1]) - int(ts[0])) // MEM_MAX_SAMPLES + 1)
            bucket = (ts - ts[0]) // width
            first = np.flatnonzero(np.append(True, bucket[1:] != bucket[:-1]))
            peaks = np.maximum.reduceat(allocated, first)
            for when, value in zip(ts[first].tolist(), peaks.tolist()):
                recorder.record({records.KIND: records.MEM, "ts": when, "allocated": value, "device": device})


class _Links:
    """Which runtime call queued each device activity, and from which host op, by kineto's correlation ids: a
    kernel (or memcpy, memset) and the runtime call that launched it share a ``correlation_id``; both carry the
    launching op's own id as ``linked_correlation_id``. Read while the events stream by, written as one ``launch``
    record a session (``records.Launch``); builds of torch without these ids give an empty record."""

    def __init__(self) -> None:
        self.kernels: list[tuple[int, int, int]] = []  # (start, correlation id, launching op's id)
        self._launches: dict[int, int] = {}  # runtime call's correlation id -> its start
        self._ops: dict[int, str] = {}  # host op's id -> its name
        self._readable = True

    def see(self, event: Any, name: str, start: int, on_gpu: bool) -> None:
        if not self._readable:
            return
        try:
            correlation, linked = event.correlation_id(), event.linked_correlation_id()
        except AttributeError:  # a torch build without them
            self._readable = False
            return
        if on_gpu:
            self.kernels.append((start, correlation, linked))
        elif is_runtime_call(name):
            self._launches[correlation] = start
        else:
            self._ops[correlation] = name

    def record(self, offset: int) -> dict[str, Any]:
        names = [self._ops.get(linked, "") for _, _, linked in self.kernels]
        codes, table = coded(names)
        blank = table.index("") if "" in table else -1
        return {records.KIND: records.LAUNCH, "start": [start + offset for start, _, _ in self.kernels],
                "launched": [self._launches[c] + offset if c in self._launches else 0 for _, c, _ in self.kernels],
                "op_codes": [-1 if code == blank else code for code in codes], "op_table": table}


def _positive_setting(name: str, default: int, unit: str) -> int:
    """The environment variable NAME as a positive whole number of UNIT, else DEFAULT (a bad value said once)."""
    value = os.environ.get(name)
    if value is None:
        return default
    if value.isdigit() and int(value) > 0:
        return int(value)
    log.warn_once(f"{name}={value!r} is not a positive whole number of {unit}; using {default}")
    return default


def _host_columns(events: Any, shapes_on: bool) -> dict[str, Any]:
    """The host events' columns, each read by one ``map`` over the events (the per-event Python loop costs
    as much again as torch's own stop() without shapes): name, start, dur, tid, with shape and flops when
    ``shapes_on``, and ``comm``, the collectives' rows. Raises where an event cannot be read."""
    import numpy as np

    kind = type(events[0])
    names = list(map(kind.name, events))
    drop = {n for n in set(names) if n.startswith(ANNOTATIONS_NOT_OPS) or n in ("[OutOfMemory]", "[memory]")}
    skip = np.fromiter(map(kind.is_hidden_event, events), dtype=bool, count=len(events))
    if drop:
        skip |= np.fromiter(map(drop.__contains__, names), dtype=bool, count=len(names))
    keep = np.flatnonzero(~skip).tolist() if skip.any() else None
    if keep is not None:
        events = [events[i] for i in keep]
        names = [names[i] for i in keep]
    columns: dict[str, Any] = {"name": names, "start": list(map(kind.start_ns, events)), "dur": list(map(kind.duration_ns, events)),
                               "tid": list(map(kind.start_thread_id, events))}
    if shapes_on:
        columns["shape"] = [orjson.dumps(shape).decode() for shape in map(kind.shapes, events)]
        columns["flops"] = [float(f) if f else None for f in map(kind.flops, events)]
    comm_names = {n for n in set(names) if n.startswith(COMM_OP_PREFIXES)}
    columns["comm"] = [(names[i], columns["start"][i], columns["dur"][i], events[i].shapes(), events[i].dtypes())
                       for i in range(len(names)) if names[i] in comm_names] if comm_names else []
    return columns


def _input_shapes(args: object, depth: int = 0) -> str:
    """A short text of the shapes and dtypes of the tensors in ``args`` (lists, tuples and dicts two levels deep)."""
    shape = getattr(args, "shape", None)
    if shape is not None and hasattr(args, "dtype"):
        return f"{args.dtype}{list(shape)}"
    if depth < 2 and isinstance(args, (list, tuple)):
        return "(" + ",".join(_input_shapes(a, depth + 1) for a in args) + ")"
    if depth < 2 and isinstance(args, dict):
        return "{" + ",".join(f"{k}:{_input_shapes(v, depth + 1)}" for k, v in args.items()) + "}"
    return type(args).__name__


def _timed_by_wrappers(wrapped: list[tuple[int, int, str]], events: list[tuple[int, str]]) -> set[int]:
    """Which profiler collectives (``events``: (start, name), on the wrappers' clock) are calls a Python wrapper timed
    (``wrapped``: (start, end, name), sorted): those that start inside one, whatever their name (all_gather_object
    runs two all_gathers); then, for a wrapped call with none inside it, the nearest one of its name within
    CLOCK_SLACK_NS before or after it, which the two clocks' drift moved out (one each: a C++ collective next to
    it, as DDP's, stays its own)."""
    starts = [w[0] for w in wrapped]
    holder = []  # the wrapped call each event starts inside, or -1
    for start, _ in events:
        i = bisect.bisect_right(starts, start) - 1
        holder.append(i if i >= 0 and start <= wrapped[i][1] else -1)
    timed = {n for n, i in enumerate(holder) if i >= 0}
    empty = set(range(len(wrapped))) - set(holder)
    moved = []  # (distance, event, call) of each event outside every call and an empty call of its name beside it
    for n, (start, name) in enumerate(events):
        if holder[n] >= 0:
            continue
        i = bisect.bisect_right(starts, start) - 1
        for call, distance in ((i, start - wrapped[i][1] if i >= 0 else 0), (i + 1, starts[i + 1] - start if i + 1 < len(wrapped) else 0)):
            if call in empty and wrapped[call][2] == name and distance <= CLOCK_SLACK_NS:
                moved.append((distance, n, call))
    for _, n, call in sorted(moved):
        if call in empty and n not in timed:
            empty.discard(call)
            timed.add(n)
    return timed


def _tensor_bytes(shapes: list[list[int]], dtypes: list[str]) -> int:
    """Bytes of a profiled op's tensor inputs from their shapes and dtype names (0 if a dtype is unknown)."""
    total = 0
    for shape, dtype in zip(shapes, dtypes):
        if not shape:
            continue
        size = DTYPE_BYTES.get(dtype)
        if size is None:
            return 0
        count = 1
        for dim in shape:
            count *= dim
        total += count * size
    return total


def _new_batch(shapes_on: bool, device: str) -> Batch:
    batch: Batch = {"name": [], "start": [], "dur": [], "tid": []}
    if shapes_on:
        batch["shape"], batch["flops"] = [], []
    if device == "cuda":
        batch["stream"] = []
    return batch


def _flush_batch(recorder: Recorder, batch: Batch, offset: int) -> HostBatch:
    """Record ``batch`` as one ``ops`` record; returns its names as coded there and its starts (the step
    signatures read them: the names are coded once)."""
    if not batch["start"]:
        return [], [], []
    record: dict[str, Any] = {records.KIND: records.OPS, "source": "torch.profiler", "device": "cuda" if "stream" in batch else "cpu"}
    codes, table = coded(batch.pop("name"))
    stable = [ADDRESS.sub("", name) for name in table]
    if stable != table:  # names that differ only by an address are one op
        merged, table = coded(stable)
        codes = [merged[code] for code in codes]
    record.update(name_codes=codes, name_table=table, type_codes=codes, type_table=table)  # torch's op name is its type
    record.update(batch)
    if offset:
        record["start"] = [s + offset for s in batch["start"]]
    recorder.record(record)
    return codes, table, batch["start"]
