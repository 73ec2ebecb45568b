"""Method 3: the dynamic monitor in a PyTorch loop, in MindSpore's Model.train, and zero-code; live edits."""
import json
import os
import statistics
import subprocess
import time

import pytest

from conftest import EXAMPLES, PY, SCRIPTS, TINY, hook_env, read_json, read_records, run_script, step_numbers, steps_in, windows_made

DYN_TORCH = os.path.join(SCRIPTS, "dynamic_torch.py")
DYN_MS = os.path.join(EXAMPLES, "api_dynamic_mindspore.py")


def window(start, stop, mode=0, **extra):
    return json.dumps(dict({"start_step": start, "stop_step": stop, "analyse_mode": mode}, **extra))


def warnings(stderr):
    return [line for line in stderr.splitlines() if line.startswith("msprof-agent:") and "keeping the previous settings" in line]


# -- the configuration file ---------------------------------------------------------------------------

@pytest.mark.unit
def test_default_config_is_written_once_and_never_overwritten(tmp_path):
    from msprof_agent.dynamic import DEFAULTS, write_default_config

    path = str(tmp_path / "cfg" / "profiler_config.json")
    assert write_default_config(path) is True
    assert read_json(path) == DEFAULTS
    with open(path, "w") as handle:
        handle.write(window(3, 4))
    assert write_default_config(path) is False  # another rank (or the user) was first: keep theirs
    assert read_json(path)["start_step"] == 3
    assert os.listdir(tmp_path / "cfg") == ["profiler_config.json"]


@pytest.mark.unit
@pytest.mark.parametrize("values, expected", [
    ({"start_step": 5, "stop_step": 2}, '"start_step" 5 is after "stop_step" 2'),
    ({"start_step": 5}, "set both"),
    ({"start_step": 0, "stop_step": 2}, 'key "start_step": got 0'),
    ({"start_step": 1, "stop_step": 2, "analyse_mode": 3}, 'key "analyse_mode": got 3; accepted: -1, 0, 1'),
    ({"start_step": 1, "stop_step": 2, "with_stack": "yes"}, 'key "with_stack": got \'yes\''),
    ([1, 2], "expected a JSON object"),
])
def test_bad_configurations_are_named(values, expected):
    from msprof_agent.dynamic import ConfigError, parse_config
    from msprof_agent.options import Options

    with pytest.raises(ConfigError) as info:
        parse_config(values, Options())
    assert expected in str(info.value)


@pytest.mark.unit
def test_guide_keys_map_onto_the_window_options():
    from msprof_agent.dynamic import parse_config
    from msprof_agent.options import Options

    start, stop, options, mode = parse_config({"start_step": 10, "stop_step": 10, "analyse_mode": 1, "profile_framework": 1,
                                               "with_stack": True, "parallel_strategy": True, "profile_memory": True}, Options())
    assert (start, stop, mode) == (10, 10, "async")
    assert options.profile_framework == "time" and options.with_stack and options.profile_memory and options.parallel_strategy


# The example in MindSpore's DynamicProfilerMonitor docstring, as written (its "record_shape" is a typo MindSpore ignores).
MINDSPORE_EXAMPLE = {
    "start_step": 2, "stop_step": 5, "aic_metrics": "AiCoreNone", "profiler_level": "Level0", "analyse_mode": 0,
    "activities": ["CPU", "NPU"], "export_type": ["text"], "profile_memory": False, "mstx": False, "parallel_strategy": False,
    "with_stack": False, "data_simplification": True, "l2_cache": False, "analyse": True, "record_shape": False,
    "prof_path": "./data", "mstx_domain_include": [], "mstx_domain_exclude": [], "host_sys": [], "sys_io": False,
    "sys_interconnection": False,
}


@pytest.mark.unit
def test_mindspore_format_is_read_and_an_unknown_key_is_ignored_with_one_warning(capsys, tmp_path, monkeypatch):
    from msprof_agent.dynamic import parse_config
    from msprof_agent.options import Options

    monkeypatch.chdir(tmp_path)
    start, stop, options, mode = parse_config(MINDSPORE_EXAMPLE, Options())
    assert (start, stop, mode) == (2, 5, "sync")
    assert options.output_path == str(tmp_path / "data") and options.aic_metrics == "None" and options.op_time
    parse_config(MINDSPORE_EXAMPLE, Options())
    warnings = [line for line in capsys.readouterr().err.splitlines() if "record_shape" in line]
    assert len(warnings) == 1 and 'unknown key "record_shape" (did you mean "record_shapes"?)' in warnings[0]
    assert "ignored" in warnings[0]


@pytest.mark.unit
@pytest.mark.parametrize("values, expected", [
    ({"profiler_level": 1, "aic_metrics": 0, "activities": 1, "export_type": 2, "analyse": False},
     {"profile_communication": True, "aic_metrics": "PipeUtilization", "activities": ["CPU"], "export_type": ["text", "db"]}),
    ({"profiler_level": "Level2", "host_sys": ["disk", "network"], "mstx": True, "mstx_domain_include": ["train"]},
     {"profile_memory": True, "host_sys": ["disk", "network"], "mstx": True, "mstx_domain_include": ["train"]}),
])
def test_mindspore_integer_codes_and_names(values, expected):
    from msprof_agent.dynamic import parse_config
    from msprof_agent.options import Options

    options = parse_config(dict(values, start_step=1, stop_step=1), Options())[2]
    assert {key: getattr(options, key) for key in expected} == expected


