"""Run code around one module's first execution: the mechanism of wrapt's post-import hooks, without
its import cost (wrapt pulls in asyncio and inspect: ~30 ms on every profiled interpreter start).

One meta-path finder asks the other finders for the module's spec and wraps its loader, so that
``before()`` runs just before the module's code and ``after(module, ok)`` right after it, whether it
raised or not. The original loader is put back on the module afterwards. Standard library only.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, cast  # typing is loaded already (frameworks/__init__ imports it)

if TYPE_CHECKING:  # the rest is not imported at run time: this runs in every profiled interpreter
    from collections.abc import Callable, Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    Before = Callable[[], object]
    After = Callable[[ModuleType, bool], object]

_hooks: dict[str, list[tuple[Before | None, After | None]]] = {}  # module name -> [(before, after)]


class _Loader:
    """Delegates to the real loader (resource readers and all), with the hooks around exec_module."""

    def __init__(self, inner: Loader, name: str) -> None:
        self._inner = inner
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        hooks = _hooks.pop(self._name, [])
        for before, _ in hooks:
            if before is not None:
                before()
        ok = False
        try:
            self._inner.exec_module(module)
            ok = True
        finally:
            spec = getattr(module, "__spec__", None)
            if spec is not None:
                spec.loader = self._inner
            module.__loader__ = self._inner
            for _, after in hooks:
                if after is not None:
                    after(module, ok)


class _Finder:
    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = cast("Loader", _Loader(spec.loader, fullname))  # a Loader by duck typing: the rest is delegated
                return spec
        return None


_finder = _Finder()


def around_first_exec(name: str, before: Before | None = None, after: After | None = None) -> None:
    """Call ``before()`` just before module NAME first executes and ``after(module, ok)`` right after."""
    _hooks.setdefault(name, []).append((before, after))
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def when_imported(name: str, callback: Callable[[ModuleType], object]) -> None:
    """Call ``callback(module)`` once NAME is imported: now if it already is, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
    else:
        around_first_exec(name, after=lambda imported, ok: ok and callback(imported))
