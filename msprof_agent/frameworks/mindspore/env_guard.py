"""Keep MindSpore's own env-var profiler from starting a second collection.

``import mindspore`` runs ``mindspore/profiler/envprofiler.py``, whose last line reads
MS_PROFILER_OPTIONS and starts MindSpore's profiler (and aborts the import on valid JSON that is
not an object). A post-import hook would run too late, so the variable is hidden only while that
one module executes. It stays in ``os.environ`` for everything else, child processes included.
"""
import os
import sys

from ...environment import OPTIONS
from ..import_hooks import around_first_exec

TARGET = "mindspore.profiler.envprofiler"
_hidden = []


def _hide():
    _hidden.append(os.environ.pop(OPTIONS, None))


def _restore(_module, _ok):
    saved = _hidden.pop() if _hidden else None
    if saved is not None:
        os.environ[OPTIONS] = saved


def hide_variable_from_mindspore():
    if TARGET not in sys.modules:
        around_first_exec(TARGET, before=_hide, after=_restore)
