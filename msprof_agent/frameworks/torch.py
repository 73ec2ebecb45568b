"""PyTorch integration: step boundaries from the run loop, ops from torch.profiler for the window.

Installed by the post-import hook on ``import torch``; the user's script is not changed.

Step stream (always on, cheap):
- boundary = end of ``step()`` of the *primary* optimizer (the first instance that ever stepped),
  so GANs with two optimizers and gradient accumulation count one step per primary step;
- data wait = time inside ``DataLoader.__iter__`` / the loader iterator's ``__next__``;
- forward start = the first module forward of a step (a global pre-hook that removes itself once
  it fired, so modules run on torch's hook-free fast path for the rest of the step);
- backward end = the end of the last ``torch.autograd.backward`` (``Tensor.backward`` calls it).
Fetches and forwards with grad disabled or a module in eval mode are evaluation, not training:
they neither open steps nor mark forward starts, so an eval loop between epochs adds no step.
Until an optimizer first steps, though, such forwards are an inference loop: each forward of the
root module (the first one run) is one step, from its start to its return, which a note says.
Profiler hand-overs happen as a step closes, before the user's code after it runs: on the return
of the optimizer class's ``step`` (wrapped as ``Optimizer._patch_step_function`` hooks each class;
the post-step hook itself runs inside torch's ``record_function`` span, and stopping the profiler
there corrupts memory), or in the root module's forward hook. They are recorded as pauses: the
user's host work after a step stays in the next step's interval.

Every hook catches its own errors (``log.report_error``): the agent never breaks training.
"""
import bisect
import os
import re
import sys
import threading
import time
import weakref

import orjson

from .. import environment, log
from ..store import coded
from .patching import Patches, after_call

OPS_CHUNK = 65536
# torch.profiler keeps every event of a session until its stop(), at ~5 KB each with shapes (6 GB
# for the 1.1 M events of 300 ResNet steps), so a window is collected as a series of profiler
# sessions of about this many events, handed over between two steps.
SESSION_EVENTS = 50_000
FIRST_SESSION_STEPS = 1  # the first session measures the events per step: one step, however big
MEM_BUCKET_NS = 1_000_000  # at most one memory sample per millisecond and device,
MEM_MAX_SAMPLES = 20_000  # and at most this many per window (wider buckets on long windows)
COMM_FUNCTIONS = (
    "all_reduce", "broadcast", "barrier", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all", "all_to_all_single",
    "send", "recv", "all_gather_object", "broadcast_object_list",
)

# Collectives that run inside C++ (DDP's reducer) reach no Python wrapper; the profiler sees them.
COMM_OP_PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:", "xccl:")
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

_state = None  # the installed _Integration, or None


def install(session):
    """Patch torch's run loop for ``session`` and attach a torch.profiler device session (idempotent)."""
    global _state
    if _state is not None:
        return _state
    import torch

    device = TorchDeviceSession(session.steps)
    if not session.attach("torch", device=device, torch_version=torch.__version__, nested_ops=True,
                          device_target="GPU" if _cuda_in_use() else "CPU"):
        return None  # another framework owns the step stream
    _state = _Integration(session, device)
    _state.install()
    return _state


def _cuda_in_use():
    """True once the script itself initialised CUDA. Never ``torch.cuda.is_available()``: that
    initialises the driver in this process, and a later ``fork`` could then not use CUDA."""
    import torch

    return torch.cuda.is_initialized()


def uninstall():
    """Remove every hook and wrapper this module put in place (wrappers replaced by others are left)."""
    global _state
    if _state is not None:
        _state.uninstall()
        _state = None


