"""msprof-agent: zero-code profiling of MindSpore and PyTorch training.

Kept import-light: the hook imports submodules directly, and the public API is loaded on first use.
"""
__version__ = "0.1.0"

TYPE_CHECKING = False  # nothing more is imported at run time
if TYPE_CHECKING:  # the lazy names, for type checkers
    from .api import Profiler as Profiler
    from .dynamic import DynamicProfilerMonitor as DynamicProfilerMonitor

_LAZY = {"Profiler": "api", "DynamicProfilerMonitor": "dynamic"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
