"""MindSpore integration: step boundaries from the run loop, ops from MindSpore's own CPU profiler.

Installed by the post-import hook on ``import mindspore``. Patches (wrapt; every agent step in them is
guarded so an agent error never reaches the training script):

- ``Model._train`` (behind ``Model.train`` and ``Model.fit``): appends one callback after the user's,
  so a step ends once every callback (loss printing, ``_StepSync`` in PyNative) has run. Inside it,
  only fetches from the dataset being trained count as data wait; the fetch that ends an epoch
  (StopIteration) is no step.
- ``Model._train_dataset_sink_process`` (real sinking, Ascend/GPU GRAPH): a step callback then ends
  a sunk epoch, recorded with ``sink_steps``. On CPU MindSpore never sinks (it trains per batch even
  with ``dataset_sink_mode=True``), which is left as a ``note``.
- ``Model.eval``: while it runs, fetches count for nothing.
- ``mindspore.profiler.mstx`` (``Mstx.mark / range_start / range_end``): the user's marks and ranges
  are recorded on every device (MindSpore's own record them on Ascend only). The ``dataloader`` range
  MindSpore's iterator opens around each fetch is left out: that fetch is the data wait already.
- ``Cell.__call__`` and ``_JitExecutor.__call__`` (the call of an ``@ms.jit`` function), outermost
  calls only, outside Model: a custom loop's steps, fed by a dataset iterator or by tensors built in
  Python. A step ends where its compute ends: at the return of the optimizer cell's call
  (PYNATIVE), else of the outermost compiled call of the step function (GRAPH: the first jit
  function or top-level cell called); with no optimizer ever called, each outermost forward of the
  root cell is one step (an inference loop), which a note says. While ops are recorded the end
  waits for the step's compute (the executor's ``sync``: the calls return before their ops have
  run, whose last ones would land in the next step). Host work after the step belongs to the next
  step's interval. Forward start = the start of that compiled call, or of the first
  outermost forward under ``value_and_grad`` (PYNATIVE); the optimizer call's start marks the
  backward end for steps without ops.
- ``Iterator.__next__`` (``mindspore/dataset/engine/iterators.py``, the base of the Tuple/Dict
  iterators that ``create_*_iterator`` and Model's dataset helper return): outside Model, a custom
  loop. Each fetch from the training dataset is the data wait of the step it opens; only where no
  call above ends steps does it close the previous step at the fetch start. The training dataset is
  the first one fetched from outside Model (unless Model.train already ran: then hand-iterated
  datasets are evaluation); iterators of any other dataset (an eval set iterated in the loop) create
  no steps. A step left open at exit is discarded.

The device session (``device.MindSporeDevice``) is handed to the session at install.
"""
from __future__ import annotations

import collections.abc
import sys
import time
import weakref

from ... import log, records
from ...contract.frameworks import MINDSPORE
from ..patching import Patches
from .device import MindSporeDevice

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ...session import Session

    Args = tuple[Any, ...]  # a wrapped call's positional and keyword arguments (wrapt's wrapper signature)
    Kwargs = dict[str, Any]

_patches = Patches()
_state: _State | None = None


class _State:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.train_depth = 0
        self.eval_depth = 0
        self.train_dataset: weakref.ref[Any] | None = None  # weakref to the dataset Model._train is running on
        self.sinking = False
        self.model_trained = False  # after Model.train, datasets iterated by hand are evaluation
        self.loop_dataset: weakref.ref[Any] | None = None  # weakref to the dataset a custom loop trains on
        self.loop_epoch = 1
        self.context_noted = False
        self.depth = 0  # outermost cell / jit calls in progress (only the outermost one is looked at)
        self.step_function: weakref.ref[Any] | None = None  # the compiled callable whose calls are the loop's steps
        self.root: weakref.ref[Any] | None = None  # weakref to the first cell run outside grad: the model of an inference loop
        self.optimizer_seen = False
        self.calls_end_steps = False  # once a call ended a step, fetches no longer do
        self.steps_explained = False

    def note_context(self) -> None:
        """Mode and target are set by the script after import, so they are read at the first step."""
        if self.context_noted:
            return
        self.context_noted = True
        import mindspore as ms

        mode = ms.get_context("mode")
        self.session.add_meta(device_target=ms.get_context("device_target"),
                              context_mode="PYNATIVE" if mode == ms.PYNATIVE_MODE else "GRAPH",
                              jit_level=(ms.get_context("jit_config") or {}).get("jit_level") or ms.get_context("jit_level") or None)

    def note_dataset(self, dataset: Any, amp_level: str | None = None) -> None:
        """The training dataset's settings (the advisor says what to change, from what): the parallel workers
        of its pipeline's ops, the first from the top that has them the one named, and the prefetch size."""
        import mindspore.dataset as ds

        workers: dict[str, int] = {}
        todo = [dataset]
        while todo:
            node = todo.pop(0)
            if getattr(node, "num_parallel_workers", None) is not None:
                workers.setdefault(type(node).__name__, node.num_parallel_workers)
            todo += list(getattr(node, "children", []) or [])
        first = next(iter(workers), None)
        self.session.add_meta(data_settings={"op": first, "num_parallel_workers": workers.get(first) if first is not None else None, "ops": workers,
                                             "prefetch_size": ds.config.get_prefetch_size()},
                              **({"amp_level": amp_level} if amp_level else {}))