@pytest.mark.unit
@pytest.mark.parametrize("values, expected", [
    ({"aic_metrics": 8}, 'key "aic_metrics": got 8; accepted: 0 ("PipeUtilization")'),
    ({"profiler_level": "Level3"}, 'key "profiler_level": got \'Level3\''),
    ({"activities": ["CPU", "TPU"]}, 'key "activities": got [\'CPU\', \'TPU\']'),
    ({"analyse": "yes"}, 'key "analyse": got \'yes\''),
])
def test_mindspore_format_values_are_checked_strictly(values, expected):
    from msprof_agent.dynamic import ConfigError, parse_config
    from msprof_agent.options import Options

    with pytest.raises(ConfigError) as info:
        parse_config(dict(values, start_step=1, stop_step=1), Options())
    assert expected in str(info.value)


# -- live edits in real training runs -------------------------------------------------------------------

@pytest.mark.torch
def test_torch_loop_two_windows_a_bad_edit_and_a_window_in_the_past(tmp_path):
    cfg, out = str(tmp_path / "cfg"), str(tmp_path / "out")
    edits = ["2:" + window(4, 6), "7:{not json", "8:" + window(3, 4), "9:" + window(12, 13, with_stack=True),
             "10:" + window(15, 14), "11:" + window(16, 17, profiler_level="Level9")]
    result = run_script([DYN_TORCH, "--cfg", cfg, "--out", out, "--steps", "20"] + [f"--edit={e}" for e in edits], hook=False)
    assert result.returncode == 0 and "trained 20 steps" in result.stdout, result.stderr
    assert windows_made(out) == ["window_4_6", "window_12_13"]
    assert steps_in(os.path.join(out, "window_4_6")) == [4, 5, 6]
    assert steps_in(os.path.join(out, "window_12_13")) == [12, 13]
    lines = warnings(result.stderr)
    assert len(lines) == 4, result.stderr
    assert "not valid JSON" in lines[0] and "window 3..4 is in the past: step 8 has run already" in lines[1]
    assert '"start_step" 15 is after "stop_step" 14' in lines[2] and 'key "profiler_level": got \'Level9\'' in lines[3]
    assert read_json(os.path.join(out, "window_12_13", "profiler", "profiler_info_0.json")) is not None
    run = read_json(os.path.join(out, "profiler", "summary_0.json"))
    assert run["steps_total"] == 20
    assert [(w["start"], w["stop"], w["steps"], w["trigger"]) for w in run["windows"]] == [(4, 6, [4, 5, 6], "dynamic"), (12, 13, [12, 13], "dynamic")]


@pytest.mark.mindspore
def test_guide_method_3_example_on_mindspore_model_train(tmp_path):
    pytest.importorskip("mindspore")
    cfg, out = str(tmp_path / "dyn_cfg"), str(tmp_path / "dynprof_data")
    edits = ["2:" + window(4, 6, 0), "7:" + window(9, 9, 1), "8:" + '{"start_step": 12, "stop_step": 11}',
             "12:" + window(14, 15, with_stack="yes"), "13:{", "14:" + window(16, 17, 0)]
    result = run_script([DYN_MS, "--cfg", cfg, "--output", out] + [f"--edit={e}" for e in edits], hook=False, timeout=300)
    assert result.returncode == 0 and "done" in result.stdout, result.stderr[-3000:]
    assert windows_made(out) == ["window_4_6", "window_9_9", "window_16_17"]
    assert steps_in(os.path.join(out, "window_4_6")) == [4, 5, 6]
    assert steps_in(os.path.join(out, "window_9_9")) == [9]  # analysed in the background, finished by exit
    assert steps_in(os.path.join(out, "window_16_17")) == [16, 17]
    assert read_json(os.path.join(out, "window_4_6", "profiler", "summary_0.json"))["framework"] == "mindspore"
    assert len(warnings(result.stderr)) == 3


@pytest.mark.mindspore
def test_mindspore_docstring_example_config_collects_its_window(tmp_path):
    """MindSpore's own DynamicProfilerMonitor example file, as written: its window, in its prof_path."""
    pytest.importorskip("mindspore")
    cfg = tmp_path / "cfg_path"
    cfg.mkdir()
    (cfg / "profiler_config.json").write_text(json.dumps(MINDSPORE_EXAMPLE, indent=4))
    result = run_script([DYN_MS, "--cfg", str(cfg), "--output", str(tmp_path / "unused"), "--epochs", "4"], hook=False,
                        cwd=str(tmp_path), timeout=300)
    assert result.returncode == 0 and "done" in result.stdout, result.stderr[-3000:]
    assert windows_made(tmp_path / "data") == ["window_2_5"]
    assert steps_in(tmp_path / "data" / "window_2_5") == [2, 3, 4, 5]
    lines = [line for line in result.stderr.splitlines() if line.startswith("msprof-agent:") and "record_shape" in line]
    assert len(lines) == 1 and "ignored" in lines[0]


