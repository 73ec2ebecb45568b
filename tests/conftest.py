"""Shared helpers: run a real Python script in a subprocess under the hook, and read what it wrote."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK_DIR = os.path.join(ROOT, "sitecustomize_hook")
EXAMPLES = os.path.join(ROOT, "examples")
PY = sys.executable


def hook_env(options=None, extra=None, hook=True):
    """A child environment with the hook on PYTHONPATH and MS_PROFILER_OPTIONS set (dict -> JSON, str as is)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "PYTHONPATH", "RANK_ID", "RANK", "DEVICE_ID", "LOCAL_RANK", "WORLD_SIZE", "RANK_SIZE", "PROFILING_FP_START", "PROFILING_BP_END", "MSPROF_DYNAMIC_CFG")}
    if hook:
        env["PYTHONPATH"] = HOOK_DIR
    if options is not None:
        env["MS_PROFILER_OPTIONS"] = options if isinstance(options, str) else json.dumps(options)
    env.setdefault("GLOG_v", "3")  # MindSpore: errors only, keep test logs readable
    env.update(extra or {})
    return env


def run_script(args, options=None, extra_env=None, cwd=None, timeout=600, hook=True):
    """Run ``python ARGS`` (a list) and return the CompletedProcess with text output."""
    return subprocess.run([PY] + list(args), env=hook_env(options, extra_env, hook), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def read_csv(path):
    import csv

    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def read_records(profiler_dir, rank):
    """Every record of one rank's raw store; a torn last line (killed mid-write) is skipped."""
    import orjson

    from msprof_agent.store import raw_lines

    records = []
    for line in raw_lines(profiler_dir, rank):
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return records


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


@pytest.fixture
def out_dir(tmp_path):
    return str(tmp_path / "prof")


def overlapping_slices(events):
    """The complete (``X``) slices that overlap another on their (pid, tid) track without nesting in it,
    read as a viewer does: ``ts`` and ``dur`` parsed as doubles (us), then taken to the nearest ns."""
    tracks = {}
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "X":
            start = round(event["ts"] * 1000)
            tracks.setdefault((event.get("pid"), event.get("tid")), []).append((start, start + round(event["dur"] * 1000), event.get("name")))
    bad = []
    for track, slices in tracks.items():
        open_ends = []  # the ends of the slices enclosing the current one, innermost last
        for start, end, name in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1][0] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1][0]:
                bad.append((track, name, start, end, open_ends[-1]))
            open_ends.append((end, name))
    return bad
