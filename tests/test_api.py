"""Method 1: the Profiler API, with and without the hook, on real MindSpore and a PyTorch loop."""
import os
import subprocess

import pytest

from conftest import EXAMPLES, PY, SCRIPTS, agent_lines, hook_env, read_json, run_script, step_numbers

API_TORCH = os.path.join(SCRIPTS, "api_torch.py")
API_MS = os.path.join(EXAMPLES, "api_mindspore.py")


@pytest.mark.unit
def test_importing_the_package_stays_light():
    code = "import sys, msprof_agent; print('msprof_agent.api' in sys.modules, 'wrapt' in sys.modules); print(msprof_agent.Profiler.__module__)"
    result = subprocess.run([PY, "-c", code], env=hook_env(hook=False), capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["False", "False", "msprof_agent.api"], result.stderr


@pytest.mark.unit
def test_bad_option_raises_value_error_from_the_constructor():
    from msprof_agent import Profiler

    with pytest.raises(ValueError, match='unknown key "output_pth" \\(did you mean "output_path"\\?\\)'):
        Profiler(output_pth="/tmp/x")
    with pytest.raises(ValueError, match='key "profile_memory": true needs "op_time": true'):
        Profiler(op_time=False, profile_memory=True)


@pytest.mark.torch
def test_torch_conditional_loop_without_the_hook(tmp_path):
    """The MindSpore Profiler guide's conditional loop: start() after iteration 3, stop() after iteration 7 -> steps 5..8."""
    out = str(tmp_path / "out")
    result = run_script([API_TORCH, out, "12", "3", "7"], hook=False)
    assert result.returncode == 0, result.stderr
    assert step_numbers(os.path.join(out, "profiler")) == [5, 6, 7, 8]
    summary = read_json(os.path.join(out, "profiler", "summary_0.json"))
    assert summary["steps_total"] == 12 and summary["framework"] == "torch" and summary["ops_recorded"] > 0
    # offline_analyse re-runs on the same raw data and gives the same steps
    code = f"from msprof_agent import Profiler; print(Profiler.offline_analyse({out!r})[0]['step_range'])"
    again = subprocess.run([PY, "-c", code], env=hook_env(hook=False), capture_output=True, text=True, timeout=300)
    assert again.stdout.strip() == "[5, 8]", again.stderr


@pytest.mark.torch
def test_api_takes_over_the_session_the_variable_started(tmp_path):
    env_out, api_out = str(tmp_path / "env"), str(tmp_path / "api")
    result = run_script([API_TORCH, api_out, "12", "3", "7"], options={"start": True, "output_path": env_out})
    assert result.returncode == 0, result.stderr
    lines = agent_lines(result.stderr)
    takeover = [line for line in lines if "takes over" in line]
    assert len(takeover) == 1 and "MS_PROFILER_OPTIONS already started a session" in takeover[0]
    assert step_numbers(os.path.join(env_out, "profiler")) == [5, 6, 7, 8]
    assert not os.path.exists(api_out)
    assert sum("profiled" in line for line in lines) == 1  # one collection, analysed once


@pytest.mark.torch
def test_context_manager_profiles_the_block(tmp_path):
    out = str(tmp_path / "out")
    script = tmp_path / "ctx.py"
    script.write_text(
        "import torch\nfrom msprof_agent import Profiler\n"
        "model = torch.nn.Linear(4, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "def step():\n    opt.zero_grad(); model(torch.randn(2, 4)).sum().backward(); opt.step()\n"
        "step(); step()\n"
        f"with Profiler(output_path={out!r}) as prof:\n    step(); step(); step()\n"
        "step()\nprint('ok')\n")
    result = run_script([str(script)], hook=False)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr
    assert step_numbers(os.path.join(out, "profiler")) == [1, 2, 3]  # without the hook, steps count from Profiler()


MS_CASES = [
    # (example flags, output folder under the run dir, expected steps)
    # start() after step 4's train_step: step 4 has ended with its work, so start() is in step 5's interval
    (["--example", "conditional", "--samples", "12", "--start", "3", "--stop", "6"], "data", [5, 6, 7]),
    (["--example", "stop_at_step", "--samples", "10", "--start", "3", "--stop", "6"], "profiler_data/rank_{rank}", [3, 4, 5, 6]),
    (["--example", "stop_at_epoch", "--epochs", "4", "--samples", "3", "--start", "2", "--stop", "3"], "profiler_data/rank_{rank}", [4, 5, 6, 7, 8, 9]),
    (["--example", "functional", "--epochs", "2", "--samples", "4"], "profiler_data", list(range(1, 9))),
    (["--example", "model_train", "--epochs", "2", "--samples", "4"], "profiler_data", list(range(1, 9))),
]


@pytest.mark.mindspore
@pytest.mark.parametrize("flags, folder, expected", MS_CASES, ids=[c[0][1] for c in MS_CASES])
def test_guide_method_1_examples_on_mindspore(flags, folder, expected, tmp_path):
    pytest.importorskip("mindspore")
    rank = 1 if "rank" in folder else 0
    result = run_script([API_MS, "--output", str(tmp_path)] + flags, hook=False, extra_env={"RANK_ID": str(rank)} if rank else None)
    assert result.returncode == 0 and "done" in result.stdout, result.stderr[-3000:]
    profiler_dir = os.path.join(str(tmp_path), folder.format(rank=rank), "profiler")
    assert step_numbers(profiler_dir, rank) == expected
    summary = read_json(os.path.join(profiler_dir, f"summary_{rank}.json"))
    assert summary["framework"] == "mindspore" and summary["ops_recorded"] > 0
    assert sum("msprof-agent: profiled" in line for line in result.stderr.splitlines()) == 1
