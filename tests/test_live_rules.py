"""The online rules over live records (``analysis/live.py``) and top's screen, on records made here; and a real
session's live record, its steps driven directly (no framework)."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, read_json
from msprof_agent import top
from msprof_agent.analysis import live as rules
from msprof_agent.contract import live as contract

pytestmark = pytest.mark.unit
NOW = 1_800_000_000 * 10 ** 9
MS = 10 ** 6


def steps(count, ms, comm_ms=0.0, wait_ms=0.0, end=NOW, slow_from=None, slow_ms=0.0):
    """Step tuples as the live record keeps them: (n, start, end, wait, fp, bp, comm), the last ending at END."""
    durations = [ms + (slow_ms if slow_from and n >= slow_from else 0.0) for n in range(1, count + 1)]
    t = end - int(sum(durations) * MS)
    out = []
    for n, d in enumerate(durations, 1):
        start, t = t, t + int(d * MS)
        out.append((n, start, t, int(wait_ms * MS), start + int(wait_ms * MS), t - MS, int(comm_ms * MS)))
    return out


def record(rank, step_tuples, rank_size=3, **extra):
    return dict({"rank": rank, "rank_size": rank_size, "host": "h", "state": "running", "started_ns": NOW - 60 * 10 ** 9, "updated_ns": NOW,
                 "framework": "torch",
                 "steps_done": step_tuples[-1][0], "hang_after_s": 10.0, "steps": contract.step_columns(step_tuples),
                 "findings": [], "collectives": {}}, **extra)


def test_the_job_view_names_the_rank_whose_own_work_grew_and_not_those_waiting_for_it():
    records = [record(0, steps(60, 50.0, comm_ms=40.0)), record(1, steps(60, 50.0, comm_ms=0.0)), record(2, steps(60, 50.0, comm_ms=40.0))]
    view = rules.job_view(records, NOW)
    assert view["slow_ranks"] == [1] and view["slowest"][0]["rank"] == 1
    straggler = view["findings"][0]
    assert straggler["id"] == "straggler" and straggler["text"].startswith("Straggler: rank 1 works 40.0 ms more per step"), straggler
    earlier = dict(record(3, steps(60, 50.0, end=NOW - 3600 * 10 ** 9), rank_size=4), state="ended", updated_ns=NOW - 3600 * 10 ** 9)
    assert rules.job_view(records + [dict(earlier, started_ns=NOW - 4000 * 10 ** 9)], NOW)["rank_size"] == 3  # an earlier job's rank 3
    assert view["steps_per_s"] == pytest.approx(20.0, rel=0.05) and view["step_ms_now"] == 50.0 and view["hang"] is None


def test_slow_steps_now_are_a_finding_of_the_rank_and_no_beat():
    found = rules.rank_findings(contract.step_columns(steps(60, 40.0, slow_from=55, slow_ms=100.0)), [], {"framework": "torch"})
    assert [f["id"] for f in found] == ["slow_steps"], found
    assert "take 140.0 ms, 100.0 ms over the median before" in found[0]["text"], found[0]["text"]


def test_a_data_wait_is_the_advisor_s_finding():
    found = rules.rank_findings(contract.step_columns(steps(40, 50.0, wait_ms=30.0)), [], {"framework": "torch", "data_settings": {"num_workers": 0}})
    assert found and found[0]["id"] == "data_wait" and found[0]["text"].startswith("Data-bound"), found


def test_a_hang_names_who_waits_in_which_collective_and_who_never_entered_it():
    last = NOW - 15 * 10 ** 9
    entered = {"world": {"seq": 120, "name": "all_reduce", "step": 41, "ranks": [0, 1, 2]}}
    behind = {"world": {"seq": 117, "name": "all_reduce", "step": 40, "ranks": [0, 1, 2]}}
    records = [record(0, steps(40, 50.0, end=last), collectives=entered, stack=["<module> (train.py:9)", "all_reduce (c10d.py:3)"]),
               record(1, steps(40, 50.0, end=last), collectives=behind, stack=["<module> (train.py:5)"]),
               record(2, steps(40, 50.0, end=last), collectives=entered)]
    hang = rules.job_view(records, NOW)["hang"]
    assert hang == contract.hang(records, NOW)
    assert (hang["waiting"], hang["missing"], hang["step"], hang["collective"]) == ([0, 2], [1], 41, "all_reduce #120 of group world")
    lines = contract.hang_lines(hang)
    assert lines[0].startswith("hang: no rank has finished a step for 15 s (threshold 10 s")
    assert "rank(s) 0, 2 wait in all_reduce #120 of group world at step 41; rank(s) 1 (after step 40) never entered it" in lines[0]
    assert lines[1:] == ["  rank 0 (waits) stack: <module> (train.py:9) > all_reduce (c10d.py:3)", "  rank 1 (missing) stack: <module> (train.py:5)"]
    assert rules.job_view(records, last + 5 * 10 ** 9)["hang"] is None  # within the threshold: no hang
    level = [record(r, steps(40, 50.0, end=last), collectives=entered) for r in range(3)]
    assert contract.hang(level, NOW) is None  # every rank in the same place: the job's own pause (an evaluation), not a hang


def test_a_capture_starts_seconds_of_steps_ahead_on_a_round_step():
    assert contract.capture_start(29, 0.25) == contract.capture_start(30, 0.25) == 40  # 2.5 s of 250 ms steps ahead, rounded up to 5
    assert contract.capture_start(31, 0.25) == 45
    assert contract.capture_start(30, None) == 35 and contract.capture_start(30, 10.0) == 35  # at least CAPTURE_MIN_LEAD steps


def test_top_s_screen_shows_the_rates_the_ranks_and_the_straggler():
    records = [record(0, steps(60, 50.0, comm_ms=40.0)), record(1, steps(60, 50.0))]
    lines = top.screen("/job", rules.job_view(records, NOW), 120)
    text = "\n".join(lines)
    assert lines[0].startswith("msprof-agent top  /job  2/3 ranks  RUNNING") and "steps/s 20.00" in lines[1], text
    assert "no live record yet from rank(s) 2" in text and "  rank 1: 50.0 ms own work a step" in text, text
    assert any(line.startswith("   1* ") for line in lines) and any(line.startswith("   0  ") for line in lines), text
    assert "[high] Straggler: rank 1 works 40.0 ms more per step" in text and all(len(line) <= 120 for line in lines)



def test_a_gpu_job_s_step_on_the_device_is_shown_beside_the_host_s():
    """A CUDA job's live record carries its steps' CUDA-event times: top shows the device's step now beside the host's
    (a loss.item() every 10th step makes the host's uneven while the device's stay even)."""
    gpu = {"n": list(range(41, 61)), "ms": [19.0] * 20}
    records = [record(0, steps(60, 50.0), rank_size=1, device_steps=gpu)]
    view = rules.job_view(records, NOW)
    assert view["gpu_step_ms_now"] == 19.0 and view["ranks"][0]["gpu_step_ms_now"] == 19.0
    assert "step now 50.0 ms (on the GPU 19.0 ms)" in top.screen("/job", view, 120)[1]
    assert rules.job_view([record(0, steps(60, 50.0), rank_size=1)], NOW)["gpu_step_ms_now"] is None


SESSION = """
import json, os, sys, time
from msprof_agent import capture, live, online_analysis, session as S
from msprof_agent.options import parse_text
live.INTERVAL_S = 0.05
os.makedirs(os.path.join(sys.argv[1], "profiler"))
with open(os.path.join(sys.argv[1], "profiler", "live_capture.json"), "w") as f:  # an earlier job's request
    json.dump({"id": "cli-1", "at_ns": 1, "start": 5, "steps": 2, "by": "msprof-agent capture"}, f)
