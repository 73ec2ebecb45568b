"""A window opened at step 5 and closed after step 9 holds exactly steps 5..9, whichever door opened it.

The doors: the Profiler API (the seed's loop, a start in the middle of a step, MindSpore's StopAtStep
callback), ``start_step``/``stop_step`` in the variable, the dynamic configuration file and a capture
policy. A start during step k takes step k whole; a stop after step m's work keeps step m only.
"""
import json
import os

import pytest

from conftest import EXAMPLES, SCRIPTS, TINY, profile_into, read_records, run_script, steps_in, windows_made

WINDOW = [5, 6, 7, 8, 9]
STEPS = "14"


def _ran(result, marker):
    assert result.returncode == 0 and marker in result.stdout, result.stderr[-3000:]


@pytest.mark.torch
@pytest.mark.parametrize("start, where", [(3, "after step 4's work: in step 5's interval"), (4, "inside step 5, after its backward")],
                         ids=["seed-loop", "mid-step"])
def test_profiler_api(start, where, tmp_path):
    out = str(tmp_path / "api")
    result = run_script([os.path.join(SCRIPTS, "api_torch.py"), out, STEPS, str(start), "8"] + (["inside"] if start == 4 else []), hook=False)
    _ran(result, "done")
    assert steps_in(out) == WINDOW, where
    if start == 4:  # step 5 is whole in the step trace, its ops are those from the start on: the optimizer's, no forward
        records = read_records(os.path.join(out, "profiler"), 0)
        step = next(r for r in records if r.get("k") == "step" and r["n"] == 5)
        names = {batch["name_table"][code] for batch in records if batch.get("k") == "ops"
                 for code, at in zip(batch["name_codes"], batch["start"]) if step["start"] <= at < step["end"]}
        assert names and any("Optimizer.step" in name for name in names) and not any("linear" in name or "mse" in name for name in names), names


@pytest.mark.torch
def test_start_step_and_stop_step(out_dir):
    _ran(run_script([TINY, "--steps", STEPS], profile_into(out_dir, start_step=5, stop_step=9)), "")
    assert steps_in(out_dir) == WINDOW


@pytest.mark.torch
def test_dynamic_window(tmp_path):
    cfg, out = str(tmp_path / "cfg"), str(tmp_path / "out")
    edit = "--edit=2:" + json.dumps({"start_step": 5, "stop_step": 9, "analyse_mode": 0})
    _ran(run_script([os.path.join(SCRIPTS, "dynamic_torch.py"), "--cfg", cfg, "--out", out, "--steps", STEPS, edit], hook=False), "trained")
    assert windows_made(out) == ["window_5_9"] and steps_in(os.path.join(out, "window_5_9")) == WINDOW


@pytest.mark.torch
def test_capture_policy(out_dir):
    _ran(run_script([TINY, "--steps", STEPS], profile_into(out_dir, capture={"every": 20, "steps": 5, "first": 5})), "")
    assert windows_made(out_dir) == ["window_5_9"] and steps_in(os.path.join(out_dir, "window_5_9")) == WINDOW


@pytest.mark.mindspore
def test_mindspore_stop_at_step_callback(tmp_path):
    """The guide's StopAtStep: start() in on_train_step_begin of step 5, stop() in on_train_step_end of step 9."""
    pytest.importorskip("mindspore")
    flags = ["--example", "stop_at_step", "--samples", STEPS, "--start", "5", "--stop", "9"]
    _ran(run_script([os.path.join(EXAMPLES, "api_mindspore.py"), "--output", str(tmp_path)] + flags, hook=False), "done")
    assert steps_in(os.path.join(str(tmp_path), "profiler_data", "rank_0")) == WINDOW
