"""Step boundaries in every loop style: host work injected at known places must land in the right stage.

Each loop sleeps 100 ms in the step before its forward (``--before-ms``), 100 ms after the step
(``--after-ms``: the next step's interval) and, where user code sits between backward and update
(PyTorch, PYNATIVE), 100 ms there (``--between-ms``: the tail). The medians over steady steps (the
first 2 compile or allocate) must be within max(10 %, 5 ms) of the injected work, as long as the
script measured it to take (a loaded machine wakes a sleeper late). One run per loop style, shared
by its tests.
"""
import json
import os
import statistics
import subprocess

import pytest

from conftest import PY, ROOT, hook_env, read_csv, read_json, run_script

SCRIPTS = os.path.join(ROOT, "tests", "scripts")
INJECTED_MS = 100.0
STEPS = 12


def within(measured, expected):
    return abs(measured - expected) <= max(0.1 * expected, 5.0)


def profile(tmp_path_factory, script, args, extra_env=None, **options):
    out = str(tmp_path_factory.mktemp("run"))
    proc = run_script([os.path.join(SCRIPTS, script), "--steps", str(STEPS)] + args,
                      {"start": True, "output_path": out, **options},
                      extra_env=extra_env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "failed, the job goes on" not in proc.stderr, proc.stderr
    profiler_dir = os.path.join(out, "profiler")
    printed = {key: json.loads(value) for key, value in (line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith("script_"))}
    return {"dir": profiler_dir, "script_steps": printed["script_steps"], "script_sleeps": printed["script_sleeps"],
            "summary": read_json(os.path.join(profiler_dir, "summary_0.json"))}


def stage_medians(run):
    """Median ms of each stage over the steady steps (the step trace CSV, 10 ns units, average row dropped)."""
    rows = read_csv(os.path.join(run["dir"], "step_trace_raw_0_detail_time.csv"))[1:-1]
    assert len(rows) == len(run["script_steps"]), rows
    steady = rows[2:]
    median = lambda column: statistics.median(int(r[column]) for r in steady) / 1e5  # noqa: E731
    return {"total": median(3), "interval": median(6), "fp_and_bp": median(7), "tail": median(8)}


def slept_medians(run):
    """Median ms of the injected work each stage should hold over the steady steps: the interval holds
    the step's work before its forward and the work after the step before it."""
    sleeps = run["script_sleeps"]
    steady = range(2, len(run["script_steps"]))
    return {"interval": statistics.median(sleeps[i].get("before", 0) + sleeps[i - 1].get("after", 0) for i in steady),
            "tail": statistics.median(sleeps[i].get("between", 0) for i in steady)}


def check_stages(run, tail_ms):
    stages, slept = stage_medians(run), slept_medians(run)
    assert slept["interval"] >= 2 * INJECTED_MS and slept["tail"] >= tail_ms, slept
    assert within(stages["interval"], slept["interval"]), (stages, slept)
    if tail_ms:
        assert within(stages["tail"], slept["tail"]), (stages, slept)
    else:  # no injected work: only the update's own ops (GRAPH), which a loaded machine stretches
        assert stages["tail"] < 0.5 * INJECTED_MS, stages


LOOPS = {  # name: (script, args, tail)
    "ms-graph-iterator": ("ms_loops.py", ["--mode", "graph", "--feed", "iterator"], 0.0),
    "ms-graph-tensors": ("ms_loops.py", ["--mode", "graph", "--feed", "tensors"], 0.0),
    "ms-pynative-iterator": ("ms_loops.py", ["--mode", "pynative", "--feed", "iterator"], INJECTED_MS),
    "ms-pynative-tensors": ("ms_loops.py", ["--mode", "pynative", "--feed", "tensors"], INJECTED_MS),
    "ms-graph-infer": ("ms_loops.py", ["--mode", "graph", "--infer"], 0.0),
    "ms-pynative-infer": ("ms_loops.py", ["--mode", "pynative", "--infer", "--feed", "iterator"], 0.0),
    "torch-train": ("torch_loops.py", [], INJECTED_MS),
    "torch-accumulate": ("torch_loops.py", ["--accumulate", "3"], INJECTED_MS),
    "torch-infer": ("torch_loops.py", ["--infer"], 0.0),
}
SLEEPS = ["--before-ms", str(INJECTED_MS), "--after-ms", str(INJECTED_MS), "--between-ms", str(INJECTED_MS)]


def _marked(name):
    return pytest.param(name, marks=pytest.mark.mindspore if name.startswith("ms") else pytest.mark.torch)


@pytest.fixture(scope="module", params=[_marked(name) for name in LOOPS])
def loop(request, tmp_path_factory):
    name = request.param
    pytest.importorskip("mindspore" if name.startswith("ms") else "torch")
    script, args, tail = LOOPS[name]
    return dict(profile(tmp_path_factory, script, args + SLEEPS), name=name, tail=tail)


def test_every_loop_has_its_steps_and_host_work_lands_where_it_happened(loop):
    summary = loop["summary"]
    assert summary["steps_total"] == STEPS, summary
    check_stages(loop, loop["tail"])
    if "infer" in loop["name"]:
        assert any("inference loop" in note for note in summary["notes"]), summary["notes"]


def test_fp_and_bp_points_are_the_first_forward_and_last_backward_op(loop):
    points, name = loop["summary"]["step_points"], loop["name"]
    assert points["fp_rule"] == "first forward op", points
    op_type = points["fp_start"].rsplit("/", 1)[-1].split("-op")[0]
    assert op_type in (("Reshape", "MatMul") if name.startswith("ms") else ("aten::linear",)), points  # the first Dense / Linear
    if "infer" in name:
        return
    if name.startswith("ms-pynative"):  # PYNATIVE op names carry no scope: the host's marker decides
        assert points["bp_rule"] == "last op before the host backward end" and points["bp_end"] in ("MatMul", "Default/BiasAddGrad-op0"), points
    elif name.startswith("ms"):
        assert points["bp_rule"] == "last op of the gradient scope" and points["bp_end"].startswith("Gradients/Default/Grad_"), points
    else:
        assert points["bp_rule"] == "last op of the gradient scope" and points["bp_end"].startswith("autograd::engine"), points


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "with_stack"])
def handed_over(request, tmp_path_factory):
    """Host work after each optimizer step, with profiler sessions of ~300 events: a hand-over every step or two."""
    pytest.importorskip("torch")
    return profile(tmp_path_factory, "torch_loops.py", ["--after-ms", str(INJECTED_MS)],
                   extra_env={"MSPROF_TORCH_SESSION_EVENTS": "300"}, with_stack=request.param)


