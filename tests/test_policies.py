"""Capture policies: periodic and slow-step windows, each in its own folder and listed in the run's summary."""
import os

import pytest

from conftest import SCRIPTS, TINY, agent_lines, read_json, read_records, run_script, steps_in, windows_made


@pytest.mark.torch
def test_periodic_windows_in_a_60_step_torch_job(out_dir):
    capture = {"every": 20, "steps": 3, "first": 20}
    result = run_script([TINY, "--steps", "60", "--sleep-ms", "5"], {"start": True, "output_path": out_dir, "capture": capture})
    assert result.returncode == 0 and "trained 60 steps" in result.stdout, result.stderr
    assert windows_made(out_dir) == ["window_20_22", "window_40_42"]  # 60-62 would be cut short by the end: dropped
    assert steps_in(os.path.join(out_dir, "window_20_22")) == [20, 21, 22]
    assert steps_in(os.path.join(out_dir, "window_40_42")) == [40, 41, 42]
    assert read_json(os.path.join(out_dir, "window_40_42", "profiler", "summary_0.json"))["ops_recorded"] > 0
    run = read_json(os.path.join(out_dir, "profiler", "summary_0.json"))
    assert run["steps_total"] == 60 and run["steps_profiled"] == 0
    assert [(w["trigger"], w["steps"]) for w in run["windows"]] == [("periodic", [20, 21, 22]), ("periodic", [40, 41, 42])]


@pytest.mark.torch
def test_a_slow_step_triggers_the_next_steps(out_dir):
    capture = {"slow_step": 4, "steps": 3, "max_windows": 1}
    result = run_script([TINY, "--steps", "20", "--sleep-ms", "25", "--slow-at", "9", "--slow-ms", "300"],
                        {"start": True, "output_path": out_dir, "capture": capture})
    assert result.returncode == 0 and "trained 20 steps" in result.stdout, result.stderr
    assert windows_made(out_dir) == ["window_10_12"]
    folder = os.path.join(out_dir, "window_10_12")
    assert steps_in(folder) == [10, 11, 12]

    kept = [r for r in read_records(os.path.join(folder, "profiler"), 0) if r["k"] == "step" and not r["win"]]
    assert [r["n"] for r in kept] == [9] and (kept[0]["end"] - kept[0]["start"]) / 1e6 >= 300  # the slow step's host record
    (window,) = read_json(os.path.join(out_dir, "profiler", "summary_0.json"))["windows"]
    assert window["trigger"] == "slow_step" and window["slow_step"] == 9 and window["slow_ms"] >= 300 and window["median_ms"] < 75


@pytest.mark.unit
@pytest.mark.parametrize("capture, expected", [
    ({"every": 0, "steps": 3}, 'key "capture.every": got 0'),
    ({"every": 5, "steps": 8}, 'key "capture.steps": got 8, more than "every" 5'),
    ({"slow_step": 0.9}, 'key "capture.slow_step": got 0.9; accepted: a number above 1'),
    ({"slow_step": 2, "every": 3}, 'accepted: {"every": N'),
    ({"every": 10, "sleep": 1}, 'unknown key "sleep" in a every policy'),
    ("often", 'key "capture": got \'often\''),
])
def test_a_policy_error_gets_one_line_and_the_job_is_unharmed(capture, expected, tmp_path):
    """Checked at start-up, before any framework (test_agent's torch case shows a training unharmed)."""
    result = run_script([os.path.join(SCRIPTS, "plain_job.py")], {"start": True, "output_path": str(tmp_path / "p"), "capture": capture})
    assert result.returncode == 0 and "trained 6 steps" in result.stdout
    lines = agent_lines(result.stderr)
    assert len(lines) == 1 and expected in lines[0] and "Profiling is off for this run." in lines[0], result.stderr
    assert not os.path.exists(tmp_path / "p")


@pytest.mark.unit
def test_capture_excludes_a_step_window():
    from msprof_agent.options import OptionsError, from_mapping

    with pytest.raises(OptionsError, match='"capture" or "start_step"/"stop_step", not both'):
        from_mapping({"capture": {"every": 10}, "start_step": 3})
    assert from_mapping({"capture": {"every": 10}}).capture == {"every": 10, "steps": 3, "first": 10, "max_windows": None, "max_trace_mb": None}


@pytest.mark.torch
def test_max_trace_mb_stops_further_windows(out_dir):
    capture = {"every": 4, "steps": 2, "first": 2, "max_trace_mb": 0.001}
    result = run_script([TINY, "--steps", "16", "--sleep-ms", "5"], {"start": True, "output_path": out_dir, "capture": capture})
    assert result.returncode == 0, result.stderr
    assert windows_made(out_dir) == ["window_2_3"]
    assert result.stderr.count("max_trace_mb 0.001 reached") == 1


@pytest.mark.unit
def test_a_failing_listener_is_reported_once_and_steps_go_on(tmp_path, capsys):
    from msprof_agent.online_analysis import analyse
    from msprof_agent.options import from_mapping
    from msprof_agent.session import Session

    class Broken:
        def step_opened(self, n, start_ns):
            raise RuntimeError("policy bug")

        def step_closed(self, step):
            raise RuntimeError("policy bug")

    session = Session(from_mapping({"start": True, "output_path": str(tmp_path)}), "test", analyse)
    session.listeners.append(Broken())
    for _ in range(3):
        session.steps.open()
        session.steps.close()
    assert session.steps.completed == 3
    assert capsys.readouterr().err.count("policy bug") == 1
    session.writer.abandon()
