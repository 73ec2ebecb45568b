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

Every hook catches its own errors (``log.report_error``): the agent never breaks training.
"""
import threading
import time
import weakref

import orjson

from .. import log

OPS_CHUNK = 65536
MEM_BUCKET_NS = 1_000_000  # at most one memory sample per millisecond and device
COMM_FUNCTIONS = (
    "all_reduce", "broadcast", "barrier", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all", "all_to_all_single",
    "send", "recv", "all_gather_object", "broadcast_object_list",
)

_state = None  # the installed _Integration, or None


def install(session):
    """Patch torch's run loop for ``session`` and attach a torch.profiler device session (idempotent)."""
    global _state
    if _state is not None:
        return _state
    import torch

    cuda = bool(torch.cuda.is_available())
    device = TorchDeviceSession(session.options, cuda)
    if not session.attach("torch", device=device, torch_version=torch.__version__,
                          device_target="GPU" if cuda else "CPU"):
        return None  # another framework owns the step stream
    _state = _Integration(session)
    _state.install()
    return _state


def uninstall():
    """Remove every hook and wrapper this module put in place (wrappers replaced by others are left)."""
    global _state
    if _state is not None:
        _state.uninstall()
        _state = None


class _Integration:
    def __init__(self, session):
        import torch

        self.session = session
        self.steps = session.steps
        self._grad_enabled = torch.is_grad_enabled
        self._primary = None  # weakref to the primary optimizer
        self._handles = []
        self._fp_handle = None
        self._fp_lock = threading.Lock()
        self._wrapped = []  # (owner, attribute, our FunctionWrapper)
        self._in_comm = threading.local()

    # -- installing ------------------------------------------------------------------------------
    def install(self):
        import torch
        import torch.nn.modules.module as module_mod
        import torch.optim.optimizer as optimizer_mod
        import torch.utils.data.dataloader as dataloader_mod

        self._register_fp = module_mod.register_module_forward_pre_hook
        self._handles.append(optimizer_mod.register_optimizer_step_post_hook(self._after_optimizer_step))
        self._arm_fp()
        self._wrap(dataloader_mod._BaseDataLoaderIter, "__next__", self._timed_fetch)
        self._wrap(dataloader_mod.DataLoader, "__iter__", self._timed_fetch)
        self._wrap(torch.autograd, "backward", self._backward)
        if torch.distributed.is_available():
            for name in COMM_FUNCTIONS:
                if callable(getattr(torch.distributed, name, None)):
                    self._wrap(torch.distributed, name, self._comm_wrapper(name))

    def _wrap(self, owner, attribute, wrapper):
        import wrapt

        current = getattr(owner, attribute)
        if isinstance(current, wrapt.FunctionWrapper) and getattr(current, "_self_msprof", False):
            return  # already ours (module reloaded or installed twice): never wrap twice
        wrapped = wrapt.FunctionWrapper(current, wrapper)
        wrapped._self_msprof = True
        setattr(owner, attribute, wrapped)
        self._wrapped.append((owner, attribute, wrapped))

    def uninstall(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._disarm_fp()
        self._fp_handle = False  # never re-armed after uninstall
        for owner, attribute, wrapped in reversed(self._wrapped):
            if vars(owner).get(attribute) is wrapped:
                setattr(owner, attribute, wrapped.__wrapped__)
        self._wrapped = []

    # -- forward start ---------------------------------------------------------------------------
    def _arm_fp(self):
        with self._fp_lock:
            if self._fp_handle is None:
                self._fp_handle = self._register_fp(self._forward_pre_hook)

    def _disarm_fp(self):
        with self._fp_lock:
            handle, self._fp_handle = self._fp_handle, None
        if handle:
            handle.remove()

    def _forward_pre_hook(self, module, _args):
        """The first training forward of a step: the outermost module's pre-hook runs before its children's."""
        try:
            if self.session.disabled or not module.training or not self._grad_enabled():
                return None
            self.steps.mark_fp(time.time_ns())
            self._disarm_fp()
        except Exception as exc:
            log.report_error("marking the forward start", exc)
        return None

    # -- data wait, backward end, step boundary ----------------------------------------------------
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

    def _backward(self, wrapped, _instance, args, kwargs):
        result = wrapped(*args, **kwargs)
        try:
            if not self.session.disabled:
                self.steps.mark_bp(time.time_ns())
        except Exception as exc:
            log.report_error("marking the backward end", exc)
        return result

    def _after_optimizer_step(self, optimizer, _args, _kwargs):
        try:
            now = time.time_ns()
            primary = self._primary() if self._primary is not None else None
            if primary is None:  # first optimizer ever, or the primary one was garbage-collected
                self._primary = weakref.ref(optimizer)
            elif primary is not optimizer:
                return
            if self.session.disabled:
                return
            self.steps.open(now)
            self.steps.close(now)
            self._arm_fp()
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
                    self.session.record({"k": "comm", "step": self.steps.completed + 1, "name": name,
                                         "start": start, "dur": end - start, "bytes": _payload_bytes(args, kwargs),
                                         "async": bool(kwargs.get("async_op", False))})
                except Exception as exc:
                    log.report_error("timing a communication call", exc)
        return timed_comm


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


class TorchDeviceSession:
    """torch.profiler for the op-collection window; the events go out as raw ``ops`` / ``mem`` batches.

    ``key_averages()`` and the profiler's Python event parsing are avoided: on a long window they
    take minutes and gigabytes. Instead the kineto result's events are read once, flat, and streamed
    into column batches. All ops are kept (nested ``aten::`` calls included, no parent links), so
    counts per op name equal torch.profiler's own table.
    """

    def __init__(self, options, cuda):
        self.options = options
        self.cuda = cuda
        self._prof = None
        self._sync = None
        self._mem_base = 0

    def start(self):
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self._prof = profile(activities=activities, record_shapes=self.options.record_shapes,
                             profile_memory=self.options.profile_memory, with_stack=self.options.with_stack,
                             with_flops=True)
        if self.cuda and self.options.profile_memory:
            self._mem_base = torch.cuda.memory_allocated()
        before = time.time_ns()
        self._prof.start()
        self._sync = (before, time.time_ns())

    def stop(self, session):
        prof, self._prof = self._prof, None
        if prof is None:
            return
        prof.stop()
        try:
            results = prof.profiler.kineto_results
            self._emit(session, results.events(), self._clock_offset(results.trace_start_ns()))
        finally:
            del prof

    def _emit(self, session, events, offset):
        cuda = self.cuda
        shapes_on = bool(self.options.record_shapes)
        batches = {}
        memory = []
        skipped = 0
        for event in events:
            try:
                name = event.name()
                if name == "[memory]":
                    device = "cuda" if cuda and event.device_type().name == "CUDA" else "cpu"
                    memory.append((event.start_ns(), event.nbytes(), device))
                    continue
                if event.is_hidden_event() or name.startswith("ProfilerStep#") or name == "[OutOfMemory]":
                    continue
                device = "cuda" if cuda and event.device_type().name == "CUDA" else "cpu"
                batch = batches.get(device)
                if batch is None:
                    batch = batches[device] = _new_batch(shapes_on, device)
                batch["name"].append(name)
                batch["start"].append(event.start_ns())
                batch["dur"].append(event.duration_ns())
                batch["tid"].append(event.start_thread_id() if device == "cpu" else event.device_index())
                if device == "cuda":
                    batch["stream"].append(event.device_resource_id())
                if shapes_on:
                    shapes = event.shapes()
                    batch["shape"].append(orjson.dumps(shapes).decode() if shapes else "")
                flops = event.flops()
                batch["flops"].append(float(flops) if flops else None)
            except UnicodeDecodeError:  # one undecodable name must not lose the window
                skipped += 1
                continue
            if len(batch["start"]) >= OPS_CHUNK:
                batches.pop(device)
                _flush_batch(session, batch, offset)
        for batch in batches.values():
            _flush_batch(session, batch, offset)
        if memory:
            self._emit_memory(session, memory, offset)
        if skipped:
            session.record({"k": "note", "text": f"torch.profiler: {skipped} events with undecodable names were skipped"})

    def _clock_offset(self, trace_start_ns):
        """Kineto stamps epoch ns in torch 2.x (checked: its trace start falls inside our start() call);
        should a build use another clock, the ops are shifted onto ``time.time_ns``."""
        before, after = self._sync
        if before - 1_000_000 <= trace_start_ns <= after + 1_000_000:
            return 0
        log.warn_once("torch.profiler's clock differs from time.time_ns(); op times are shifted to the wall clock")
        return (before + after) // 2 - trace_start_ns

    def _emit_memory(self, session, memory, offset):
        """Allocated bytes over time from the allocator's [memory] events (CPU: counted from the window start)."""
        import numpy as np

        for device in ("cpu", "cuda"):
            rows = [(ts, delta) for ts, delta, dev in memory if dev == device]
            if not rows:
                continue
            data = np.array(rows, dtype=np.int64)
            data = data[np.argsort(data[:, 0], kind="stable")]
            allocated = np.cumsum(data[:, 1]) + (self._mem_base if device == "cuda" else 0)
            bucket = (data[:, 0] + offset) // MEM_BUCKET_NS
            last = np.append(bucket[1:] != bucket[:-1], True)  # the last sample of each bucket
            for ts, value in zip((data[last, 0] + offset).tolist(), allocated[last].tolist()):
                session.record({"k": "mem", "ts": ts, "allocated": value, "device": device})


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
    record = {"k": "ops", "source": "torch.profiler", "device": "cuda" if "stream" in batch else "cpu",
              "type": batch["name"]}
    record.update(batch)
    if offset:
        record["start"] = [s + offset for s in batch["start"]]
    session.record(record)