@pytest.mark.torch
def test_profiler_hand_overs_hide_no_user_time(handed_over):
    from msprof_agent.analysis.rundata import load_rank

    data = load_rank(handed_over["dir"], 0)
    assert len(data.pauses) >= 3, data.pauses
    expected = []
    for start, end in handed_over["script_steps"]:
        ours = sum(min(p["end"], end) - max(p["start"], start) for p in data.pauses if p["start"] < end and p["end"] > start)
        expected.append((end - start - ours) / 1e6)
    stages = stage_medians(handed_over)
    assert within(stages["total"], statistics.median(expected[2:])), (stages, expected)
    assert within(stages["interval"], slept_medians(handed_over)["interval"]), stages
    intervals = [int(r[6]) / 1e5 for r in read_csv(os.path.join(handed_over["dir"], "step_trace_raw_0_detail_time.csv"))[2:-1]]
    assert min(intervals) >= INJECTED_MS, intervals  # no step loses its share of the user's work to a hand-over


@pytest.mark.torch
def test_a_process_that_never_steps_a_model_leaves_nothing_and_says_nothing(tmp_path):
    """With the variable exported every Python process starts the agent: a torch one-liner, ``print(1)`` or pip
    make no output folder and print nothing of ours; ``msprof-agent run`` says why there is no profile."""
    pytest.importorskip("torch")
    code = "import torch\nx = torch.randn(64, 64)\nfor _ in range(20):\n    x = (x @ x).tanh()\n"
    out = tmp_path / "out"
    for command in (["-c", code], ["-c", "print(1)"], ["-m", "pip", "--version"]):
        proc = run_script(command, {"start": True, "output_path": str(out)}, timeout=120)
        assert proc.returncode == 0 and "msprof-agent" not in proc.stderr, (command, proc.stderr)
        assert not out.exists(), (command, list(out.rglob("*")))
    proc = subprocess.run([PY, "-m", "msprof_agent", "run", "--output-path", str(out), "--", PY, "-c", code],
                          env=hook_env(), capture_output=True, text=True, timeout=120)
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("msprof-agent:")]
    assert proc.returncode == 0 and "the job ran no MindSpore or PyTorch training step" in line and "nn.Module" in line, proc.stderr
