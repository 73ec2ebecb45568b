"""The hook's bytecode, written by ``msprof-agent run`` so that no job's interpreter compiles the hook at start."""
import importlib.util
import os
import shutil

import pytest

from conftest import ROOT
from msprof_agent import doors

pytestmark = pytest.mark.unit


def test_compile_hook_writes_missing_or_stale_bytecode_only(tmp_path):
    shutil.copyfile(os.path.join(ROOT, "sitecustomize_hook", "sitecustomize.py"), tmp_path / "sitecustomize.py")
    cached = importlib.util.cache_from_source(str(tmp_path / "sitecustomize.py"))
    doors.compile_hook(str(tmp_path))
    assert os.path.isfile(cached)
    written = os.stat(cached).st_mtime_ns
    doors.compile_hook(str(tmp_path))
    assert os.stat(cached).st_mtime_ns == written  # up to date: left alone
    later = os.stat(tmp_path / "sitecustomize.py").st_mtime + 10
    os.utime(tmp_path / "sitecustomize.py", (later, later))
    doors.compile_hook(str(tmp_path))
    assert os.stat(cached).st_mtime_ns != written