def install(session: Session | None) -> None:
    """Patch MindSpore's run loop and hand the session a device session; a second call does nothing."""
    global _state
    if _patches or session is None:
        return
    import mindspore
    from mindspore.dataset.engine import iterators
    from mindspore.train import model as model_module

    _state = _State(session)
    device = MindSporeDevice(session)
    if not session.attach(MINDSPORE.name, device=device, ms_version=mindspore.__version__):
        _state = None
        return
    _patches.wrap(model_module.Model, "_train", _model_train)
    _patches.wrap(model_module.Model, "eval", _model_eval)
    _patches.wrap(model_module.Model, "_train_dataset_sink_process", _model_sink_process)
    _patches.wrap(iterators.Iterator, "__next__", _iterator_next)
    _patch_mstx(session)
    _patches.wrap(mindspore.nn.Cell, "__call__", _cell_call)
    _patches.wrap(_graph_api()._JitExecutor, "__call__", _jit_call)
    if session.options.data_process:
        device.start_dataset_profiler()


def _graph_api() -> Any:
    """``mindspore.graph.api`` (2.9+; importing the old ``mindspore.common.api`` prints a deprecation warning)."""
    try:
        from mindspore.graph import api
    except ImportError:
        from mindspore.common import api
    return api


def uninstall() -> None:
    """Restore every patched attribute that still holds our wrapper."""
    global _state
    _patches.remove_all()
    _state = None