class _Integration:
    def __init__(self, session, device):
        import torch

        self.session = session
        self.device = device
        self.steps = session.steps
        self._grad_enabled = torch.is_grad_enabled
        self._primary = None  # weakref to the primary optimizer
        self._handles = []
        self._fp_hook = None
        self._root = None  # weakref to the root module of an inference loop
        self._inferring = False  # a root forward of an inference loop is running
        self._handover_from = None  # end of the step whose close asks for a hand-over, until it happens
        self._patches = Patches()
        self._in_comm = threading.local()

    # -- installing ------------------------------------------------------------------------------
    def install(self):
        import torch
        import torch.nn.modules.module as module_mod
        import torch.optim.optimizer as optimizer_mod
        import torch.utils.data.dataloader as dataloader_mod

        self._handles.append(optimizer_mod.register_optimizer_step_post_hook(self._after_optimizer_step))
        self._fp_hook = _ReArmableHook(module_mod.register_module_forward_pre_hook, self._forward_pre_hook)
        # torch wraps each optimizer class's ``step`` once (``_patch_step_function``); we wrap that, to act on its return
        step_returned = after_call(lambda _optimizer: self._hand_over_if_due(), "handing the profiler's events over")
        self._patches.wrap(optimizer_mod.Optimizer, "_patch_step_function", after_call(
            lambda optimizer: self._patches.wrap(type(optimizer), "step", step_returned), "instrumenting the optimizer's step"))
        self._patches.wrap(dataloader_mod._BaseDataLoaderIter, "__next__", self._timed_fetch)
        self._patches.wrap(dataloader_mod.DataLoader, "__iter__", self._timed_fetch)
        self._patches.wrap(torch.autograd, "backward", after_call(self._backward_ended, "marking the backward end"))
        self._patch_record_function()
        if torch.distributed.is_available():
            for name in COMM_FUNCTIONS:
                if callable(getattr(torch.distributed, name, None)):
                    self._patches.wrap(torch.distributed, name, self._comm_wrapper(name))

    def _patch_record_function(self):
        """The user's ``torch.profiler.record_function`` ranges as mstx ranges (domain "default"); torch's
        own (Optimizer.step#..., enumerate(DataLoader)#...) are opened from torch's modules and left out."""
        from torch.autograd.profiler import record_function

        from ..collectors.mstx import MstxRecorder

        recorder = MstxRecorder(self.session)

        def enter(wrapped, instance, args, kwargs):
            out = wrapped(*args, **kwargs)
            try:
                if not sys._getframe(1).f_globals.get("__name__", "").startswith("torch"):
                    instance._msprof_range = recorder.range_start(instance.name, "default")
            except Exception as exc:
                log.report_error("recording a record_function range", exc)
            return out

        def leave(wrapped, instance, args, kwargs):
            try:
                range_id = vars(instance).pop("_msprof_range", None)
                if range_id is not None:
                    recorder.range_end(range_id, "default")
            except Exception as exc:
                log.report_error("recording a record_function range", exc)
            return wrapped(*args, **kwargs)

        self._patches.wrap(record_function, "__enter__", enter)
        self._patches.wrap(record_function, "__exit__", leave)

    def uninstall(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._fp_hook is not None:
            self._fp_hook.remove()
        self._patches.remove_all()

    # -- forward start ---------------------------------------------------------------------------
    def _forward_pre_hook(self, module, _args):
        """The first training forward of a step: the outermost module's pre-hook runs before its children's."""
        try:
            if self.session.disabled:
                return None
            if not module.training or not self._grad_enabled():
                if self._primary is None and self._root is None:
                    self._adopt_root(module)
                return None
            self.steps.mark_fp(time.time_ns())
            self._fp_hook.disarm()
        except Exception as exc:
            log.report_error("marking the forward start", exc)
        return None

    def _adopt_root(self, module):
        """The first evaluation forward before any optimizer step: this module's forwards may be an
        inference loop's steps. Its own hooks time them, so the global hook can stay disarmed."""
        self._root = weakref.ref(module)
        self._handles.append(module.register_forward_pre_hook(self._root_forward_begins))
        self._handles.append(module.register_forward_hook(self._root_forward_ends))
        self._root_forward_begins(module, None)

    def _root_forward_begins(self, module, _args):
        try:
            self._inferring = (self._primary is None and not self.session.disabled
                               and (not module.training or not self._grad_enabled()))
            if self._inferring:
                self._fp_hook.disarm()
                self.steps.mark_fp(time.time_ns())
        except Exception as exc:
            log.report_error("marking an inference step's start", exc)

    def _root_forward_ends(self, module, _args, _output):
        if not self._inferring:
            return None
        self._inferring = False
        try:
            now = time.time_ns()
            if self.steps.completed == 0:
                self.session.record({"k": "note", "ts": now, "text": "inference loop (no optimizer step): one step per "
                                     f"forward of the root module {type(module).__name__}"})
            self._step_ends(now)
            self._hand_over_if_due()
        except Exception as exc:
            log.report_error("closing an inference step", exc)
        return None

    # -- data wait, backward end, step boundary ----------------------------------------------------
    def _step_ends(self, now):
        """Close the step at ``now``; a full profiler session is handed over before user code runs."""
        if self.device.active:  # before close(): closing the last window step stops the device session
            self.device.step_ended(now)
        self.steps.open(now)
        self.steps.close(now)
        self._fp_hook.arm()
        if self.device.handover_due:
            self._handover_from = now

    def _hand_over_if_due(self):
        """The hand-over a step's close asked for: a recorded pause from that close on, in no step."""
        began, self._handover_from = self._handover_from, None
        if began is None or not self.device.handover_due or self.steps.current is not None:
            return
        try:
            self.device.hand_over(self.session)
        except Exception as exc:
            log.report_error("handing the profiler's events over", exc)
        resumed = time.time_ns()
        self.session.record({"k": "pause", "start": began, "end": resumed, "what": "torch.profiler hand-over"})
        self.steps.start_next_at(resumed)

    def _timed_fetch(self, wrapped, _instance, args, kwargs):
        if self.session.disabled or not self._grad_enabled():
            return wrapped(*args, **kwargs)
        start = time.time_ns()
        result = wrapped(*args, **kwargs)
        end = time.time_ns()
        try:
            self.steps.data_wait(start, end)
        except Exception as exc:
            log.report_error("timing the data loader", exc)
        return result

    def _backward_ended(self, _instance):
        if not self.session.disabled:
            self.steps.mark_bp(time.time_ns())

    def _after_optimizer_step(self, optimizer, _args, _kwargs):
        try:
            now = time.time_ns()
            primary = self._primary() if self._primary is not None else None
            if primary is None:  # first optimizer ever, or the primary one was garbage-collected
                self._primary = weakref.ref(optimizer)
                if _cuda_in_use() and not self.session.disabled:
                    import torch

                    self.session.add_meta(device_target="GPU", device_name=torch.cuda.get_device_name())
            elif primary is not optimizer:
                return
            if self.session.disabled:
                return
            self._step_ends(now)
        except Exception as exc:
            log.report_error("closing a training step", exc)

    # -- communication -----------------------------------------------------------------------------
    def _comm_wrapper(self, name):
        def timed_comm(wrapped, _instance, args, kwargs):
            if self.session.disabled or getattr(self._in_comm, "busy", False):
                return wrapped(*args, **kwargs)  # nested calls (all_gather_object -> all_gather) count once
            self._in_comm.busy = True
            start = time.time_ns()
            try:
                return wrapped(*args, **kwargs)
            finally:
                end = time.time_ns()
                self._in_comm.busy = False
                try:
                    if self.device.active:
                        self.device.wrapped_comm.append((start, end))
                    record = {"k": "comm", "step": self.steps.completed + 1, "name": name,
                              "start": start, "dur": end - start, "bytes": _payload_bytes(args, kwargs)}
                    if kwargs.get("async_op"):
                        record["async"] = True  # the time is the launch only; the wait happens in Work.wait()
                    self.session.record(record)
                except Exception as exc:
                    log.report_error("timing a communication call", exc)
        return timed_comm


class _ReArmableHook:
    """A global torch hook registered once, then put into and taken out of torch's hook dict under
    its handle's id: registering anew every step would build a ``RemovableHandle`` (weak references,
    a class counter) per step, a cost on the training thread's critical path."""

    def __init__(self, register, hook):
        self._hook = hook
        self._handle = register(hook)
        self._hooks = self._handle.hooks_dict_ref()
        self._removed = False

    def arm(self):
        if not self._removed:
            self._hooks[self._handle.id] = self._hook

    def disarm(self):
        self._hooks.pop(self._handle.id, None)

    def remove(self):
        self._removed = True
        self.disarm()


def _payload_bytes(args, kwargs):
    """Bytes of the tensors handed to a collective: the first tensor argument or list of tensors."""
    import torch

    values = list(args) + [kwargs.get("tensor"), kwargs.get("tensor_list"), kwargs.get("input")]
    for value in values:
        if isinstance(value, torch.Tensor):
            return value.numel() * value.element_size()
        if isinstance(value, (list, tuple)) and value and all(isinstance(t, torch.Tensor) for t in value):
            return sum(t.numel() * t.element_size() for t in value)
    return 0


_kineto_level_chosen = False


def _start_quietly(prof):
    """Start ``prof`` with kineto's lines off, so the job's output stays its own: the level is set
    for kineto's first start only (it reads it then), and never where the user chose one; the
    variable is removed again, so the job's children do not inherit it."""
    global _kineto_level_chosen
    if _kineto_level_chosen or environment.KINETO_LOG_LEVEL in os.environ:
        prof.start()
        return
    _kineto_level_chosen = True
    os.environ[environment.KINETO_LOG_LEVEL] = KINETO_QUIET_LEVEL
    try:
        prof.start()
    finally:
        os.environ.pop(environment.KINETO_LOG_LEVEL, None)


_fork_guard_installed = False


def _guard_fork_children_against_kineto_exit():
    """Once kineto has run, a child forked from this process hangs in C exit handlers.

    kineto's config thread waits on a condition variable; in a fork child that thread is gone and
    glibc's ``pthread_cond_destroy`` in kineto's static destructor waits for it forever (seen with
    torch 2.13 on a plain ``os.fork()`` child that calls ``sys.exit``). DataLoader workers leave with
    ``os._exit`` and never get there. For any other fork child we run its atexit handlers, flush, and
    leave with ``os._exit`` and the status the child chose, skipping only the C destructors.
    """
    global _fork_guard_installed
    if not _fork_guard_installed:
        _fork_guard_installed = True
        os.register_at_fork(after_in_child=_exit_child_without_c_destructors)


def _exit_child_without_c_destructors():
    import atexit
    import sys

    chosen = {"code": None}
    original_exit = sys.exit

    def remembering_exit(code=None):
        chosen["code"] = code
        original_exit(code)

    def leave():
        atexit.unregister(leave)
        atexit._run_exitfuncs()  # the child's other handlers still run, in their order
        code = chosen["code"]
        if code is None:
            status = 1 if getattr(sys, "last_value", None) is not None else 0
        elif isinstance(code, int):
            status = code
        else:
            sys.stderr.write(f"{code}\n")
            status = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)

    sys.exit = remembering_exit
    atexit.register(leave)


