"""The advisor on a third-party training stack as a new user runs it: the documented accelerate loop
(tests/scripts/stack_accelerate.py) in the stack's own cached venv (``conftest.stack_python``: pinned,
over the tests' torch build), once clean and once with each injected cause: the top finding is the
cause; the clean run has no memory finding (the profiler's buffer, and the freed holes its events leave
in the heap, are ours); the real leak (a list keeping each step's 2 MiB output) is memory growth, with
op_time on (the default) and off. Each job runs once per module (``job``).
"""
import os

import pytest

from conftest import SCRIPTS, hook_env, profile_into, read_json, stack_python

ACCELERATE = ("stack-accelerate-1.15.0", ["accelerate==1.15.0"])
SCRIPT = os.path.join(SCRIPTS, "stack_accelerate.py")
STEPS = ["--steps", "24"]
JOBS = {  # name: (arguments, extra options)
    "clean": (["--workers", "2"], {}),
    "getitem": (["--workers", "2", "--sample-ms", "1.5"], {}),  # 64 samples: ~96 ms a batch a worker
    "loop": (["--workers", "2", "--loop-ms", "40"], {}),
    "pause": (["--workers", "2", "--pause-every", "4", "--pause-ms", "120"], {}),
    "leak": (["--workers", "2", "--leak"], {}),
    "leak_no_ops": (["--workers", "2", "--leak"], {"op_time": False}),
}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """``job(name)``: the summary of that accelerate job, run on first use."""
    import subprocess

    python = stack_python(*ACCELERATE)
    done = {}

    def run(name):
        if name not in done:
            arguments, options = JOBS[name]
            out = str(tmp_path_factory.mktemp(name))
            proc = subprocess.run([python, SCRIPT] + STEPS + arguments, env=hook_env(profile_into(out, **options)),
                                  capture_output=True, text=True, timeout=300, cwd=out)
            assert proc.returncode == 0, proc.stderr[-3000:]
            done[name] = read_json(os.path.join(out, "profiler", "summary_0.json"))
        return done[name]
    return run


def top(summary, finding_id):
    first = summary["findings"][0]
    assert first["id"] == finding_id, [(f["id"], f["ms_per_step"]) for f in summary["findings"]]
    return first


def near(value, expected):
    assert abs(value - expected) <= 0.20 * expected, (value, expected)


@pytest.mark.torch
def test_clean_accelerate_run_has_no_memory_finding(job):
    """The profiler's own event buffer (torch.profiler holds every event until its session stops) is ours."""
    findings = job("clean")["findings"]
    assert "memory_growth" not in {f["id"] for f in findings}, findings


@pytest.mark.torch
def test_slow_getitem_is_data_bound_with_the_mean_wait_and_workers_advice(job):
    summary = job("getitem")
    finding = top(summary, "data_wait")
    assert finding["ms_per_step"] == round(summary["step_breakdown_mean_ms"]["wait"], 1)
    assert "num_workers is 2" in finding["action"] or "num_workers from 2 to" in finding["action"], finding["action"]


@pytest.mark.torch
def test_host_work_in_the_loop_is_host_bound(job):
    top(job("loop"), "host_work")


@pytest.mark.torch
def test_periodic_pause_is_jitter_every_4_steps(job):
    finding = top(job("pause"), "periodic_pause")
    assert finding["evidence"]["period"] == 4
    near(finding["ms_per_step"], 120.0 * len(finding["evidence"]["steps"]) / job("pause")["steady_steps"])


@pytest.mark.torch
@pytest.mark.parametrize("name", ["leak", "leak_no_ops"])
def test_a_list_keeping_each_steps_output_is_memory_growth(job, name):
    """With op_time on, RSS grows ~4 MiB a step in the clean run too (freed heap the profiler's events
    fragment): the verdict is read on the heap's bytes in use, the same with op_time on and off."""
    finding = top(job(name), "memory_growth")
    assert finding["severity"] == "high"
    near(finding["evidence"]["bytes_per_step"], 2 << 20)
