"""DistributedDataParallel's own collectives seen at their entry, as the wrapped ``torch.distributed``
calls are (``_Integration._entered``): a rank killed while it waits in one then says where it waited.

DDP runs its gradient all-reduce from C++ (its reducer, once a bucket of gradients is ready), past the
Python functions we wrap. A communication hook is the reducer's one Python door, so each DDP gets ours
at construction: it writes the entry, then runs what the reducer would have run, by default
``allreduce_hook`` (torch's reference for "the same result as no hook": divide by the group's size, then
sum; the reducer without a hook does the same two operations). DDP takes one hook only, so a hook the
user registers later (``register_comm_hook``, or a built-in one) becomes the one ours runs: torch's
own bookkeeping of it runs unchanged, only its registration with the reducer comes to us.
The buffers' broadcast at each forward (models with BatchNorm) is a Python method: wrapped alike.

Not covered: DDP under compiled autograd's Python reducer (it calls the hooks itself, another way), and
``Join(divide_by_initial_world_size=False)``, where the reducer without a hook divides by the ranks
still training: ours divides by the group's size, as ``allreduce_hook`` does.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..patching import Patches, Wrapper, after_call

GRADIENTS = "DDP all_reduce"  # the entry's name: the hang finding says "DDP all_reduce #12 of group world"
BUFFERS = "DDP broadcast_buffers"
Entered = Callable[[str, tuple[Any, ...], dict[str, Any]], object]


class _EnteringHook:
    """The reducer's communication hook: the entry, then the hook DDP runs (``inner``)."""

    def __init__(self, group: Any, entering: Callable[..., Any]) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        self.group = group
        self.inner: tuple[object, Callable[[Any, Any], Any]] = (group, allreduce_hook)
        self._entering = entering

    def __call__(self, _state: object, bucket: Any) -> Any:
        state, hook = self.inner
        return self._entering(GRADIENTS, self.group, hook, state, bucket)


class DdpEntries:
    def __init__(self, entered: Entered, in_comm: threading.local, disabled: Callable[[], bool]) -> None:
        self._entered, self._in_comm, self._disabled = entered, in_comm, disabled
        self._hooks: dict[int, _EnteringHook | None] = {}  # id(reducer) -> ours, or None where another hook was registered first
        self._register: Callable[..., Any] | None = None  # torch.distributed._register_comm_hook itself

    def install(self, patches: Patches) -> None:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        self._register = dist._register_comm_hook
        patches.wrap(dist, "_register_comm_hook", self._registering(builtin=False))
        patches.wrap(dist, "_register_builtin_comm_hook", self._registering(builtin=True))
        patches.wrap(DistributedDataParallel, "__init__", after_call(self._attach, "seeing DDP's all-reduce at its entry"))
        patches.replace(DistributedDataParallel, "_distributed_broadcast_coalesced", self._broadcasting)

    def _attach(self, ddp: Any) -> None:
        """Our hook on a new DDP's reducer, unless it has one already (DDP's mixed precision registers its own)."""
        reducer = getattr(ddp, "reducer", None)
        if reducer is None or self._register is None or getattr(ddp, "_use_python_reducer", False) or id(reducer) in self._hooks:
            return
        hook = _EnteringHook(ddp.process_group, self._entering)
        self._register(reducer, None, hook)
        self._hooks[id(reducer)] = hook
        weakref.finalize(ddp, self._hooks.pop, id(reducer), None)

    def _registering(self, builtin: bool) -> Wrapper:
        """``torch.distributed._register_(builtin_)comm_hook(reducer, ...)``: to our hook's inner where ours is there."""
        def register(wrapped: Callable[..., Any], _instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            reducer = args[0] if args else kwargs.get("reducer")
            ours = self._hooks.get(id(reducer))
            if ours is None:
                result = wrapped(*args, **kwargs)
                self._hooks.setdefault(id(reducer), None)
                return result
            rest = list(args[1:]) + list(kwargs.values())
            ours.inner = self._builtin(rest[0], ours.group) if builtin else (rest[0], rest[1])
            return None
        return register

    @staticmethod
    def _builtin(kind: Any, group: Any) -> tuple[object, Callable[[Any, Any], Any]]:
        """The Python hook that computes what a built-in one does (torch 2.x has these two)."""
        import torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        if kind == dist.BuiltinCommHookType.FP16_COMPRESS:
            return group, default_hooks.fp16_compress_hook
        return group, default_hooks.allreduce_hook

    def _entering(self, name: str, group: Any, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` after its entry on GROUP is written; the torch.distributed calls it makes are this entry's."""
        if self._disabled() or getattr(self._in_comm, "busy", False):
            return call(*args, **kwargs)
        self._entered(name, (), {"group": group})
        self._in_comm.busy = True
        try:
            return call(*args, **kwargs)
        finally:
            self._in_comm.busy = False

    def _broadcasting(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def broadcast(ddp: Any, *args: Any, **kwargs: Any) -> Any:
            return self._entering(BUFFERS, ddp.process_group, method, ddp, *args, **kwargs)
        return broadcast