class TorchDeviceSession:
    """torch.profiler for the op-collection window; the events go out as raw ``ops`` / ``mem`` batches.

    ``key_averages()`` and the profiler's Python event parsing are avoided: on a long window they
    take minutes and gigabytes. Instead the kineto result's events are read once, flat, and streamed
    into column batches. All ops are kept (nested ``aten::`` calls included, no parent links), so
    counts per op name equal torch.profiler's own table.
    """

    def __init__(self, steps):
        self.options = None  # the recording window's, from start()
        self._session_events = _session_events()
        self.cuda = False  # decided at start(): CUDA activity only where the script uses CUDA
        self._steps = steps
        self.step_ends = []  # boundaries of the window's steps, to number the collectives found in it
        self.wrapped_comm = []  # (start, end) of calls the Python wrappers timed already
        self._first_step = 1
        self._session_steps = FIRST_SESSION_STEPS  # steps per profiler session, sized from the last one
        self._steps_in_session = 0
        self._prof = None
        self._sync = None
        self._mem_base = {"cpu": 0, "cuda": 0}  # allocated bytes where the next profiler session's events start

    def start(self, options):
        """Start torch.profiler for a window with the window's OPTIONS."""
        self.options = options
        self._start_profiler(continuing=False)

    def _start_profiler(self, continuing):
        """A profiler session for the window, or (``continuing``) its next one after a hand-over."""
        if not self.options.op_time:
            return  # torch.profiler has nothing but ops to give: data waits come from the run loop
        import torch
        from torch.profiler import ProfilerActivity, profile

        self.cuda = _cuda_in_use()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        # with_stack is the agent's own stack sampler (collectors/stacks.py): torch's Python stack events
        # made a 1.7 s training loop take 22 s and named ops after Python objects and their addresses.
        self._prof = profile(activities=activities, record_shapes=self.options.record_shapes,
                             profile_memory=self.options.profile_memory, with_flops=self.options.record_shapes)
        if not continuing:
            self._mem_base = {"cpu": 0, "cuda": torch.cuda.memory_allocated() if self.cuda and self.options.profile_memory else 0}
        self.step_ends, self.wrapped_comm = [], []
        self._steps_in_session = 0
        self._first_step = self._steps.completed + 1
        before = time.time_ns()
        _start_quietly(self._prof)
        self._sync = (before, time.time_ns())
        _guard_fork_children_against_kineto_exit()

    @property
    def active(self):
        return self._prof is not None

    def step_ended(self, now):
        self.step_ends.append(now)
        self._steps_in_session += 1

    @property
    def handover_due(self):
        return self._prof is not None and self._steps_in_session >= self._session_steps

    def hand_over(self, session):
        """Stop the profiler session, write its events, start the next one, sized to ~SESSION_EVENTS."""
        steps = self._steps_in_session
        events = self.stop(session)
        self._session_steps = max(1, steps * self._session_events // max(events, 1))
        self._start_profiler(continuing=True)

    def stop(self, session):
        """Stop torch.profiler and write its events; returns how many it gave."""
        prof, self._prof = self._prof, None
        if prof is None:
            return 0
        prof.stop()
        results = prof.profiler.kineto_results
        events = results.events()
        self._emit(session, events, self._clock_offset(results.trace_start_ns()))
        # The profile object sits in reference cycles that only a full garbage collection frees, and
        # with it the C++ events (~10 KB each): drop them now, or every hand-over's stay in memory.
        prof.profiler.kineto_results = None
        prof.profiler = None
        return len(events)

    def _emit(self, session, events, offset):
        cuda = self.cuda
        shapes_on = bool(self.options.record_shapes)
        batches = {}
        memory, comm = [], []
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
                       event.device_index() if on_gpu else event.start_thread_id(), event.flops())
                stream = event.device_resource_id() if on_gpu else None
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
            batch["flops"].append(float(row[4]) if row[4] else None)
            if on_gpu:
                batch["stream"].append(stream)
            if shapes_on:
                batch["shape"].append(shape)
            if len(batch["start"]) >= OPS_CHUNK:
                del batches[device]
                _flush_batch(session, batch, offset)
        for batch in batches.values():
            _flush_batch(session, batch, offset)
        if memory:
            self._emit_memory(session, memory, offset)
        if comm:
            self._emit_comm(session, comm, offset)
        if skipped:
            session.record({"k": "note", "text": f"torch.profiler: {skipped} unreadable events were skipped"})

    def _emit_comm(self, session, comm, offset):
        """``comm`` records for the collectives no Python wrapper saw (DDP's gradient all-reduce).

        A profiler collective that starts inside a wrapped call is that call, already recorded (an
        ``async_op=True`` call may run after its wrapper returned and then shows twice: once as
        the launch, once from the profiler). Its step is found from the window's step boundaries.
        """
        wrapped = sorted(self.wrapped_comm)
        wrapped_starts = [w[0] for w in wrapped]
        ends = sorted(self.step_ends)
        for name, start, dur, shapes, dtypes in comm:
            start += offset
            i = bisect.bisect_right(wrapped_starts, start) - 1
            if i >= 0 and start <= wrapped[i][1]:
                continue
            session.record({"k": "comm", "step": self._first_step + bisect.bisect_right(ends, start),
                            "name": name.split(":", 1)[1], "start": start, "dur": dur,
                            "bytes": _tensor_bytes(shapes, dtypes), "source": "profiler"})

    def _clock_offset(self, trace_start_ns):
        """Kineto stamps epoch ns in torch 2.x (checked: its trace start falls inside our start() call);
        should a build use another clock, the ops are shifted onto ``time.time_ns``."""
        before, after = self._sync
        if before - 1_000_000 <= trace_start_ns <= after + 1_000_000:
            return 0
        log.warn_once("torch.profiler's clock differs from time.time_ns(); op times are shifted to the wall clock")
        return (before + after) // 2 - trace_start_ns

    def _emit_memory(self, session, memory, offset):
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
                session.record({"k": "mem", "ts": when, "allocated": value, "device": device})


