"""The window registry in-process: naming, states, the variable's step window, listing; no framework."""
import glob
import json
import os

import pytest

from msprof_agent import windows as W
from msprof_agent.contract.names import window_name
from msprof_agent.options import from_mapping

pytestmark = pytest.mark.unit

META = {"pid": 1, "rank_id": 0}


def records(profiler_dir):
    lines = []
    for path in sorted(glob.glob(os.path.join(profiler_dir, "raw", "rank_0", "*.jsonl"))):
        with open(path) as handle:
            lines += [json.loads(line) for line in handle]
    return lines


def registry(tmp_path, **options):
    return W.Windows(dict(META), from_mapping(dict({"start": True, "output_path": str(tmp_path)}, **options)), "env")


def step(n, start, end=None, fp=None, waits=()):
    return {"n": n, "start": start, "end": end, "fp": fp, "waits": [list(w) for w in waits]}


def test_window_folders_are_named_by_their_steps(tmp_path):
    assert window_name(20, 22) == "window_20_22"
    assert W.window_folder("/out", 4, 4) == os.path.join("/out", "window_4_4")
    windows = registry(tmp_path)
    c = windows.open_window(str(tmp_path), 3, 5, windows.run.options, "dynamic", W.SYNC, {"trigger": "dynamic"})
    assert c.profiler_dir == os.path.join(str(tmp_path), "window_3_5", "profiler") and c.folder == str(tmp_path / "window_3_5")
    assert c.info == {"trigger": "dynamic", "start": 3, "stop": 5} and c.state == W.IDLE
    assert windows.run.profiler_dir == os.path.join(str(tmp_path), "profiler")


def test_a_window_takes_the_process_keys_and_keeps_its_settings():
    process = from_mapping({"output_path": "/p"}, environ={"RANK_ID": "3", "DEVICE_ID": "1", "RANK_SIZE": "4", "PROFILING_FP_START": "fp"})
    window = from_mapping({"output_path": "/w", "with_stack": True}, environ={})
    assert W.with_process_keys(window, process) is window
    assert (window.rank_id, window.device_id, window.world_size, window.fp_start, window.bp_end) == (3, 1, 4, "fp", None)
    assert window.output_path == "/w" and window.with_stack


def test_one_collection_records_at_a_time_and_steps_belong_by_their_work(tmp_path):
    windows = registry(tmp_path)
    c = windows.open_window(str(tmp_path), 1, 2, windows.run.options, "capture", W.ASYNC, {})
    windows.begin(c, 100, explicit=False)
    assert windows.owner is c and c.state == W.RECORDING and c.recorded
    assert windows.live() == [windows.run, c]
    assert windows.end(200) is c and windows.owner is None and c.state == W.STOPPED
    assert c.contains(step(1, 100, 150)) and not c.contains(step(0, 50, 100))  # a step that ended as recording began is out
    assert c.contains(step(0, 50, 120, fp=60))  # started during the step, even after its work began: the step is in, whole
    assert c.contains(step(2, 150))  # still open: it reaches to now
    assert not c.contains(step(3, 190, 300, fp=210))  # stopped before its forward start: out
    assert c.contains(step(3, 190, 300, fp=195)) and c.contains(step(3, 190, 300))
    assert not c.contains(step(3, 190, 300, waits=[(205, 206)]))  # without a forward mark, its first fetch begins its work
    assert not windows.run.contains(step(1, 100, 150))  # the run never recorded: no step is in its window
    c.skip_steps_before(2)
    assert not c.contains(step(1, 100, 150)) and c.contains(step(2, 150))  # the opener counted step 1 as done
    assert windows.end(300) is None


def test_the_variables_step_window_opens_and_ends_on_the_run(tmp_path):
    windows = registry(tmp_path, start_step=3, stop_step=4)
    assert [n for n in range(1, 7) if windows.step_window_opens(n)] == [3, 4]
    windows.begin(windows.run, 10, explicit=False)
    assert not windows.step_window_opens(4)  # it records already
    assert not windows.step_window_ends(3) and windows.step_window_ends(4)
    windows.end(20)
    assert not windows.step_window_opens(5)  # stopped, not idle: one window per run


def test_a_claimed_run_follows_calls_not_steps(tmp_path):
    windows = registry(tmp_path, start_step=1)
    windows.run.claim()
    assert not windows.step_window_opens(1)
    windows.begin(windows.run, 10, explicit=False)
    assert not windows.step_window_ends(10 ** 6)