# -- Model.train / Model.eval -------------------------------------------------------------------
def _model_train(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    state = _state
    if state is None:
        return wrapped(*args, **kwargs)
    try:
        args, kwargs = _with_step_callback(state, args, kwargs, getattr(instance, "_amp_level", None))
    except Exception as exc:
        log.report_error("instrumenting Model.train", exc)
    state.train_depth += 1
    state.model_trained = True
    try:
        return wrapped(*args, **kwargs)
    finally:
        state.train_depth -= 1
        if state.train_depth == 0:
            state.train_dataset = None


def _with_step_callback(state: _State, args: Args, kwargs: Kwargs, amp_level: str | None = None) -> tuple[Args, Kwargs]:
    """Add our step callback after the user's ones; remember which dataset is trained on."""
    arguments = list(args)
    if state.train_depth == 0:
        state.session.steps.discard_open()  # a fetch before training (a peek at the data) is no step
    dataset = arguments[1] if len(arguments) > 1 else kwargs.get("train_dataset")
    state.train_dataset = weakref.ref(dataset) if dataset is not None else None
    if len(arguments) > 2:
        arguments[2] = _callback_list(arguments[2])
    else:
        kwargs = dict(kwargs, callbacks=_callback_list(kwargs.get("callbacks")))
    sink = arguments[3] if len(arguments) > 3 else kwargs.get("dataset_sink_mode", True)
    state.note_context()
    import mindspore as ms

    if dataset is not None:
        try:
            state.note_dataset(dataset, amp_level)
            if not sink or ms.get_context("device_target") == "CPU":  # one step a batch: the run's planned steps are known
                epochs = int(arguments[0] if arguments else kwargs["epoch"]) - int(arguments[5] if len(arguments) > 5 else kwargs.get("initial_epoch", 0))
                state.session.add_meta(planned_steps=state.session.steps.completed + epochs * int(dataset.get_dataset_size()))
        except Exception as exc:
            log.report_error("reading the dataset's settings", exc)
    if sink and ms.get_context("device_target") == "CPU":
        state.session.record({records.KIND: records.NOTE, "ts": time.time_ns(),
                              "text": "dataset_sink_mode=True on CPU: MindSpore ran without sinking; one step per batch"})
    return tuple(arguments), kwargs


def _callback_list(callbacks: Any) -> list[Any]:
    """The user's callbacks as Model._transform_callbacks reads them, then ours."""
    if callbacks is None:
        callbacks = []
    elif not isinstance(callbacks, collections.abc.Iterable):
        callbacks = [callbacks]
    return list(callbacks) + [_step_callback()]


_callback_class: type[Any] | None = None  # the Callback subclass, made once mindspore.train is imported


def _step_callback() -> Any:
    global _callback_class
    if _callback_class is None:
        from mindspore.train import Callback

        class _MsprofStepBoundary(Callback):
            """Step start = host-side forward start; step end = after every other callback."""

            def on_train_step_begin(self, run_context: Any) -> None:
                try:
                    if _state is not None:
                        _state.session.steps.mark_fp()
                except Exception as exc:
                    log.report_error("step begin", exc)

            def on_train_step_end(self, run_context: Any) -> None:
                try:
                    if _state is not None:
                        _close_model_step(_state, run_context.original_args())
                except Exception as exc:
                    log.report_error("step end", exc)

        _callback_class = _MsprofStepBoundary
    return _callback_class()


def _close_model_step(state: _State, cb_params: Any) -> None:
    extra = {"epoch": int(getattr(cb_params, "cur_epoch_num", 0) or 0)}
    helper = getattr(cb_params, "dataset_helper", None) if state.sinking else None
    if helper is not None:
        import mindspore as ms

        if ms.get_context("mode") == ms.GRAPH_MODE:
            extra["sink_steps"] = int(helper.sink_size())
    state.session.steps.close(**extra)


def _model_sink_process(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    """Real sinking (Ascend/GPU GRAPH): one step callback per sunk epoch, recorded with its sink_steps."""
    state = _state
    if state is None:
        return wrapped(*args, **kwargs)
    state.sinking = True
    try:
        return wrapped(*args, **kwargs)
    finally:
        state.sinking = False


def _model_eval(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    state = _state
    if state is None:
        return wrapped(*args, **kwargs)
    state.eval_depth += 1
    try:
        return wrapped(*args, **kwargs)
    finally:
        state.eval_depth -= 1


# -- dataset fetches --------------------------------------------------------------------------------
MODEL, LOOP = "model", "loop"


def _role(state: _State, iterator: Any) -> str | None:
    """Whether a fetch belongs to training under Model, to a custom training loop, or to nothing."""
    if state.eval_depth:
        return None
    dataset = getattr(iterator, "_Iterator__ori_dataset", None)
    if dataset is None:
        return None
    if state.train_depth:
        trained = state.train_dataset() if state.train_dataset is not None else None
        return MODEL if dataset is trained else None
    current = state.loop_dataset() if state.loop_dataset is not None else None
    if current is None and state.model_trained:
        return None
    if current is None:
        state.loop_dataset = weakref.ref(dataset)
        state.note_context()
        try:
            state.note_dataset(dataset)
        except Exception as exc:
            log.report_error("reading the dataset's settings", exc)
        return LOOP
    return LOOP if dataset is current else None


def _iterator_next(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    state = _state
    role = None
    if state is not None:
        try:
            role = _role(state, instance)
        except Exception as exc:
            log.report_error("classifying a dataset fetch", exc)
    if role is None or state is None:
        return wrapped(*args, **kwargs)
    start = time.time_ns()
    if role == LOOP and not state.calls_end_steps:
        try:
            state.session.steps.close(start, epoch=state.loop_epoch)
        except Exception as exc:
            log.report_error("closing a step", exc)
    try:
        out = wrapped(*args, **kwargs)
    except StopIteration:
        if role == LOOP:
            state.loop_epoch += 1
        raise
    try:
        state.session.steps.data_wait(start, time.time_ns())
    except Exception as exc:
        log.report_error("recording a data wait", exc)
    return out


# -- mstx -------------------------------------------------------------------------------------------------
def _patch_mstx(session: Session) -> None:
    try:
        from mindspore.profiler.mstx import Mstx
    except ImportError:  # MindSpore before 2.5 has no mstx: nothing to record
        return

    from ..mstx import MstxRecorder

    recorder = MstxRecorder(session)

    def guarded(record: Callable[..., Any]) -> Callable[[Callable[..., Any], Any, Args, Kwargs], Any]:
        def wrapper(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
            result = wrapped(*args, **kwargs)
            try:
                return record(result, *args, **kwargs)
            except Exception as exc:
                log.report_error("recording an mstx mark", exc)
                return result
        return wrapper

    def mark(result: Any, message: str, stream: Any = None, domain: str = "default") -> Any:
        recorder.mark(message, domain)
        return result

    def range_start(native_id: Any, message: str, stream: Any = None, domain: str = "default") -> Any:
        if message == "dataloader" and sys._getframe(2).f_globals.get("__name__") == ITERATORS_MODULE:
            return native_id  # MindSpore's own range around a fetch: our data wait already
        return recorder.range_start(message, domain, native_id)

    def range_end(result: Any, range_id: Any, domain: str = "default") -> Any:
        recorder.range_end(range_id, domain)
        return result

    for name, record in (("mark", mark), ("range_start", range_start), ("range_end", range_end)):
        _patches.wrap(Mstx, name, guarded(record))


ITERATORS_MODULE = "mindspore.dataset.engine.iterators"


# -- custom loops: the outermost cell / compiled calls ---------------------------------------------
STEP, FORWARD, UPDATE, INFER = "step", "forward", "update", "infer"


def _cell_call(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    return _outermost_call(wrapped, instance, args, kwargs, instance)


def _jit_call(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs) -> Any:
    return _outermost_call(wrapped, instance, args, kwargs, None)


def _outermost_call(wrapped: Callable[..., Any], instance: Any, args: Args, kwargs: Kwargs, cell: Any) -> Any:
    """A call of a cell (``cell``) or of a jit function (``instance`` is its executor) at the top of a
    custom loop: what it means for the step (see the module docstring)."""
    state = _state
    if state is None or state.depth or state.train_depth or state.eval_depth:
        return wrapped(*args, **kwargs)
    role = None
    try:
        role = _call_role(state, instance, cell)
        if role is not None:
            _call_begins(state, role, time.time_ns())
    except Exception as exc:
        log.report_error("a step start in a custom loop", exc)
    state.depth += 1
    try:
        return wrapped(*args, **kwargs)
    finally:
        state.depth -= 1
        if role is not None:
            try:
                _call_ends(state, role, time.time_ns(), instance if cell is None else cell)
            except Exception as exc:
                log.report_error("a step end in a custom loop", exc)


def _call_role(state: _State, instance: Any, cell: Any) -> str | None:
    import mindspore as ms

    if state.model_trained:
        return None  # after Model.train, calls of the network are evaluation or prediction
    if cell is not None and isinstance(cell, ms.nn.Optimizer):
        return UPDATE
    compiled = cell is None or ms.get_context("mode") == ms.GRAPH_MODE
    if compiled:
        key = getattr(instance, "fn", None) if cell is None else cell
        if state.step_function is None:
            state.note_context()
            state.step_function = weakref.ref(key)
        return STEP if state.step_function() is key else None
    if _graph_api()._pynative_executor.requires_grad():
        return FORWARD
    if state.optimizer_seen:
        return None  # evaluation inside a training loop
    if state.root is None:
        state.note_context()
        state.root = weakref.ref(cell)
    return INFER if state.root() is cell else None


def _call_begins(state: _State, role: str, now: int) -> None:
    steps = state.session.steps
    if role == UPDATE:
        steps.mark_bp(now)
    else:
        steps.mark_fp(now)


def _call_ends(state: _State, role: str, now: int, what: Any) -> None:
    if role == UPDATE:
        state.optimizer_seen = True
    elif state.optimizer_seen or role == FORWARD:
        return  # the optimizer ends the steps
    state.calls_end_steps = True
    if state.session.owner is not None:  # ops recorded: the step ends where its last op ends, not at the
        _graph_api()._pynative_executor.sync()  # asynchronous call's return (its last ops would land in the next step)
        now = time.time_ns()
    import mindspore as ms

    # a step that ends at its compiled call's return is that call from its forward start on: the advisor
    # reads its time without ops as the runtime's, not host Python
    compiled = role == STEP and (ms.get_context("mode") == ms.GRAPH_MODE or not isinstance(what, ms.nn.Cell))
    state.session.steps.close(now, epoch=state.loop_epoch, **({"compiled_call": True} if compiled else {}))
    if not state.steps_explained:
        state.steps_explained = True
        state.session.record({records.KIND: records.NOTE, "ts": now, "text": _steps_explained(role, what)})


def _steps_explained(role: str, what: Any) -> str:
    """The note that says what a custom loop's steps are."""
    import mindspore as ms

    if role == UPDATE:
        return f"custom loop: a step ends at the end of each {type(what).__name__} optimizer call"
    if role == STEP and not isinstance(what, ms.nn.Cell):
        return f"custom loop: one step per call of the outermost compiled function {getattr(what.fn, '__qualname__', what.fn)}"
    if role == STEP and any(isinstance(cell, ms.nn.Optimizer) for _, cell in what.cells_and_names()):
        return f"custom loop: one step per call of the outermost compiled cell {type(what).__name__}"
    return f"inference loop (no optimizer): one step per forward of the outermost model {type(what).__name__}"
