"""``msprof-agent compare`` and ``run --baseline`` on real profiled runs of the bundled torch example.

The gate used on identical jobs is generous on purpose: on a shared 2-core machine a whole run can
be slower than the previous one as a whole (measured: identical 20-step runs, ~50 ms of training,
differed by up to 20 % in p50 step time and 40 % in a ~0.07 ms data wait; 150-step runs by up to
10 %, but up to 60 % while other jobs loaded the machine), a shift the within-run noise estimate
cannot see. So the identical jobs run 150 steps and the gate is step_time>100 % with an absolute
data_wait>2 ms; the 50 ms data sleep still breaches both by far (~2000 % and ~50 ms).
"""
import glob
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import EXAMPLES, PY, TINY, read_csv, read_json, step_trace
from msprof_agent import compare
from msprof_agent.contract.names import queue_file

TORCH_CNN = os.path.join(EXAMPLES, "torch_cnn.py")
GATE = "step_time>100%,data_wait>2ms,peak_memory>20%"
STEPS, SLOW_STEPS = "150", "20"


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "PYTHONPATH", "GITHUB_STEP_SUMMARY", "RANK_ID", "RANK", "WORLD_SIZE")}
    env.update(extra or {})
    return env


def agent(args, env_extra=None, timeout=300):
    return subprocess.run([PY, "-m", "msprof_agent"] + args, env=clean_env(env_extra), capture_output=True, text=True, timeout=timeout)


def profile(out, steps, *flags, baseline=None):
    gate = ["--baseline", baseline, "--fail-on", GATE] if baseline else []
    return agent(["run", "--output-path", out] + gate + ["--", PY, TORCH_CNN, "--steps", steps] + list(flags))


