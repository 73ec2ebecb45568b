"""While the job runs: the ranks' live records, ``msprof-agent top`` (driven in tmux), the all-rank capture and
the hang named as it happens, on real torchrun/gloo jobs of 3 CPU ranks (tests/scripts/slow_rank_torch.py, each
step paced by a 30 ms sleep)."""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import PY, ROOT, SCRIPTS, hook_env, profile_into, read_json, read_records
from msprof_agent import environment
from msprof_agent.analysis import live as rules
from msprof_agent.contract import live as contract
from msprof_agent.contract import names

LIVE_JOB = os.path.join(SCRIPTS, "slow_rank_torch.py")
RANKS = 3
SLOW_RANK, SLOW_FROM, STEPS = 1, 30, 60
STOP_RANK, STOP_STEP, STOP_S, HANG_S = 1, 40, 9.0, 3.0


def torchrun(out, args, options=None, extra=None, stderr=subprocess.DEVNULL):
    return subprocess.Popen([PY, "-m", "torch.distributed.run", "--nproc_per_node", str(RANKS), LIVE_JOB, "--step-ms", "30", *args],
                            env=hook_env(options or profile_into(out), dict({"OMP_NUM_THREADS": "1"}, **(extra or {}))),
                            stdout=subprocess.DEVNULL, stderr=stderr, cwd=ROOT)


def step_end_ns(profiler_dir, rank, n):
    return next(r["end"] for r in read_records(profiler_dir, rank) if r.get("k") == "step" and r["n"] == n)


def tmux(socket, *args):
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def slowed_job(tmp_path_factory):
    """Rank 1 computes 300 ms more a step from step 30 (6x its step: the capture rule's 5x is far above the noise),
    under the slow-step capture rule (one window), while ``msprof-agent top`` runs in a tmux pane: the screens seen
    (time, text), then Ctrl-C; the job's folder. Without tmux the job runs alone (``skipped``: why)."""
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("live_slowed")
    out, exit_file = str(base / "prof"), str(base / "top_exit")
    socket = f"msprof-live-{os.getpid()}"
    skipped = None if shutil.which("tmux") else "tmux is not installed (scripts/install_tmux.sh installs it)"
    if skipped is None:
        command = f"cd {ROOT} && {sys.executable} -m msprof_agent top {out}; echo $? > {exit_file}; sleep 60"
        started = tmux(socket, "new-session", "-d", "-s", "top", "-x", "150", "-y", "50", command)
        skipped = f"tmux cannot start a session here: {started.stderr.strip()}" if started.returncode else None
    options = profile_into(out, capture={"slow_step": 5, "steps": 3, "max_windows": 1, "warmup": 10})
    job = torchrun(out, ["--steps", str(STEPS), "--busy-rank", str(SLOW_RANK), "--busy-from", str(SLOW_FROM), "--busy-ms", "300"], options)
    screens, top_exit = [], None
    try:
        while job.poll() is None:
            if skipped is None:
                screens.append((time.time_ns(), tmux(socket, "capture-pane", "-p", "-t", "top").stdout))
            time.sleep(0.3)
        if skipped is None:
            tmux(socket, "send-keys", "-t", "top", "C-c")
            deadline = time.monotonic() + 10
            while not os.path.exists(exit_file) and time.monotonic() < deadline:
                time.sleep(0.2)
            with open(exit_file) if os.path.exists(exit_file) else open(os.devnull) as handle:
                top_exit = handle.read().strip()
    finally:
        if skipped is None:
            tmux(socket, "kill-server")
        if job.poll() is None:
            job.kill()
    assert job.wait(timeout=300) == 0
    return {"out": out, "screens": screens, "top_exit": top_exit, "skipped": skipped}


ROW = re.compile(r"^\s*(\d+)([ *])\s+\S+\s+(running|ended|stale)\s+(\d+)\s", re.M)


@pytest.mark.torch
def test_top_shows_the_steps_advancing_and_names_the_slowed_rank_within_seconds(slowed_job):
    if slowed_job["skipped"]:
        pytest.skip(slowed_job["skipped"])
    screens = slowed_job["screens"]
    seen = [(ts, {int(m.group(1)): (m.group(2) == "*", int(m.group(4))) for m in ROW.finditer(text)}, text) for ts, text in screens]
    steps_of_0 = [rows[0][1] for _, rows, _ in seen if 0 in rows]
    assert len(set(steps_of_0)) >= 5 and steps_of_0 == sorted(steps_of_0), steps_of_0  # advancing while the job ran
    assert any(len(rows) == RANKS for _, rows, _ in seen), screens[-1][1]
    slowed_at = step_end_ns(os.path.join(slowed_job["out"], "profiler"), SLOW_RANK, SLOW_FROM)
    named = [ts for ts, rows, text in seen if rows.get(SLOW_RANK, (False,))[0] and f"Straggler: rank {SLOW_RANK}" in text]
    assert named, screens[-1][1]
    assert 0 < (named[0] - slowed_at) / 1e9 <= 6.0, (named[0] - slowed_at) / 1e9
    first = next(text for ts, text in screens if ts == named[0])
    assert re.search(rf"rank {SLOW_RANK}: [\d.]+ ms own work a step", first) and "steps/s" in first, first
    assert not any(rows.get(0, (False,))[0] for _, rows, _ in seen)  # the waiting ranks are never called slow
    assert slowed_job["top_exit"] == "0"  # Ctrl-C leaves cleanly


