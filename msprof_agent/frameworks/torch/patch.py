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
Profiler hand-overs (of ``device.TorchDeviceSession``) happen as a step closes, before the user's code after it runs: on the return
of the optimizer class's ``step`` (wrapped as ``Optimizer._patch_step_function`` hooks each class;
the post-step hook itself runs inside torch's ``record_function`` span, and stopping the profiler
there corrupts memory), or in the root module's forward hook. They are recorded as pauses: the
user's host work after a step stays in the next step's interval.

Every hook catches its own errors (``log.report_error``): the agent never breaks training.
"""
from __future__ import annotations

import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, cast  # typing is loaded already: this runs once torch is imported

from ... import log, records
from ...contract.frameworks import TORCH
from ..import_hooks import when_imported
from ..patching import Patches, after_call
from .ddp import DdpEntries
from .device import TorchDeviceSession, cuda_in_use
from .gpu import DeviceClock, GpuSampler, peak_record

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    import torch

    from ...session import Session
    from ...windows import Collection

    Args = tuple[Any, ...]  # a wrapped call's positional and keyword arguments (wrapt's wrapper signature)
    Kwargs = dict[str, Any]
    Method = Callable[..., Any]

LOADER_SETTINGS = ("num_workers", "batch_size", "prefetch_factor", "persistent_workers", "pin_memory")  # recorded as data_settings
COMM_FUNCTIONS = (
    "all_reduce", "broadcast", "barrier", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all", "all_to_all_single",
    "send", "recv", "all_gather_object", "broadcast_object_list",
)

_state: _Integration | None = None  # the installed one


def install(session: Session) -> _Integration | None:
    """Patch torch's run loop for ``session`` and attach a torch.profiler device session (idempotent)."""
    global _state
    if _state is not None:
        return _state
    import torch

    device = TorchDeviceSession(session.steps)
    if not session.attach(TORCH.name, device=device, torch_version=torch.__version__, nested_ops=True,
                          device_target="GPU" if cuda_in_use() else "CPU"):
        return None  # another framework owns the step stream
    _state = _Integration(session, device)
    _state.install()
    return _state



def uninstall() -> None:
    """Remove every hook and wrapper this module put in place (wrappers replaced by others are left)."""
    global _state
    if _state is not None:
        _state.uninstall()
        _state = None