def _session_events():
    value = os.environ.get(environment.TORCH_SESSION_EVENTS)
    if value is None:
        return SESSION_EVENTS
    if value.isdigit() and int(value) > 0:
        return int(value)
    log.warn_once(f"{environment.TORCH_SESSION_EVENTS}={value!r} is not a positive whole number of events; using {SESSION_EVENTS}")
    return SESSION_EVENTS


def _tensor_bytes(shapes, dtypes):
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


def _new_batch(shapes_on, device):
    batch = {"name": [], "start": [], "dur": [], "tid": [], "flops": []}
    if shapes_on:
        batch["shape"] = []
    if device == "cuda":
        batch["stream"] = []
    return batch


def _flush_batch(session, batch, offset):
    if not batch["start"]:
        return
    record = {"k": "ops", "source": "torch.profiler", "device": "cuda" if "stream" in batch else "cpu"}
    codes, table = coded(batch.pop("name"))
    stable = [ADDRESS.sub("", name) for name in table]
    if stable != table:  # names that differ only by an address are one op
        merged, table = coded(stable)
        codes = [merged[code] for code in codes]
    record.update(name_codes=codes, name_table=table, type_codes=codes, type_table=table)  # torch's op name is its type
    record.update(batch)
    if offset:
        record["start"] = [s + offset for s in batch["start"]]
    session.record(record)
