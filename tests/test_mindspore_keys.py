"""Every key the installed MindSpore accepts is accepted here: read from MindSpore at test time, so a new
MindSpore key fails this test instead of turning a user's profiling off."""
import enum
import importlib

import pytest

from msprof_agent.options import from_mapping

pytestmark = pytest.mark.mindspore


def _mindspore_module(monkeypatch, name):
    """Import a mindspore.profiler module with the variable unset (envprofiler would start MindSpore's own profiler)."""
    monkeypatch.delenv("MS_PROFILER_OPTIONS", raising=False)
    return importlib.import_module(f"mindspore.profiler.{name}")


def _plain(value):
    """A default as the user writes it: enums as their value, lists of enums as lists of values."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple, set)):
        return [_plain(item) for item in value]
    return value


def test_every_variable_key_of_mindspore_at_its_default_is_accepted(monkeypatch):
    params = _mindspore_module(monkeypatch, "common.profiler_parameters").ProfilerParameters.PARAMS
    unsupported = _mindspore_module(monkeypatch, "envprofiler").EnvProfiler.NOT_SUPPORTED_PARAMS
    values = {key: _plain(default) for key, (_, default) in params.items() if key not in unsupported}
    assert {"profiler_level", "activities", "aic_metrics", "host_sys", "export_type", "mstx"} <= set(values)
    options = from_mapping(dict(values, start=True))
    assert options.op_time and options.export_type == ["text"] and options.aic_metrics == "None"
    assert options.keys_given == list(values) + ["start"]


def test_every_dynamic_config_key_of_mindspore_at_its_default_is_accepted(monkeypatch, capsys):
    from msprof_agent.dynamic import parse_config
    from msprof_agent.options import Options

    context = _mindspore_module(monkeypatch, "dynamic_profile.dynamic_profiler_config_context")
    defaults = context.DynamicProfilerConfigContext({}).to_dict()
    assert {"aic_metrics", "profiler_level", "activities", "export_type", "host_sys", "prof_path"} <= set(defaults)
    start, stop, options, mode = parse_config(defaults, Options())
    assert (start, stop) == (-1, -1) and options.op_time
    assert "unknown key" not in capsys.readouterr().err
