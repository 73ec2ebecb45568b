"""Keep MindSpore's own env-var profiler from starting a second collection.

``import mindspore`` runs ``mindspore/profiler/envprofiler.py``, whose last line reads
MS_PROFILER_OPTIONS and starts MindSpore's profiler (and aborts the import on valid JSON that is
not an object). A wrapt post-import hook would run too late, so this meta-path finder wraps that
one module's ``exec_module`` and hides the variable only while it executes. The variable stays in
``os.environ`` for everything else, child processes included. Standard library only.
"""
import importlib.abc
import os
import sys

TARGET = "mindspore.profiler.envprofiler"
VARIABLE = "MS_PROFILER_OPTIONS"


class _HidingLoader(importlib.abc.Loader):
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        saved = os.environ.pop(VARIABLE, None)
        try:
            self._inner.exec_module(module)
        finally:
            if saved is not None:
                os.environ[VARIABLE] = saved


class _EnvProfilerFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _HidingLoader(spec.loader)
                return spec
        return None


def hide_variable_from_mindspore():
    if TARGET not in sys.modules and not any(isinstance(f, _EnvProfilerFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _EnvProfilerFinder())