class _Integration:
    def __init__(self, session: Session, device: TorchDeviceSession) -> None:
        import torch

        self.session = session
        self.device = device
        self.steps = session.steps
        self._grad_enabled = torch.is_grad_enabled
        self._primary: weakref.ref[torch.optim.Optimizer] | None = None  # weakref to the primary optimizer
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._fp_hook: _ReArmableHook | None = None
        self._root: weakref.ref[torch.nn.Module] | None = None  # weakref to the root module of an inference loop
        self._inferring = False  # a root forward of an inference loop is running
        self._handover_from: int | None = None  # end of the step whose close asks for a hand-over, until it happens
        self._patches = Patches()
        self._in_comm = threading.local()
        self._groups: dict[int, list[Any]] = {}  # id(ProcessGroup) -> [name, ranks, sequence number, the stores its ranks were written to]
        self._loader_noted = False  # the training DataLoader's settings are in the meta
        self._ranges = _UserRanges(session)
        self._clock: DeviceClock | None = None  # CUDA events at the step ends, once the primary optimizer steps on a GPU
        self._gpu_sampler: GpuSampler | None = None  # while a collection records on a GPU
        self._gpu_settings_noted = False

    # -- installing ------------------------------------------------------------------------------
    def install(self) -> None:
        import torch
        import torch.nn.modules.module as module_mod
        import torch.optim.optimizer as optimizer_mod
        import torch.utils.data.dataloader as dataloader_mod

        self._handles.append(optimizer_mod.register_optimizer_step_post_hook(self._after_optimizer_step))
        self._fp_hook = _ReArmableHook(module_mod.register_module_forward_pre_hook, self._forward_pre_hook)
        # torch wraps each optimizer class's ``step`` once (``_patch_step_function``); we wrap that, to act on its return.
        # Per-step methods take plain functions (``Patches.replace``), not wrapt wrappers bound at every call.
        self._patches.wrap(optimizer_mod.Optimizer, "_patch_step_function", after_call(
            lambda optimizer: self._patches.replace(type(optimizer), "step", self._handing_over_after), "instrumenting the optimizer's step"))
        self._patches.replace(dataloader_mod._BaseDataLoaderIter, "__next__", lambda fetch: self._timing_fetches(fetch, iterator=True))
        self._patches.wrap(dataloader_mod.DataLoader, "__iter__", self._loader_iter)  # once an epoch: wrapt will do
        self._patches.replace(torch.autograd, "backward", self._marking_backward_end)
        when_imported("torch._dynamo.eval_frame", self._patch_compiled_modules)
        self.session.recording_watchers.append(self._ranges.recording_changed)
        self._ranges.recording_changed(self.session.owner)
        self.session.recording_watchers.append(self._gpu_recording_changed)
        self.session.finishers.append(self._gpu_finish)
        if torch.distributed.is_available():
            for name in COMM_FUNCTIONS:
                if callable(getattr(torch.distributed, name, None)):
                    self._patches.wrap(torch.distributed, name, self._comm_wrapper(name))
            DdpEntries(self._entered, self._in_comm, lambda: self.session.disabled).install(self._patches)

    def uninstall(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._fp_hook is not None:
            self._fp_hook.remove()
        self._patches.remove_all()
        for watcher in (self._ranges.recording_changed, self._gpu_recording_changed):
            if watcher in self.session.recording_watchers:
                self.session.recording_watchers.remove(watcher)
        if self._gpu_finish in self.session.finishers:
            self.session.finishers.remove(self._gpu_finish)
        if self._gpu_sampler is not None:
            self._gpu_sampler.stop()
            self._gpu_sampler = None
        self._ranges.remove()

    # -- forward start ---------------------------------------------------------------------------
    def _forward_pre_hook(self, module: torch.nn.Module, _args: Args) -> None:
        """The first training forward of a step: the outermost module's pre-hook runs before its children's."""
        try:
            if self.session.disabled:
                return None
            if not module.training or not self._grad_enabled():
                if self._primary is None and self._root is None:
                    self._adopt_root(module)
                return None
            self.steps.mark_fp(time.time_ns())
            if self._fp_hook is not None:  # set by install(), before any hook can run
                self._fp_hook.disarm()
            if self._clock is not None and not self._gpu_settings_noted:
                self._note_gpu_settings(module)
            if self.device.active:
                self.device.model_inputs(_args)
        except Exception as exc:
            log.report_error("marking the forward start", exc)
        return None

    def _patch_compiled_modules(self, eval_frame: Any) -> None:
        """``torch.compile(module)``'s wrapper warns whenever a global module hook is armed, and its hooks fire an
        extra time: its own ``__call__`` marks the forward start instead, with the global hook taken out first."""
        try:
            self._patches.replace(eval_frame.OptimizedModule, "__call__", self._marking_compiled_forward)
        except Exception as exc:
            log.report_error("instrumenting torch.compile's modules", exc)

    def _marking_compiled_forward(self, call: Method) -> Method:
        def __call__(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            hook = self._fp_hook
            if hook is not None and hook.armed:
                hook.disarm()
                self._forward_pre_hook(module, args)
            return call(module, *args, **kwargs)
        return __call__

    def _adopt_root(self, module: torch.nn.Module) -> None:
        """The first evaluation forward before any optimizer step: this module's forwards may be an
        inference loop's steps. Its own hooks time them, so the global hook can stay disarmed."""
        self._root = weakref.ref(module)
        self._handles.append(module.register_forward_pre_hook(self._root_forward_begins))
        self._handles.append(module.register_forward_hook(self._root_forward_ends))
        self._root_forward_begins(module, None)

    def _root_forward_begins(self, module: torch.nn.Module, _args: Args | None) -> None:
        try:
            self._inferring = (self._primary is None and not self.session.disabled
                               and (not module.training or not self._grad_enabled()))
            if self._inferring:
                if self._fp_hook is not None:
                    self._fp_hook.disarm()
                self.steps.mark_fp(time.time_ns())
        except Exception as exc:
            log.report_error("marking an inference step's start", exc)

    def _root_forward_ends(self, module: torch.nn.Module, _args: Args, _output: Any) -> None:
        if not self._inferring:
            return None
        self._inferring = False
        try:
            now = time.time_ns()
            if self.steps.completed == 0:
                self.session.record({records.KIND: records.NOTE, "ts": now, "text": "inference loop (no optimizer step): one step per "
                                     f"forward of the root module {type(module).__name__}"})
            self._step_ends(now)
            self._hand_over_if_due()
        except Exception as exc:
            log.report_error("closing an inference step", exc)
        return None

    # -- data wait, backward end, step boundary ----------------------------------------------------
    def _step_ends(self, now: int) -> None:
        """Close the step at ``now``; a full profiler session is handed over before user code runs."""
        device, steps = self.device, self.steps
        if device.active:  # before close(): closing the last window step stops the device session
            device.step_ended(now)
        if steps.current is None:
            steps.open(now)
        if self._clock is not None:  # before close(): closing a window's last step stops the profiler, which is ours
            self._clock.step_ended(steps.completed + 1)
        steps.close(now)
        if self._fp_hook is not None:
            self._fp_hook.arm()
        if device.active and device.handover_due:  # step timing alone: no profiler session to hand over
            self._handover_from = now

    def _hand_over_if_due(self) -> None:
        """The hand-over a step's close asked for: a recorded pause from that close on, in no step."""
        began, self._handover_from = self._handover_from, None
        if began is None or not self.device.handover_due or self.steps.current is not None:
            return
        in_torch = None
        try:
            in_torch = self.device.hand_over(self.session)
        except Exception as exc:
            log.report_error("handing the profiler's events over", exc)
        resumed = time.time_ns()
        pause: records.Pause = {records.KIND: records.PAUSE, "start": began, "end": resumed, "what": "torch.profiler hand-over"}
        if in_torch is not None:
            pause["profiler_ns"] = in_torch
        self.session.record(pause)
        self.steps.start_next_at(resumed)

    def _handing_over_after(self, step: Method) -> Method:
        """``step`` (an optimizer class's), then the hand-over its step's close asked for."""
        def stepped(*args: Any, **kwargs: Any) -> Any:
            result = step(*args, **kwargs)
            if self._handover_from is not None:  # rare: tested here, not in a call every step
                try:
                    self._hand_over_if_due()
                except Exception as exc:
                    log.report_error("handing the profiler's events over", exc)
            return result
        return stepped

    def _timing_fetches(self, fetch: Method, iterator: bool = False) -> Method:
        """``fetch`` (the DataLoader's ``__iter__`` or, ``iterator``, its iterator's ``__next__``) timed as the step's
        data wait; a loader without workers loads in this thread, so its fetch's CPU time is taken too."""
        session, steps, grad_enabled, cpu_time = self.session, self.steps, self._grad_enabled, time.thread_time_ns

        def timed(*args: Any, **kwargs: Any) -> Any:
            if session.disabled or not grad_enabled():
                return fetch(*args, **kwargs)
            here = iterator and not getattr(args[0], "_num_workers", 1)
            cpu = cpu_time() if here else 0
            start = time.time_ns()
            result = fetch(*args, **kwargs)
            end = time.time_ns()
            try:
                steps.data_wait(start, end, cpu_time() - cpu if here else None)
            except Exception as exc:
                log.report_error("timing the data loader", exc)
            return result
        return timed

    def _loader_iter(self, wrapped: Method, instance: Any, args: Args, kwargs: Kwargs) -> Any:
        """A training loader's first iteration records its settings (the advisor says what to change, from what);
        starting an iteration is timed as a fetch."""
        if not self._loader_noted and not self.session.disabled and self._grad_enabled():
            self._loader_noted = True
            try:
                self.session.add_meta(data_settings={key: getattr(instance, key, None) for key in LOADER_SETTINGS})
            except Exception as exc:
                log.report_error("reading the DataLoader's settings", exc)
        return self._timing_fetches(wrapped)(*args, **kwargs)

    def _marking_backward_end(self, backward: Method) -> Method:
        """``torch.autograd.backward`` (``Tensor.backward`` calls it), then the step's backward end: a plain
        function, as every per-step patch (a wrapt wrapper costs microseconds a call)."""
        session, steps = self.session, self.steps

        def marked(*args: Any, **kwargs: Any) -> Any:
            result = backward(*args, **kwargs)
            if not session.disabled:
                try:
                    steps.mark_bp(time.time_ns())
                except Exception as exc:
                    log.report_error("marking the backward end", exc)
            return result
        return marked

    def _after_optimizer_step(self, optimizer: torch.optim.Optimizer, _args: Args, _kwargs: Kwargs) -> None:
        try:
            now = time.time_ns()
            primary = self._primary() if self._primary is not None else None
            if primary is None:  # first optimizer ever, or the primary one was garbage-collected
                self._primary = weakref.ref(optimizer)
                if cuda_in_use() and not self.session.disabled:
                    self._adopt_gpu()
            elif primary is not optimizer:
                return
            if self.session.disabled:
                return
            self._step_ends(now)
        except Exception as exc:
            log.report_error("closing a training step", exc)

    # -- the GPU's own view ---------------------------------------------------------------------------
    def _adopt_gpu(self) -> None:
        """The primary optimizer steps on a GPU: its name in the meta, and its steps timed on its own clock from here on."""
        try:
            import torch

            self.session.add_meta(device_target="GPU", device_name=torch.cuda.get_device_name(),
                                  device_capability=list(torch.cuda.get_device_capability()))
            if self._clock is None:
                self._clock = DeviceClock(self.session.record, self._device_step_read)
                self._gpu_recording_changed(self.session.owner)
        except Exception as exc:  # the step is closed all the same
            log.report_error("reading the GPU", exc)

    def _gpu_recording_changed(self, owner: Collection | None) -> None:
        """The session's watcher: the device is sampled while a collection records; its step times go out as it stops."""
        try:
            if owner is not None and self._gpu_sampler is None and cuda_in_use():
                self._gpu_sampler = GpuSampler(owner.writer.queue)
                self._gpu_sampler.start()
            elif owner is None:
                if self._gpu_sampler is not None:
                    self._gpu_sampler.stop()
                    self._gpu_sampler = None
                if self._clock is not None:
                    self._clock.flush()
        except Exception as exc:
            log.report_error("sampling the GPU", exc)

    def _device_step_read(self, n: int, ns: int) -> None:
        live = self.session.live
        if live is not None:
            live.device_step(n, ns)

    def _note_gpu_settings(self, module: torch.nn.Module) -> None:
        """What the job already does on its GPU (autocast and its dtype, compile, a fused optimizer, TF32), read once at a
        training forward, so the advice never repeats it."""
        import torch

        self._gpu_settings_noted = True
        primary = self._primary() if self._primary is not None else None
        defaults = getattr(primary, "defaults", {}) or {}
        autocast = torch.is_autocast_enabled("cuda")
        self.session.add_meta(gpu_settings={
            "autocast": str(torch.get_autocast_dtype("cuda")).removeprefix("torch.") if autocast else None,
            "compiled": type(module).__name__ == "OptimizedModule" or bool(getattr(module, "_compiled_call_impl", None)),
            "optimizer": type(primary).__name__ if primary is not None else None,
            "optimizer_fused": bool(defaults.get("fused")), "optimizer_foreach": defaults.get("foreach"),
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32})

    def _gpu_finish(self) -> None:
        """At the end: the last steps' device times (their events waited for: the job is done) and the memory peaks."""
        try:
            if self._clock is not None:
                self._clock.finish(wait=True)
            if cuda_in_use():
                peak = peak_record()
                if peak is not None:
                    self.session.record(peak)
        except Exception as exc:
            log.report_error("reading the GPU at the end", exc)

    # -- communication -----------------------------------------------------------------------------
    def _comm_wrapper(self, name: str) -> Callable[[Method, Any, Args, Kwargs], Any]:
        def timed_comm(wrapped: Method, _instance: Any, args: Args, kwargs: Kwargs) -> Any:
            if self.session.disabled or getattr(self._in_comm, "busy", False):
                return wrapped(*args, **kwargs)  # nested calls (all_gather_object -> all_gather) count once
            self._in_comm.busy = True
            group, seq = self._entered(name, args, kwargs)
            start = time.time_ns()
            try:
                return wrapped(*args, **kwargs)
            finally:
                end = time.time_ns()
                self._in_comm.busy = False
                if self.session.live is not None:
                    self.session.live.collective_left(end - start)
                try:
                    if self.device.active:
                        self.device.wrapped_comm.append((start, end, name))
                    size, dtype = _payload(args, kwargs)
                    record: dict[str, Any] = {records.KIND: records.COMM, "step": self.steps.completed + 1, "name": name, "group": group, "seq": seq,
                              "start": start, "dur": end - start, "bytes": size}
                    if dtype:
                        record["dtype"] = dtype
                    if kwargs.get("async_op"):
                        record["async"] = True  # the time is the launch only; the wait happens in Work.wait()
                    self.session.record(record)
                except Exception as exc:
                    log.report_error("timing a communication call", exc)
        return timed_comm

    def _entered(self, name: str, args: Args, kwargs: Kwargs) -> tuple[str | None, int | None]:
        """Before a collective can block: its entry (group, that group's sequence number, step) on disk, so the
        ranks of a job killed while waiting in it say who entered and who never did. The group's ranks go
        into its first entry in each store. Returns (group name, sequence number)."""
        try:
            dist = sys.modules["torch.distributed"]
            group = kwargs.get("group")
            if group is None:  # by type, not isinstance: the pybind check costs microseconds per argument
                kind = dist.ProcessGroup
                group = next((a for a in args if type(a) is kind), None) or dist.group.WORLD
            if group is None:  # no process group yet: torch raises its own error
                return None, None
            known = self._groups.get(id(group))
            if known is None:
                name_of = "world" if group is dist.group.WORLD else group.group_name  # the default group: "world", as the exports call it
                known = self._groups[id(group)] = [name_of, dist.get_process_group_ranks(group), 0, set()]
            known[2] += 1
            if self.session.live is not None:
                self.session.live.collective_entered(known[0], known[2], name, self.steps.completed + 1, known[1])
            writer = self.session.writer_now()
            if writer is not None:
                entry: dict[str, Any] = {records.KIND: records.ENTER, "group": known[0], "seq": known[2], "name": name,
                                         "step": self.steps.completed + 1, "ts": time.time_ns()}
                if writer not in known[3]:  # the group's ranks once per store
                    entry["ranks"] = known[1]
                    known[3].add(writer)
                writer.write_now(entry)
            return known[0], known[2]
        except Exception as exc:
            log.report_error("recording a collective's entry", exc)
            return None, None


class _UserRanges:
    """The user's ``torch.profiler.record_function`` ranges as mstx ranges (domain "default"); torch's
    own (Optimizer.step#..., enumerate(DataLoader)#...) are opened from torch's modules and left out.
    Torch opens three a step itself, so ``record_function`` is patched only while a collection records
    with mstx, and until the ranges opened then have closed: step timing alone pays nothing for it."""

    def __init__(self, session: Session) -> None:
        from ..mstx import MstxRecorder

        self._session = session
        self._recorder = MstxRecorder(session)
        self._patches = Patches()

    def recording_changed(self, owner: Collection | None) -> None:
        """The session's watcher: OWNER records now (None: nothing does)."""
        if owner is not None and owner.options.mstx:
            if not self._patches:
                from torch.autograd.profiler import record_function

                self._patches.replace(record_function, "__enter__", self._entering)
                self._patches.replace(record_function, "__exit__", self._leaving)
        elif not self._recorder.has_open_ranges():
            self.remove()

    def remove(self) -> None:
        self._patches.remove_all()

    def _entering(self, enter: Method) -> Method:
        session, recorder = self._session, self._recorder

        def __enter__(instance: Any) -> Any:
            out = enter(instance)
            if session.owner is not None:
                try:
                    if not sys._getframe(1).f_globals.get("__name__", "").startswith("torch"):
                        instance._msprof_range = recorder.range_start(instance.name, "default")
                except Exception as exc:
                    log.report_error("recording a record_function range", exc)
            return out
        return __enter__

    def _leaving(self, leave: Method) -> Method:
        session, recorder = self._session, self._recorder

        def __exit__(instance: Any, *args: Any) -> Any:
            try:
                range_id = vars(instance).pop("_msprof_range", None)
                if range_id is not None:
                    recorder.range_end(range_id, "default")
                    if session.owner is None and not recorder.has_open_ranges():  # the last range of a stopped window
                        self.remove()
            except Exception as exc:
                log.report_error("recording a record_function range", exc)
            return leave(instance, *args)
        return __exit__


class _ReArmableHook:
    """A global torch hook registered once, then put into and taken out of torch's hook dict under
    its handle's id: registering anew every step would build a ``RemovableHandle`` (weak references,
    a class counter) per step, a cost on the training thread's critical path."""

    def __init__(self, register: Callable[[Method], torch.utils.hooks.RemovableHandle], hook: Method) -> None:
        self._hook = hook
        self._handle = register(hook)
        self._hooks = cast("dict[int, Method]", self._handle.hooks_dict_ref())  # torch's global hook dict: its weak reference never dies
        self._removed = False

    @property
    def armed(self) -> bool:
        return self._handle.id in self._hooks

    def arm(self) -> None:
        if not self._removed:
            self._hooks[self._handle.id] = self._hook

    def disarm(self) -> None:
        self._hooks.pop(self._handle.id, None)

    def remove(self) -> None:
        self._removed = True
        self.disarm()


def _payload(args: Args, kwargs: Kwargs) -> tuple[int, str | None]:
    """Bytes of the tensors handed to a collective (the first tensor argument or list of tensors), and their
    element type ("float32"; None when there is none, or a list mixes types)."""
    import torch

    values = list(args) + [kwargs.get("tensor"), kwargs.get("tensor_list"), kwargs.get("input")]
    for value in values:
        if isinstance(value, torch.Tensor):
            return value.numel() * value.element_size(), str(value.dtype).removeprefix("torch.")
        if isinstance(value, (list, tuple)) and value and all(isinstance(t, torch.Tensor) for t in value):
            dtypes = {t.dtype for t in value}
            return sum(t.numel() * t.element_size() for t in value), str(dtypes.pop()).removeprefix("torch.") if len(dtypes) == 1 else None
    return 0, None