@pytest.mark.torch
def test_the_slowdown_opens_one_window_on_every_rank_at_the_same_steps(slowed_job):
    out = slowed_job["out"]
    windows = [d for d in os.listdir(out) if d.startswith("window_")]
    assert len(windows) == 1, windows
    start, stop = map(int, windows[0].split("_")[1:])
    assert stop == start + 2 and start > SLOW_FROM, (windows, contract.read_request(names.live_capture_file(os.path.join(out, "profiler"))))
    window = os.path.join(out, windows[0], "profiler")
    for rank in range(RANKS):
        records = read_records(window, rank)
        steps = {r["n"]: r for r in records if r.get("k") == "step" and r.get("win")}
        assert sorted(steps) == list(range(start, stop + 1)), (rank, sorted(steps))
        op_starts = [s for r in records if r.get("k") == "ops" for s in r["start"]]
        assert op_starts and min(op_starts) >= steps[start]["start"] and max(op_starts) <= steps[stop]["end"], rank
    rolled = read_json(os.path.join(window, names.CLUSTER_SUMMARY))
    assert rolled["per_step"]["step"] == list(range(start, stop + 1)) and rolled["per_step"]["rank"] == list(range(RANKS))
    assert rolled["slow_ranks"] == [SLOW_RANK], rolled["ranks"]
    request = contract.read_request(names.live_capture_file(os.path.join(out, "profiler")))
    assert request["start"] == start and request["trigger"] == "slow_step" and request["slow_step"] >= SLOW_FROM, request
    for rank in range(RANKS):  # each rank's live record says it recorded those steps, and that the job ended
        record = read_json(os.path.join(out, "profiler", "raw", f"rank_{rank}", names.LIVE_RECORD))
        assert record["capture"]["steps"] == [start, stop] and record["capture"]["state"] == "done", record.get("capture")
        assert record["state"] == "ended" and record["steps_done"] == STEPS


@pytest.fixture(scope="module")
def hung_job(tmp_path_factory):
    """Rank 1 stops STOP_S seconds before step 40's forward, the hang threshold set to HANG_S; the job's stderr lines
    with the time each was seen, a top screen during the stop, and its exit status."""
    pytest.importorskip("torch")
    base = tmp_path_factory.mktemp("live_hung")
    out, err = str(base / "prof"), str(base / "stderr")
    with open(err, "w") as handle:
        job = torchrun(out, ["--steps", "50", "--busy-rank", "-1", "--stop-rank", str(STOP_RANK), "--stop-step", str(STOP_STEP), "--stop-s", str(STOP_S)],
                       extra={environment.HANG_AFTER_S: str(HANG_S)}, stderr=handle)
        seen, screen, refused = {}, None, None
        while job.poll() is None:
            now = time.time_ns()
            with open(err) as reader:
                for line in reader.read().splitlines():
                    seen.setdefault(line, now)
            if screen is None and any("msprof-agent: hang:" in line for line in seen):
                screen = subprocess.run([PY, "-m", "msprof_agent", "top", out, "--once"], capture_output=True, text=True, cwd=ROOT,
                                        timeout=60).stdout
                refused = subprocess.run([PY, "-m", "msprof_agent", "capture", out], capture_output=True, text=True, cwd=ROOT, timeout=60)
            time.sleep(0.1)
    with open(err) as reader:
        lines = reader.read().splitlines()
    return {"out": out, "lines": lines, "seen": seen, "screen": screen, "refused": refused, "status": job.returncode}