def test_finishing_lists_a_recorded_window_in_the_run_and_drops_an_empty_one(tmp_path):
    windows = registry(tmp_path)
    empty = windows.open_window(str(tmp_path), 1, 1, windows.run.options, "dynamic", None, {"trigger": "dynamic"})
    assert windows.finish(empty, {"k": "end"}) is False and empty.analysed and windows.listed == []
    c = windows.open_window(str(tmp_path), 2, 3, windows.run.options, "dynamic", None, {"trigger": "dynamic"})
    windows.begin(c, 100, explicit=False)
    c.collected.update({3, 2})
    windows.end(200)
    assert windows.finish(c, {"k": "end", "reason": "test"})
    entry = {"trigger": "dynamic", "start": 2, "stop": 3, "dir": c.folder, "analyse_mode": None, "steps": [2, 3]}
    assert windows.listed == [entry]
    assert [r["k"] for r in records(c.profiler_dir)] == ["meta", "end"]
    assert windows.finish(windows.run, {"k": "end"})  # never recorded, but it lists a window
    assert [r for r in records(windows.run.profiler_dir) if r["k"] == "window"] == [dict(entry, k="window", event="collected")]
    assert not os.path.exists(empty.folder)


def test_awaiting_collections_are_taken_once(tmp_path):
    windows = registry(tmp_path)
    c = windows.open_window(str(tmp_path), 1, 1, windows.run.options, "capture", W.ASYNC, {})
    windows.await_open_step(c)
    windows.await_open_step(c)
    assert windows.live() == [windows.run, c]
    assert windows.take_awaiting() == [c] and windows.take_awaiting() == []


def test_discard_removes_the_folder_and_open_run_replaces_the_run(tmp_path):
    windows = registry(tmp_path)
    c = windows.open_window(str(tmp_path), 5, 6, windows.run.options, "capture", W.ASYNC, {})
    windows.begin(c, 1, explicit=False)
    windows.end(2)
    c.writer.flush()
    assert os.path.isdir(c.folder)
    windows.discard(c)
    assert c.analysed and not os.path.exists(c.folder)
    first = windows.run
    second = windows.open_run(from_mapping({"output_path": str(tmp_path / "api")}), "api")
    assert first.analysed and windows.run is second and second.origin == "api" and second.state == W.IDLE


def test_analyse_modes_are_checked(tmp_path):
    run = registry(tmp_path).run
    run.analyse_as(W.ASYNC)
    assert run.analyse_mode == W.ASYNC
    with pytest.raises(ValueError, match="accepted: 'sync', 'async' or None"):
        run.analyse_as("later")


def test_a_session_records_its_windows_through_the_registry(tmp_path, capsys):
    """The session drives the registry from its step stream: start_window refuses while another records."""
    from msprof_agent.online_analysis import analyse
    from msprof_agent.session import Session

    session = Session(from_mapping({"start": True, "output_path": str(tmp_path), "start_step": 2, "stop_step": 2}), "test", analyse)
    session.steps.open()
    assert session.owner is None
    session.steps.close()
    session.steps.open()
    assert session.owner is session.run
    assert session.start_window(str(tmp_path), 2, 2, session.run.options, "dynamic", None, {"trigger": "dynamic"}) is None
    session.steps.close()
    assert session.owner is None and session.run.collected == {2}
    window = session.start_window(str(tmp_path), 3, 3, session.run.options, "dynamic", None, {"trigger": "dynamic"})
    assert session.owner is window and window.explicit is False
    session.steps.open()  # step 3 opened when step 2 closed, before the window: its forward start decides
    session.steps.mark_fp()
    session.steps.close()
    assert session.analyse(window) is None and window.analysed  # raw data only: nothing analysed here
    assert "raw data kept in" in capsys.readouterr().err
    assert session.windows.listed[0]["steps"] == [3] and not os.path.exists(tmp_path / "window_2_2")
    session.run.writer.abandon()


def test_an_async_window_is_analysed_by_the_background_entry_point(tmp_path, capfd):
    """``python -m msprof_agent.background_analysis DIR RANK --quiet``: a capture window's one line, its summary."""
    from msprof_agent.online_analysis import analyse
    from msprof_agent.session import Session

    session = Session(from_mapping({"output_path": str(tmp_path)}), "test", analyse)
    window = session.start_window(str(tmp_path), 1, 2, session.run.options, "capture", W.ASYNC, {"trigger": "periodic"})
    for _ in range(2):
        session.steps.open()
        session.steps.mark_fp()
        session.steps.close()
    assert session.analyse(window) is None and len(session.background) == 1
    session.wait_for_background(timeout_s=120)
    assert session.background[0].returncode == 0
    with open(os.path.join(window.profiler_dir, "summary_0.json")) as handle:
        assert json.load(handle)["steps_total"] == 2
    assert f"msprof-agent: analysed steps [1, 2] -> {window.profiler_dir}\n" == capfd.readouterr().err
    session.run.writer.abandon()
