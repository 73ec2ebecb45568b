"""Run code around one module's first execution: the mechanism of wrapt's post-import hooks, without
its import cost (wrapt pulls in asyncio and inspect: ~30 ms on every profiled interpreter start).

One meta-path finder asks the other finders for the module's spec and wraps its loader, so that
``before()`` runs just before the module's code and ``after(module, ok)`` right after it, whether it
raised or not. The original loader is put back on the module afterwards. Standard library only.
"""
import sys

_hooks = {}  # module name -> [(before, after)]


class _Loader:
    """Delegates to the real loader (resource readers and all), with the hooks around exec_module."""

    def __init__(self, inner, name):
        self._inner = inner
        self._name = name

    def __getattr__(self, attribute):
        return getattr(self._inner, attribute)

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        hooks = _hooks.pop(self._name, [])
        for before, _ in hooks:
            if before is not None:
                before()
        ok = False
        try:
            self._inner.exec_module(module)
            ok = True
        finally:
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._inner
            module.__loader__ = self._inner
            for _, after in hooks:
                if after is not None:
                    after(module, ok)


class _Finder:
    def find_spec(self, fullname, path, target=None):
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None


_finder = _Finder()


def around_first_exec(name, before=None, after=None):
    """Call ``before()`` just before module NAME first executes and ``after(module, ok)`` right after."""
    _hooks.setdefault(name, []).append((before, after))
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def when_imported(name, callback):
    """Call ``callback(module)`` once NAME is imported: now if it already is, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
    else:
        around_first_exec(name, after=lambda imported, ok: ok and callback(imported))
