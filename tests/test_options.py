"""Option parsing in process: every key accepted with a valid value, and each rejection's one line
naming the key, the value received and what is accepted."""
import os

import pytest

from msprof_agent.options import OptionsError, from_mapping, parse_text

pytestmark = pytest.mark.unit

VALID = {"start": True, "output_path": "~/prof", "op_time": True, "profile_memory": True, "profile_communication": True,
         "aicore_metrics": 1, "l2_cache": True, "timeline_limit": 20, "data_process": True, "parallel_strategy": True,
         "profile_framework": "time", "with_stack": True, "record_shapes": False, "start_step": 3, "stop_step": 5,
         "cpu_sampling_interval": 50}


def test_every_key_with_a_valid_value_is_taken():
    options = from_mapping(VALID, environ={})
    for key, value in VALID.items():
        expected = os.path.expanduser("~/prof") if key == "output_path" else value
        assert getattr(options, key) == expected, key


def test_defaults_and_the_end_of_training():
    options = from_mapping({}, environ={})
    assert (options.start, options.op_time, options.start_step, options.stop_step, options.timeline_limit) == (False, True, 1, None, 500)
    assert options.output_path == os.path.abspath("./data")
    assert from_mapping({"stop_step": -1}, environ={}).stop_step is None  # -1: until training ends


def test_launcher_variables_give_rank_device_and_fp_bp_names():
    environ = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "PROFILING_FP_START": "fc1", "PROFILING_BP_END": ""}
    options = from_mapping({}, environ=environ)
    assert (options.rank_id, options.device_id, options.world_size, options.fp_start, options.bp_end) == (3, 1, 4, "fc1", None)
    assert from_mapping({}, environ={"RANK_ID": "2", "RANK": "5"}).rank_id == 2  # MindSpore's name first


@pytest.mark.parametrize("values, line", [
    ({"start": "false"}, 'key "start": got \'false\' (str); accepted: true or false (JSON booleans, not strings)'),
    ({"start": 1}, 'key "start": got 1 (int); accepted: true or false'),
    ({"output_path": ""}, 'key "output_path": got \'\'; accepted: a non-empty path string'),
    ({"output_path": 7}, 'key "output_path": got 7; accepted: a non-empty path string'),
    ({"timeline_limit": 0}, 'key "timeline_limit": got 0; accepted: an integer from 1 up'),
    ({"timeline_limit": 1.5}, 'key "timeline_limit": got 1.5 (float); accepted: an integer from 1'),
    ({"aicore_metrics": 6}, 'key "aicore_metrics": got 6; accepted: an integer from -1 to 5'),
    ({"cpu_sampling_interval": 5}, 'key "cpu_sampling_interval": got 5; accepted: an integer from 10 to 60000'),
    ({"start_step": True}, 'key "start_step": got True (bool); accepted: an integer from 1'),
    ({"stop_step": 0}, 'key "stop_step": got 0; accepted: an integer from 1 up'),
    ({"profile_framework": "everything"}, 'key "profile_framework": got \'everything\'; accepted: "all", "time" or null'),
    ({"op_time": False, "with_stack": True}, 'key "with_stack": true needs "op_time": true (the MindSpore Profiler guide\'s rule); got "op_time": false'),
    ({"start_step": 5, "stop_step": 2}, 'key "stop_step": got 2, before "start_step" 5; accepted: stop_step >= start_step, or -1'),
    ({"output_pth": "/tmp/x"}, 'unknown key "output_pth" (did you mean "output_path"?); accepted keys: start, output_path,'),
    ({"zzz": 1}, 'unknown key "zzz"; accepted keys: start, output_path,'),
    ({"capture": {"every": 10}, "stop_step": 3}, 'key "capture": the policy chooses its own windows; accepted: "capture" or "start_step"'),
    ({"capture": {"every": 4, "steps": 5}}, 'key "capture.steps": got 5, more than "every" 4; accepted: steps <= every'),
    ({"capture": {"slow_step": 1}}, 'key "capture.slow_step": got 1; accepted: a number above 1'),
    ({"capture": {"slow_step": 2, "first": 3}}, 'key "capture": unknown key "first" in a slow_step policy; accepted keys: slow_step,'),
    ({"capture": []}, 'key "capture": got []; accepted: {"every": N'),
])
def test_each_rejection_names_key_value_and_what_is_accepted(values, line):
    with pytest.raises(OptionsError) as info:
        from_mapping(values, environ={})
    message = str(info.value)
    assert message.startswith(line) and "\n" not in message, message


@pytest.mark.parametrize("environ, line", [
    ({"RANK_ID": "zero"}, "environment variable RANK_ID: got 'zero'; accepted: a non-negative integer"),
    ({"WORLD_SIZE": "-2"}, "environment variable WORLD_SIZE: got '-2'; accepted: a non-negative integer"),
])
def test_bad_launcher_variables_are_named(environ, line):
    with pytest.raises(OptionsError, match="^" + line.replace("(", r"\(") + "$"):
        from_mapping({}, environ=environ)


@pytest.mark.parametrize("text, line", [
    ('{"start": true,', "MS_PROFILER_OPTIONS is not valid JSON: Expecting property name enclosed in double quotes at column 16"),
    ("[1, 2]", "expected a JSON object such as {\"start\": true}; got list [1, 2]"),
])
def test_the_variable_text_must_be_one_json_object(text, line):
    with pytest.raises(OptionsError) as info:
        parse_text(text, environ={})
    assert str(info.value).startswith(line)


def test_capture_defaults_are_filled_in():
    assert from_mapping({"capture": {"slow_step": 2.5}}, environ={}).capture == {
        "slow_step": 2.5, "steps": 3, "warmup": 5, "max_windows": 5, "max_trace_mb": None}


def test_the_options_in_effect_leave_out_what_changes_nothing():
    """doctor's view: no default export (none is written unless asked), no keys kept only for MindSpore's sake."""
    default = from_mapping({"start": True}, environ={}).in_effect()
    assert default["export_type"] == [] and "start_profile" not in default and "keys_given" not in default
    asked = from_mapping({"start": True, "export_type": ["db"], "profiler_level": "Level1", "start_profile": False}, environ={}).in_effect()
    assert asked["export_type"] == ["db"] and asked["profile_communication"] is True
    assert not {"profiler_level", "activities", "start_profile"} & set(asked)