@pytest.mark.torch
def test_zero_code_dynamic_profiling_of_an_unmodified_script(tmp_path):
    """MSPROF_DYNAMIC_CFG alone: the hook runs the monitor on the session's steps; edits come from outside."""
    from msprof_agent.dynamic import DEFAULTS

    cfg, out = tmp_path / "cfg", tmp_path / "data"
    config = cfg / "profiler_config.json"
    proc = subprocess.Popen([PY, TINY, "--steps", "40", "--sleep-ms", "80"], env=hook_env(extra={"MSPROF_DYNAMIC_CFG": str(cfg)}),
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not config.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert json.loads(config.read_text()) == DEFAULTS  # written at interpreter start, before torch loads
        config.write_text(window(8, 9))
        first = out / "window_8_9" / "profiler" / "summary_0.json"
        while not first.exists() and proc.poll() is None:
            time.sleep(0.01)
        config.write_text(window(30, 31))
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "trained 40 steps" in stdout, stderr
    assert windows_made(str(out)) == ["window_8_9", "window_30_31"]
    assert steps_in(str(out / "window_8_9")) == [8, 9]
    assert steps_in(str(out / "window_30_31")) == [30, 31]
    assert read_json(str(out / "profiler" / "summary_0.json"))["steps_total"] == 40


@pytest.mark.torch
def test_background_analysis_does_not_stall_the_window_end(tmp_path):
    """analyse_mode 1: the steps at the window's end (its stop step, and the next, which pays for the stop)
    stay within 20 % of the median of the steps around them outside the window.

    The stop itself (torch.profiler's stop and read-back, the CPU sampler's last sample, starting the
    analysis process) costs about 7 ms on an idle 2-core machine and up to ~45 ms with both cores
    saturated by other work: 200 ms steps keep the check about the design, not the machine's load."""

    cfg, out = str(tmp_path / "cfg"), str(tmp_path / "out")
    result = run_script([DYN_TORCH, "--cfg", cfg, "--out", out, "--steps", "22", "--sleep-ms", "200",
                         "--edit=2:" + window(10, 12, 1)], hook=False)
    assert result.returncode == 0, result.stderr
    assert steps_in(os.path.join(out, "window_10_12")) == [10, 11, 12]  # the background analysis finished by exit
    times = {r["n"]: (r["end"] - r["start"]) / 1e6 for r in read_records(os.path.join(out, "profiler"), 0) if r["k"] == "step"}
    neighbours = statistics.median([times[n] for n in (5, 6, 7, 8, 15, 16, 17, 18, 19, 20)])
    for n in (12, 13):
        assert times[n] <= 1.2 * neighbours, (n, times[n], neighbours, times)


@pytest.mark.torch
def test_a_script_monitor_under_zero_code_dynamic_profiling_stays_passive(tmp_path):
    cfg, out = str(tmp_path / "cfg"), str(tmp_path / "out")
    os.makedirs(cfg)
    with open(os.path.join(cfg, "profiler_config.json"), "w") as handle:
        handle.write(window(3, 4))
    result = run_script([DYN_TORCH, "--cfg", str(tmp_path / "other"), "--out", out, "--steps", "6"], cwd=str(tmp_path),
                        extra_env={"MSPROF_DYNAMIC_CFG": cfg})
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("stays passive") == 1
    assert not os.path.exists(tmp_path / "other")
    assert steps_in(str(tmp_path / "data" / "window_3_4")) == [3, 4]


@pytest.mark.torch
def test_two_ranks_share_one_config_file(tmp_path):
    """Both ranks read the same file (written once); analyse_mode -1 keeps raw data for offline analysis."""
    cfg, out = str(tmp_path / "cfg"), str(tmp_path / "out")
    os.makedirs(cfg)
    with open(os.path.join(cfg, "profiler_config.json"), "w") as handle:
        handle.write(window(4, 5, -1))
    procs = [subprocess.Popen([PY, DYN_TORCH, "--cfg", cfg, "--out", out, "--steps", "8"],
                              env=hook_env(hook=False, extra={"RANK_ID": str(rank), "RANK_SIZE": "2"}), cwd=SCRIPTS,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outputs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert json.loads(open(os.path.join(cfg, "profiler_config.json")).read())["start_step"] == 4  # nobody overwrote it
    folder = os.path.join(out, "window_4_5", "profiler")
    assert not os.path.exists(os.path.join(folder, "summary_0.json"))
    assert all("raw data kept in " + folder in err for _, err in outputs)
    analysed = subprocess.run([PY, "-m", "msprof_agent", "analyse", os.path.join(out, "window_4_5")], capture_output=True, text=True, timeout=300)
    assert analysed.returncode == 0, analysed.stderr
    for rank in (0, 1):
        assert step_numbers(folder, rank) == [4, 5]
