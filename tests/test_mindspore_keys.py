"""Every key the installed MindSpore accepts is accepted here: read from MindSpore at test time, so a new
MindSpore key fails this test instead of turning a user's profiling off."""
import enum
import importlib
import json
import os

import pytest

from conftest import read_json, run_script
from msprof_agent.options import from_mapping

pytestmark = pytest.mark.mindspore
MARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "mindspore_io_marks.py")


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


# -- unmodified MindSpore training under the newer keys ------------------------------------------------------
WRITE_MB, SEND_MB = 8, 4


def _script_mstx(stdout):
    """The script's own count of its ranges and marks: {"ranges": [[name, domain, n]...], "marks": [...]}."""
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("mstx ")).split(" ", 1)[1])


def _run_marks(tmp_path, options, *args):
    out = str(tmp_path / "out")
    proc = run_script([MARKS] + list(args), dict(options, start=True, output_path=out), cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, os.path.join(out, "profiler")


def test_newer_keys_host_sys_and_mstx_show_what_the_script_did(tmp_path):
    proc, profiler = _run_marks(tmp_path, {"profiler_level": "Level1", "activities": ["CPU"], "mstx": True,
                                           "host_sys": ["cpu", "mem", "disk", "network"], "export_type": ["text"]},
                                "--write-mb", str(WRITE_MB), "--send-mb", str(SEND_MB), "--scratch", str(tmp_path))
    assert "msprof-agent: profiled 5 of 5 steps" in proc.stderr
    disk = read_json(os.path.join(profiler, "host_disk_usage_0.json"))["total"]
    assert disk["write_bytes"] >= WRITE_MB << 20 and disk["process_write_bytes"] >= WRITE_MB << 20, disk
    network = read_json(os.path.join(profiler, "host_network_usage_0.json"))["total"]
    assert network["sent_bytes"] >= SEND_MB << 20 and network["received_bytes"] >= SEND_MB << 20, network
    table = read_json(os.path.join(profiler, "mstx_ranges_0.json"))
    expected = _script_mstx(proc.stdout)
    assert [[r["name"], r["domain"], r["count"]] for r in table["ranges"]] == expected["ranges"]  # no "dataloader": that is the data wait
    assert [[m["name"], m["domain"], m["count"]] for m in table["marks"]] == expected["marks"]
    # written after step 2's update: host work between two steps is in the next step's interval
    assert sorted((r["name"], r["step"]) for r in table["per_step"] if r["domain"] == "io") == [("checkpoint io", 3)]
    summary = read_json(os.path.join(profiler, "summary_0.json"))
    assert summary["not_applicable"] == []
    info = read_json(os.path.join(profiler, "profiler_info_0.json"))["profiler_parameters"]
    assert info["profiler_level"] == "Level1" and info["profile_communication"] and info["record_shapes"]
    timeline = read_json(os.path.join(profiler, "cpu_timeline_display_0.json"))
    tracks = {e["args"]["name"] for e in timeline if e.get("name") == "process_name"}
    counters = {e["name"] for e in timeline if e.get("ph") == "C"}
    assert {"Host Disk / Network", "User Marks (mstx)"} <= tracks and {"Disk I/O MB/s", "Network I/O MB/s"} <= counters
    assert sum(1 for e in timeline if e.get("cat") == "mstx.train" and e["ph"] == "X") == 5


def test_mixed_generations_level0_and_a_domain_filter(tmp_path):
    proc, profiler = _run_marks(tmp_path, {"profiler_level": "Level0", "op_time": True, "timeline_limit": 100,
                                           "activities": ["CPU", "NPU"], "aic_metrics": "AiCoreNone",
                                           "mstx": True, "mstx_domain_exclude": ["io"]},
                                "--write-mb", "1", "--scratch", str(tmp_path))
    expected = [r for r in _script_mstx(proc.stdout)["ranges"] if r[1] != "io"]
    table = read_json(os.path.join(profiler, "mstx_ranges_0.json"))
    assert [[r["name"], r["domain"], r["count"]] for r in table["ranges"]] == expected
    assert not os.path.exists(os.path.join(profiler, "host_disk_usage_0.json"))  # host_sys not asked
    summary = read_json(os.path.join(profiler, "summary_0.json"))
    assert any("activities NPU" in note for note in summary["not_applicable"])
    assert os.path.exists(os.path.join(profiler, "cpu_op_type_info_0.csv"))


def test_self_contradicting_variable_is_one_line_and_the_job_runs(tmp_path):
    proc = run_script([MARKS, "--steps", "2"], {"start": True, "output_path": str(tmp_path / "out"), "op_time": False,
                                                "activities": ["CPU"]}, cwd=str(tmp_path), timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("msprof-agent:")]
    assert proc.returncode == 0 and "step 2 loss" in proc.stdout
    assert len(lines) == 2 and 'ask for ops both false and true' in lines[0] and "Profiling is off" in lines[0]
    assert lines[1].startswith("msprof-agent: no profile written: ") and 'ask for ops both false and true' in lines[1]  # again at exit
    assert not os.path.exists(tmp_path / "out")