def fails(stderr):
    return [line for line in stderr.splitlines() if line.startswith("msprof-agent: FAIL ")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    paths = {name: str(root / name) for name in ("base", "same", "slow")}
    for name in ("base", "same"):
        result = profile(paths[name], STEPS)
        assert result.returncode == 0, result.stderr
    slow = profile(paths["slow"], SLOW_STEPS, "--data-sleep-ms", "50", baseline=paths["base"])
    return paths, slow


@pytest.mark.torch
def test_same_job_twice_passes_the_gate(runs):
    paths, _ = runs
    result = agent(["compare", paths["base"], paths["same"], "--fail-on", GATE])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("msprof-agent compare: PASS")
    assert fails(result.stderr) == []


@pytest.mark.torch
def test_data_sleep_fails_the_gate_through_run_baseline(runs):
    _, slow = runs
    assert slow.returncode == 1, slow.stderr
    assert f"rank 0: {SLOW_STEPS} optimizer steps" in slow.stdout
    assert "msprof-agent compare: FAIL (2 limits breached)" in slow.stdout
    lines = fails(slow.stderr)
    assert len(lines) == 2, slow.stderr
    assert lines[0].startswith("msprof-agent: FAIL step_time p50 regressed:") and "limit step_time>100%" in lines[0]
    assert lines[1].startswith("msprof-agent: FAIL data_wait p50 regressed:") and "limit data_wait>2 ms" in lines[1]


def _markdown_table(markdown, first_header):
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


@pytest.mark.torch
def test_markdown_and_json_carry_the_numbers_of_the_files(runs, tmp_path):
    paths, _ = runs
    step_summary = tmp_path / "step_summary.md"
    step_summary.write_text("earlier step\n")
    out_json = str(tmp_path / "compare.json")
    result = agent(["compare", paths["base"], paths["slow"], "--fail-on", GATE, "--markdown", "--json", out_json],
                   {"GITHUB_STEP_SUMMARY": str(step_summary)})
    assert result.returncode == 1
    data = read_json(out_json)
    assert step_summary.read_text() == "earlier step\n" + result.stdout + "\n"
    rows = {(r["metric"], r["stat"]): r for r in data["rows"]}

    for name, side, steps in (("base", "base", STEPS), ("slow", "new", SLOW_STEPS)):
        directory = os.path.join(paths[name], "profiler")
        summary = read_json(os.path.join(directory, "summary_0.json"))
        warm = {str(w["step"]) for w in summary["warmup_steps"]}  # left out of every figure compared
        every = step_trace(directory)[1]
        trace = [r for r in every if r[0] not in warm]
        totals = np.array([int(r[3]) for r in trace]) / 1e5
        waits = [float(line.split()[3]) for line in open(os.path.join(directory, queue_file(directory, 0)))
                 if line.startswith("0 0 ") and line.split()[2] not in warm]
        assert len(every) == summary["steps_profiled"] == int(steps) == data[side]["steps"]
        assert rows[("step_time", "p50")][side] == round(float(np.percentile(totals, 50)), 3)
        assert rows[("step_time", "p90")][side] == round(float(np.percentile(totals, 90)), 3)
        assert abs(rows[("step_time", "p50")][side] - summary["step_time_ms"]["p50"]) <= 0.001
        assert rows[("data_wait", "p50")][side] == round(float(np.percentile(waits, 50)), 3)
        assert rows[("peak_memory", "peak")][side] == round(summary["memory"]["peak_rss_mb"], 3)
        stage_means = {stage: np.mean([int(r[6 + i]) for r in trace]) / 1e5 for i, stage in enumerate(compare.STAGES)}
        assert all(abs(stage_means[s] - summary["stages_ms"][s]) <= 0.001 for s in compare.STAGES)
        assert data[side]["reports"] == [os.path.join(directory, "report_0.html")]
        ops = {row[0]: float(row[3]) for row in read_csv(os.path.join(directory, "cpu_op_type_info_0.csv"))[1:]}
        for op in data["top_op_types"]:
            assert op[f"{side}_ms_per_step"] == round(ops.get(op["op_type"], 0.0) / int(steps), 3)

    table = _markdown_table(result.stdout, "metric")
    assert len(table) == len(data["rows"])
    for cells, row in zip(table, data["rows"]):
        assert cells[0] == f"{row['metric']} ({row['unit']})" and cells[1] == row["stat"]
        assert [float(c) for c in cells[2:5]] == [row["base"], row["new"], row["change"]]
        assert float(cells[5].rstrip("%")) == row["change_pct"]
        assert cells[8] == row["status"]
    assert [f"- {b}" for b in data["breaches"]] == [line for line in result.stdout.splitlines() if line.startswith("- ") and "regressed" in line]
    assert {r["metric"] for r in data["rows"] if r["status"] == "regression"} == {"step_time", "data_wait"}
    assert len(data["top_op_types"]) == compare.TOP_OPS
    assert _markdown_table(result.stdout, "op type") == [[o["op_type"]] + [f"{v:.3f}" for v in (o["base_ms_per_step"], o["new_ms_per_step"])]
                                                         + [f"{o['change']:+.3f}", "n/a" if o["change_pct"] is None else f"{o['change_pct']:+.1f}%"]
                                                         for o in data["top_op_types"]]


@pytest.mark.torch
def test_failing_job_keeps_its_exit_status(runs, tmp_path):
    paths, _ = runs
    result = agent(["run", "--output-path", str(tmp_path / "new"), "--baseline", paths["base"], "--fail-on", GATE,
                    "--", PY, TORCH_CNN, "--steps", "30", "--exit-code", "3"])  # 6 steps left a p50 of ~4 steady ones: 2.1 -> 5.8 ms once
    assert result.returncode == 3, result.stderr
    assert "job exited with status 3" in result.stderr
    assert "msprof-agent compare: PASS" in result.stdout  # still compared, for the log


@pytest.mark.torch
def test_sigterm_is_forwarded_to_the_job_and_its_death_kept(runs, tmp_path):
    paths, _ = runs
    out = tmp_path / "new"
    proc = subprocess.Popen([PY, "-m", "msprof_agent", "run", "--output-path", str(out), "--baseline", paths["base"],
                             "--", PY, TORCH_CNN, "--steps", "1000", "--data-sleep-ms", "20"],
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not glob.glob(str(out / "profiler" / "raw" / "rank_0" / "*.jsonl")) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGTERM, stderr
    assert f"job exited with status {-signal.SIGTERM}" in stderr
    assert "msprof-agent compare:" in stdout  # the job's partial profile was compared before we died
    steps = read_json(str(out / "profiler" / "summary_0.json"))["steps_profiled"]
    assert 0 < steps < 1000


COUNT_SIGNALS = """
import signal, time
hits = []
for number in (signal.SIGINT, signal.SIGTERM):
    signal.signal(number, lambda n, _f: hits.append(int(n)))
print("ready", flush=True)
end = time.time() + 3
while time.time() < end:
    time.sleep(0.05)
print("hits", hits, flush=True)
"""


@pytest.mark.torch
def test_terminal_ctrl_c_reaches_the_job_once_and_kill_is_forwarded(runs, tmp_path):
    """Ctrl-C on a terminal signals the whole foreground group: the wrapper must not send it again."""
    import pty
    import select

    paths, _ = runs
    script = tmp_path / "count_signals.py"
    script.write_text(COUNT_SIGNALS)
    pid, fd = pty.fork()
    if pid == 0:
        env = clean_env()
        os.execve(PY, [PY, "-m", "msprof_agent", "run", "--output-path", str(tmp_path / "out"), "--baseline", paths["base"], "--", PY, str(script)], env)
    seen = b""
    deadline = time.time() + 60
    while time.time() < deadline:
        if select.select([fd], [], [], 0.1)[0]:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
        if b"ready" in seen and b"\x03" not in seen:
            os.write(fd, b"\x03")  # the terminal turns this into SIGINT for the foreground group
            seen += b"\x03"
            time.sleep(0.3)
            os.kill(pid, signal.SIGTERM)  # sent to the wrapper alone
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    text = seen.decode(errors="replace")
    assert f"hits [{int(signal.SIGINT)}, {int(signal.SIGTERM)}]" in text, text
    assert status == 2 and "no analysed profile under" in text  # the job ran no framework: nothing to compare


@pytest.mark.torch
def test_two_ranks_are_pooled(two_tiny_ranks, tmp_path):
    out = two_tiny_ranks
    out_json = str(tmp_path / "c.json")
    result = agent(["compare", out, os.path.join(out, "profiler"), "--fail-on", "step_time>1%", "--json", out_json])
    assert result.returncode == 0, result.stderr
    data = read_json(out_json)
    assert data["new"]["ranks"] == [0, 1] and data["new"]["steps"] == 9
    step = next(r for r in data["rows"] if r["metric"] == "step_time" and r["stat"] == "p50")
    assert step["change"] == 0 and step["status"] == "ok"


@pytest.fixture(scope="module")
def other_jobs(tmp_path_factory, lenet_job, two_tiny_ranks):
    """A MindSpore LeNet run, and the tiny torch loop as one rank and as two."""
    one = str(tmp_path_factory.mktemp("other") / "one")
    result = agent(["run", "--output-path", one, "--", PY, TINY, "--steps", "5"])
    assert result.returncode == 0, result.stderr
    return {"mindspore": lenet_job, "one": one, "two": two_tiny_ranks}


def warnings(stderr):
    return [line for line in stderr.splitlines() if line.startswith("msprof-agent: compare: warning: ")]


@pytest.mark.torch
@pytest.mark.mindspore
def test_runs_of_different_jobs_are_said_and_fail_a_gate(other_jobs):
    paths = other_jobs
    plain = agent(["compare", paths["one"], paths["mindspore"]])
    assert plain.returncode == 0, plain.stderr
    said = warnings(plain.stderr)
    assert said[0] == "msprof-agent: compare: warning: the runs differ in framework: base torch, new mindspore"
    assert "of their op time by op type and 0% of their op calls (under 50%): a different model, not a code change" in said[1]
    assert len(said) == 2
    assert [line for line in plain.stdout.splitlines() if line.startswith("warning: ")] == [line[len("msprof-agent: compare: "):] for line in said]
    gated = agent(["compare", paths["one"], paths["mindspore"], "--fail-on", GATE])
    assert gated.returncode == 2 and gated.stdout.startswith("msprof-agent compare: FAIL (the runs are of different jobs")
    assert all(line.endswith("the gate fails (--allow-different compares them anyway)") for line in warnings(gated.stderr))
    allowed = agent(["compare", paths["one"], paths["mindspore"], "--fail-on", "step_time>100000%", "--allow-different"])
    assert allowed.returncode == 0 and allowed.stdout.startswith("msprof-agent compare: PASS") and len(warnings(allowed.stderr)) == 2
    ranks = agent(["compare", other_jobs["one"], other_jobs["two"], "--fail-on", "step_time>100000%"])
    assert ranks.returncode == 2 and warnings(ranks.stderr)[0] == (
        "msprof-agent: compare: warning: the runs differ in world size: base 1 ranks, new 2; "
        "the gate fails (--allow-different compares them anyway)")
    assert not any("framework" in line for line in warnings(ranks.stderr))


@pytest.mark.unit
def test_shared_op_time_is_the_sum_of_the_smaller_shares():
    assert compare.shared_op_time({"MatMul": 3.0, "Conv": 1.0}, {"MatMul": 6.0, "Conv": 2.0}) == 1.0
    assert compare.shared_op_time({"MatMul": 3.0, "Conv": 1.0}, {"MatMul": 1.0, "Relu": 3.0}) == 0.25
    assert compare.shared_op_time({}, {"MatMul": 1.0}) is None


@pytest.mark.unit
def test_a_loop_probe_that_ran_fast_does_not_hide_the_cores_other_work_took():
    """The figures of a loaded run that passed unflagged: its loop speed read 1.7x the base's, its CPU share half."""
    speed = compare.machine_speeds({"speed": 24.674, "cpu_share": 0.9917}, {"speed": 20.46, "cpu_share": 0.4762})
    assert speed["ratio"] == round(0.4762 / 0.9917, 3) and speed["noise_widened_by"] == "108.3% of the base value"
    slower_host = compare.machine_speeds({"speed": 30.0, "cpu_share": 0.99}, {"speed": 15.0, "cpu_share": 0.99})
    assert slower_host["ratio"] == 0.5  # same share, half the loop speed: a slower host


@pytest.mark.unit
def test_limits_from_a_string_and_from_toml_agree(tmp_path):
    table = tmp_path / "gate.toml"
    table.write_text('[fail_on]\nstep_time = "5%"\n"data_wait.p90" = "2ms"\npeak_memory = 10\n')
    from_toml = compare.parse_limits(str(table))
    assert from_toml == compare.parse_limits("step_time>5%, data_wait.p90>2ms, peak_memory>10%")
    assert [(limit["metric"], limit["stat"], limit["value"], limit["unit"]) for limit in from_toml] == [
        ("step_time", "p50", 5.0, "%"), ("data_wait", "p90", 2.0, "ms"), ("peak_memory", "peak", 10.0, "%")]
    assert [limit["text"] for limit in from_toml] == ["step_time>5%", "data_wait.p90>2 ms", "peak_memory>10%"]


@pytest.mark.unit
@pytest.mark.parametrize("spec, message", [
    ("step_time>5", "expected METRIC[.p50|.p90|.mean]>N%"),
    ("steptime>5%", "unknown metric 'steptime'"),
    ("peak_memory.p90>5%", "peak_memory is one number per run"),
    ("data_wait>3mb", "data_wait takes % or ms"),
])
def test_bad_limits_are_one_line_and_exit_2(spec, message, tmp_path):
    result = agent(["compare", str(tmp_path), str(tmp_path), "--fail-on", spec])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr


@pytest.mark.unit
def test_missing_profile_is_one_line_and_exit_2(tmp_path):
    result = agent(["compare", str(tmp_path), str(tmp_path)])
    assert result.returncode == 2
    assert result.stderr.startswith("msprof-agent: compare: no analysed profile under") and result.stderr.count("\n") == 1


def _tiny_run(out, sleep_ms, competitors=0):
    """30 steps of the tiny torch loop with ``sleep_ms`` of waiting and ``SPIN_MS`` of CPU-bound host work
    in each, beside ``competitors`` CPU-bound processes sharing the cores."""
    hogs = [subprocess.Popen([PY, "-c", "while True: pass"]) for _ in range(competitors)]
    try:
        result = agent(["run", "--output-path", out, "--", PY, TINY, "--steps", "30", "--sleep-ms", str(sleep_ms), "--spin-ms", str(SPIN_MS)])
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert result.returncode == 0, result.stderr
    return out


SPIN_MS = 30  # each step's CPU work: what CPU-bound neighbours can take the cores from (a sleep they cannot slow)


@pytest.fixture(scope="module")
def drift_runs(tmp_path_factory):
    """The loaded run has 3 CPU-bound neighbours on the 2 cores. Each step spins SPIN_MS on a CPU, so the
    job is runnable against them for most of its step and waits for a core, at about half its share: a job
    that only slept woke favoured by the scheduler and once read 0.92 of the quiet run's speed."""
    root = tmp_path_factory.mktemp("drift")
    return {"base": _tiny_run(str(root / "base"), 20), "slow": _tiny_run(str(root / "slow"), 80),
            "loaded": _tiny_run(str(root / "loaded"), 20, competitors=3)}


@pytest.mark.torch
def test_host_work_fails_the_gate_and_a_busier_machine_does_not(drift_runs):
    """60 ms more host work per step fails step_time>25%; the same job passes when three CPU-bound processes
    shared the cores (test_same_job_twice_passes_the_gate has it on the same machine): its CPU work waits for
    a core and its steps grow, and its machine-speed probe shows the slower machine and the noise widens by it."""
    gate = "step_time>25%"
    slow = agent(["compare", drift_runs["base"], drift_runs["slow"], "--fail-on", gate])
    assert slow.returncode == 1 and "msprof-agent: FAIL step_time p50 regressed" in slow.stderr, slow.stdout
    result = agent(["compare", drift_runs["base"], drift_runs["loaded"], "--fail-on", gate])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "machine speed (million probe-loop iterations/s on a CPU, higher is faster): base " in result.stdout
    loaded = compare.compare(drift_runs["base"], drift_runs["loaded"], compare.parse_limits(gate))
    base_share = read_json(glob.glob(os.path.join(drift_runs["base"], "**", "summary_0.json"), recursive=True)[0])["machine_speed"]["cpu_share"]
    if base_share > 0.8:  # the baseline ran on a quiet machine, so the hogs must show; on a machine already
        # busy when the baseline ran (other jobs), both probes read alike, and rightly so
        assert loaded["machine_speed"]["ratio"] < 1 - compare.SPEED_LIMIT, (loaded["machine_speed"], base_share)
        assert any("the machines differ" in note for note in loaded["notes"])
    for run in drift_runs.values():  # the probe is in every summary; torch's first step is no steady step
        summary = read_json(glob.glob(os.path.join(run, "**", "summary_0.json"), recursive=True)[0])
        assert 0 < summary["machine_speed"]["cpu_share"] <= 1 and summary["machine_speed"]["host_mips"] > 0
        assert all(w["step"] <= 15 for w in summary["warmup_steps"])


@pytest.mark.torch
def test_run_baseline_into_its_own_folder_compares_with_the_run_it_kept(runs, tmp_path):
    """A CI job that reruns into the folder holding its baseline: the start keeps the baseline aside (earlier/),
    and the gate compares the new run with it, not with itself."""
    paths, _ = runs
    shutil.copytree(paths["base"], tmp_path / "ci")
    result = profile(str(tmp_path / "ci"), SLOW_STEPS, "--data-sleep-ms", "50", baseline=str(tmp_path / "ci"))
    (kept,) = glob.glob(str(tmp_path / "ci" / "earlier" / "*"))
    assert f"comparing with the baseline {kept}" in result.stderr, result.stderr
    assert result.returncode == 1 and "msprof-agent compare: FAIL" in result.stdout, result.stdout + result.stderr