@pytest.mark.torch
def test_a_stopped_rank_is_named_missing_with_the_others_collective_and_stacks_within_the_threshold(hung_job):
    lines = hung_job["lines"]
    hang = [i for i, line in enumerate(lines) if line.startswith("msprof-agent: hang:")]
    assert len(hang) == 1, lines[-40:]
    head = lines[hang[0]]
    assert re.search(rf"rank\(s\) 0, 2 wait in all_reduce #\d+ of group world at step {STOP_STEP}; rank\(s\) {STOP_RANK} "
                     rf"\(after step {STOP_STEP - 1}\) never entered it", head), head
    stacks = {int(m.group(1)): m.group(2) for m in (re.match(r"msprof-agent:   rank (\d+) \((?:waits|missing)\) stack: (.*)", line)
                                                     for line in lines[hang[0] + 1:hang[0] + 1 + RANKS]) if m}
    assert set(stacks) == {0, 1, 2}, lines[hang[0]:hang[0] + 4]
    assert all(re.search(r"> all_reduce \(distributed_c10d\.py:\d+\)$", stacks[r]) for r in (0, 2)), stacks
    with open(LIVE_JOB) as handle:
        stop_line = next(i for i, line in enumerate(handle, 1) if "time.sleep(args.stop_s)" in line)
    assert stacks[STOP_RANK] == f"<module> (slow_rank_torch.py:{stop_line})", stacks  # where the stopped rank is
    last_end = max(step_end_ns(os.path.join(hung_job["out"], "profiler"), r, STOP_STEP - 1) for r in range(RANKS))
    assert HANG_S <= (hung_job["seen"][head] - last_end) / 1e9 <= HANG_S + 2.0
    screen = hung_job["screen"]
    assert screen and "HUNG" in screen.splitlines()[0] and "HANG hang:" in screen, screen
    assert f"rank(s) {STOP_RANK} (after step {STOP_STEP - 1}) never entered it" in " ".join(screen.split()), screen


@pytest.mark.torch
def test_a_capture_is_refused_where_the_run_records_every_step_s_ops_already(hung_job):
    refused = hung_job["refused"]
    assert refused.returncode == 1 and "records the ops of every step already" in refused.stdout, refused.stdout + refused.stderr


@pytest.mark.torch
def test_the_hung_job_ends_as_it_would_without_the_agent(hung_job):
    assert hung_job["status"] == 0, hung_job["lines"][-30:]
    for rank in range(RANKS):
        steps = [r["n"] for r in read_records(os.path.join(hung_job["out"], "profiler"), rank) if r.get("k") == "step"]
        assert steps == list(range(1, 51)), (rank, steps[-5:])


@pytest.mark.torch
def test_a_capture_asked_from_outside_records_the_same_steps_on_every_rank(tmp_path):
    """``msprof-agent capture DIR --steps 5`` on a running job (its run claimed by a capture policy that opens no window of
    its own here): the steps it names, ahead of every rank, are each rank's window."""
    pytest.importorskip("torch")
    out = str(tmp_path / "prof")
    job = torchrun(out, ["--steps", "100", "--busy-rank", "-1"], profile_into(out, capture={"every": 1000}))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and job.poll() is None and not any(
                r.get("steps_done", 0) >= 10 for r in contract.job_records(out)):
            time.sleep(0.2)
        asked = subprocess.run([PY, "-m", "msprof_agent", "capture", out, "--steps", "5"], capture_output=True, text=True, cwd=ROOT, timeout=60)
        again = subprocess.run([PY, "-m", "msprof_agent", "capture", out, "--steps", "5"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    finally:
        status = job.wait(timeout=300)
    assert status == 0 and asked.returncode == 0, asked.stdout + asked.stderr
    found = re.match(r"msprof-agent capture: steps (\d+)\.\.(\d+) on every rank \(3 running, the furthest at step (\d+)\) -> (\S+)$", asked.stdout.strip())
    assert found, asked.stdout
    start, stop, done = (int(found.group(i)) for i in (1, 2, 3))
    assert stop == start + 4 and start > done and found.group(4) == os.path.join(out, names.window_name(start, stop), "profiler")
    assert again.returncode == 1 and f"steps {start}..{stop} are already asked for" in again.stdout, again.stdout
    window = found.group(4)
    for rank in range(RANKS):
        steps = sorted(r["n"] for r in read_records(window, rank) if r.get("k") == "step" and r.get("win"))
        assert steps == list(range(start, stop + 1)), (rank, steps)
        assert any(r.get("k") == "ops" for r in read_records(window, rank)), rank
    assert read_json(os.path.join(window, names.CLUSTER_SUMMARY))["per_step"]["step"] == list(range(start, stop + 1))


@pytest.mark.mindspore
def test_a_mindspore_job_keeps_the_same_live_record(lenet_job):
    """The record is the session's, whatever the framework: the bundled LeNet's (12 steps) says it ended after them."""
    [path] = names.live_records(lenet_job)
    record = read_json(path)
    assert (record["framework"], record["state"], record["end_reason"], record["steps_done"]) == ("mindspore", "ended", "exit", 12), record
    assert record["steps"]["n"] == list(range(1, 13)) and all(ms > 0 for ms in record["steps"]["ms"])
    view = rules.job_view(contract.job_records(lenet_job), record["updated_ns"])
    assert view["state"] == "ended" and view["ranks"][0]["steps_done"] == 12 and view["hang"] is None
