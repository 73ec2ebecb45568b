"""The two generations of option keys through the one mapping table (no framework imported)."""
from dataclasses import fields

import pytest

from msprof_agent.options import KEYS, PROCESS_FIELDS, WRITTEN_FIELD, Options, OptionsError, from_mapping, not_applicable

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("values, expected", [
    ({"profiler_level": "Level0"}, {"op_time": True, "profile_communication": False, "profile_memory": False}),
    ({"profiler_level": "Level1"}, {"profile_communication": True, "record_shapes": True, "profile_memory": False}),
    ({"profiler_level": "Level2"}, {"profile_communication": True, "record_shapes": True, "profile_memory": True}),
    ({"profiler_level": "LevelNone", "mstx": True}, {"op_time": False, "mstx": True}),
    ({"activities": []}, {"op_time": False}),
    ({"activities": ["CPU"], "record_shapes": False}, {"op_time": True, "record_shapes": False}),
    ({"aicore_metrics": 1}, {"aic_metrics": "ArithmeticUtilization"}),
    ({"aic_metrics": "AiCoreNone"}, {"aic_metrics": "None"}),
    ({"host_sys": ["disk", "cpu", "disk"]}, {"host_sys": ["disk", "cpu"]}),
    # mixed generations that agree
    ({"op_time": True, "activities": ["CPU"], "profile_communication": True, "profiler_level": "Level1"},
     {"op_time": True, "profile_communication": True}),
    # a key at its documented default asks for nothing: a copied block of defaults never fights a setting
    ({"profile_communication": False, "profiler_level": "Level1"}, {"profile_communication": True}),
    ({"export_type": ["text", "db"]}, {"export_type": ["text", "db"]}),
])
def test_both_generations_map_onto_the_same_features(values, expected):
    options = from_mapping(values, environ={})
    assert {key: getattr(options, key) for key in expected} == expected


@pytest.mark.parametrize("values, expected", [
    ({"op_time": False, "activities": ["CPU"]}, 'keys "op_time": false and "activities": ["CPU"] ask for ops both false and true'),
    ({"op_time": False, "profiler_level": "Level1"}, "ask for ops both"),
    ({"aicore_metrics": 2, "aic_metrics": "PipeUtilization"}, 'ask for aic_metrics both "Memory" and "PipeUtilization"'),
    ({"profiler_level": "Level3"}, 'key "profiler_level": got \'Level3\'; accepted: "LevelNone", "Level0", "Level1", "Level2"'),
    ({"profiler_level": 1}, 'key "profiler_level": got 1;'),  # integer codes belong to the dynamic config
    ({"activities": "CPU"}, 'key "activities": got \'CPU\'; accepted: a list of strings from "CPU", "NPU", "GPU"'),
    ({"host_sys": ["cpu", "disks"]}, 'key "host_sys": got'),
    ({"export_type": ["csv"]}, 'accepted: a list of strings from "text", "db"'),
    ({"mstx": "true"}, 'key "mstx": got \'true\' (str); accepted: true or false'),
    ({"mstx_domain_include": [""]}, "a list of non-empty strings"),
    ({"aicore_metrics": 6}, 'key "aicore_metrics": got 6; accepted: an integer from -1 to 5'),
    ({"record_shape": True}, 'unknown key "record_shape" (did you mean "record_shapes"?)'),
])
def test_contradictions_and_bad_values_are_one_line(values, expected):
    with pytest.raises(OptionsError) as info:
        from_mapping(values, environ={})
    assert expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("values, reset, line", [
    ({"profiler_level": "LevelNone"}, {"profiler_level": "Level0"}, '"LevelNone" collects only mstx marks'),
    ({"mstx": True, "mstx_domain_include": ["a"], "mstx_domain_exclude": ["b"]}, {"mstx_domain_exclude": []}, "cannot be set together"),
    ({"mstx_domain_exclude": ["b"]}, {"mstx_domain_exclude": []}, 'domain filters need "mstx": true'),
    ({"record_shapes": True, "activities": ["NPU"]}, {"record_shapes": False}, 'need "CPU" in "activities"'),
])
def test_mindspore_compatibility_resets_are_one_line_each(values, reset, line, capsys):
    options = from_mapping(values, environ={})
    assert {key: getattr(options, key) for key in reset} == reset
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and line in lines[0] and lines[0].startswith("msprof-agent: MS_PROFILER_OPTIONS: key ")


def test_mindspore_integer_codes_are_read_only_where_mindspore_reads_them():
    options = from_mapping({"profiler_level": -1, "mstx": True, "aic_metrics": 7, "activities": 0, "export_type": 1},
                           environ={}, codes=True)
    assert (options.profiler_level, options.aic_metrics, options.activities, options.export_type) == \
        ("LevelNone", "MemoryAccess", ["CPU", "NPU"], ["db"])
    with pytest.raises(OptionsError, match='key "aic_metrics": got 8; accepted: 0 \\("PipeUtilization"\\)'):
        from_mapping({"aic_metrics": 8}, environ={}, codes=True)


def test_not_applicable_lists_what_this_run_cannot_do():
    options = from_mapping({"activities": ["CPU", "NPU", "GPU"], "l2_cache": True, "pcie": True, "aic_metrics": "Memory",
                            "host_sys": ["cpu", "osrt"], "export_type": ["db"], "sync_enable": True}, environ={})
    notes = not_applicable(options, "CPU")
    for expected in ("l2_cache needs an Ascend device", "pcie needs an Ascend device", "AI Core metrics Memory",
                     "activities NPU: no Ascend device", "activities GPU: no GPU device", "host_sys osrt",
                     "sync_enable:"):
        assert any(expected in note for note in notes), (expected, notes)
    assert not any("export_type" in note for note in notes), "the db export is written: nothing to note"
    assert not any("NPU" in note for note in not_applicable(options, "Ascend"))
    assert not_applicable(from_mapping({}, environ={}), "CPU") == []


def test_options_have_one_field_per_key_and_defaults_the_keys_accept():
    named = [f.name for f in fields(Options)]
    assert sorted(named) == sorted([*KEYS, *PROCESS_FIELDS, WRITTEN_FIELD])
    defaults = Options()
    for key, spec in KEYS.items():
        value = getattr(defaults, key)
        if value is not None:  # None: not written (MindSpore 2.5+'s keys), or no window end / policy
            assert spec.check(key, value) == value, key


def test_the_analysis_reads_the_recorded_options_back():
    options = from_mapping({"timeline_limit": 20, "export_type": ["db"], "host_sys": ["disk"]},
                           environ={"RANK_ID": "3", "PROFILING_FP_START": "Conv2D"})
    assert Options.from_record({"k": "meta", "options": options.to_dict()}) == options
    assert Options.from_record({"k": "meta"}) == Options()