s = S.start(parse_text(json.dumps({"start": True, "output_path": sys.argv[1], "capture": {"every": 1000}})), "env", online_analysis.analyse)
capture.follow_requests(s)
s.run.claim()
for n in range(30):
    s.steps.open(); time.sleep(0.01); s.steps.close()
time.sleep(0.3)
with open(s.live.path) as f:
    print(json.dumps(json.load(f)))
"""


def test_a_session_keeps_its_live_record_and_says_at_exit_that_it_ended(tmp_path):
    """Its steps driven directly, an earlier job's capture request in the folder."""
    proc = subprocess.run([sys.executable, "-c", SESSION, str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "MSPROF_DYNAMIC_CFG")})
    assert proc.returncode == 0, proc.stderr
    running = json.loads(proc.stdout.strip().splitlines()[-1])
    assert running["state"] == "running" and running["steps_done"] == 30 and running["steps"]["n"] == list(range(1, 31)), running
    assert running["ticks"] >= 3 and running["cost_ms"] > 0 and running["hang_after_s"] == contract.HANG_MIN_S
    assert "capture" not in running and "capture" not in proc.stderr and running["recording"] is None  # the old request is left alone
    ended = read_json(os.path.join(tmp_path, "profiler", "raw", "rank_0", "live.json"))
    assert ended["state"] == "ended" and ended["end_reason"] == "exit" and ended["updated_ns"] > running["updated_ns"]


def test_the_viewer_lists_a_running_job_and_shows_it_reloading_itself_marked_running(tmp_path):
    pytest.importorskip("jinja2")
    from test_viewer import Live

    now = time.time_ns()
    for rank, comm in ((0, 40.0), (1, 0.0)):
        path = tmp_path / "job" / "profiler" / "raw" / f"rank_{rank}" / "live.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(dict(record(rank, steps(60, 50.0, comm_ms=comm, end=now), rank_size=2), started_ns=now - 60 * 10 ** 9, updated_ns=now)))
    server = Live(tmp_path)
    try:
        status, _, index = server.get("/")
        assert status == 200 and '<tr data-job="job"><td><a href="/live?job=job">' in index and "<td>running</td>" in index, index
        status, _, page = server.get("/live?job=job")
        assert status == 200 and '<meta http-equiv="refresh" content="2">' in page and '<span class="badge" id="live-state">RUNNING</span>' in page
        assert '<tr data-rank="1" class="slow"><td>1 (slow)</td>' in page and "Straggler: rank 1 works 40.0 ms more per step" in page, page
        status, _, body = server.get("/api/live?job=job")
        assert status == 200 and json.loads(body)["slow_ranks"] == [1]
        assert server.get("/live?job=../etc")[0] == 404
    finally:
        server.close()
