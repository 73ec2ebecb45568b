"""The agent foundation, through real interpreters: the hook, option errors, lifecycle, signals, fork, ranks, run."""
import glob
import os
import shutil
import signal
import subprocess

import pytest

from conftest import HOOK_DIR, PY, ROOT, SCRIPTS, TINY, agent_lines, client_python, hook_env, profile_into, ranks_said, read_json, run_script, steps_in

PROBE = os.path.join(SCRIPTS, "probe_imports.py")


# -- the off path ---------------------------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("options", [None, "", '{"start": false}', '{"start": false, "output_path": "/tmp/x"}'])
def test_off_path_loads_nothing(options, tmp_path):
    result = run_script([PROBE], options=options, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["no-agent", "no-wrapt", "no-json", "threads=1"]
    assert result.stderr == ""
    assert os.listdir(tmp_path) == []


@pytest.mark.unit
@pytest.mark.parametrize("argv, launcher", [
    (["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"], "torch.distributed.run"),
    (["python", "-u", "-X", "faulthandler", "-m", "torch.distributed.launch", "train.py"], "torch.distributed.launch"),
    (["/venv/bin/python", "/venv/bin/torchrun", "--standalone", "train.py"], "torchrun"),
    (["python", "/usr/bin/msrun", "--worker_num", "8", "train.py"], "msrun"),
    (["python", "/venv/bin/accelerate", "launch", "train.py"], "accelerate"),
    (["python", "/venv/bin/accelerate", "config"], None),
    (["python", "train.py", "torchrun"], None),
    (["python", "-m", "train"], None),
    (["python", "-c", "import torch"], None),
    (["python"], None),
])
def test_a_launcher_is_not_profiled_its_ranks_are(argv, launcher):
    """The launcher imports torch but steps no model: it would only say so on stderr once per job."""
    from msprof_agent.bootstrap import launcher as launcher_of

    assert launcher_of(argv) == launcher


@pytest.mark.unit
def test_msruns_scheduler_process_is_not_profiled(tmp_path):
    """msrun runs the script once more as its scheduler (MS_ROLE=MS_SCHED), which steps nothing: silent there."""
    result = run_script([PLAIN_JOB], profile_into(str(tmp_path / "p")), extra_env={"MS_ROLE": "MS_SCHED"})
    assert result.returncode == 0 and result.stderr == "" and not os.path.exists(tmp_path / "p")


@pytest.mark.mindspore
def test_msruns_launcher_and_scheduler_start_no_mindspore_profiler(tmp_path):
    """They import MindSpore, whose own profiler starts on MS_PROFILER_OPTIONS: under the agent it does not
    (it wrote an empty ``*_ascend_ms`` directory for each into the job's output, and parsed it on msrun's stdout)."""
    launcher = tmp_path / "msrun"
    launcher.write_text("import mindspore\n")
    for name, args, env in (("launcher", [str(launcher)], {}), ("scheduler", ["-c", "import mindspore"], {"MS_ROLE": "MS_SCHED"})):
        out = tmp_path / name
        result = run_script(args, profile_into(str(out)), extra_env=env)
        assert result.returncode == 0, result.stderr
        assert not os.path.exists(out), (name, os.listdir(out))


# -- bad input: one clear line, profiling off, the job untouched -------------------------------------

PLAIN_JOB = os.path.join(SCRIPTS, "plain_job.py")
BAD_OPTIONS = [
    ('{"start": true, "output_path": }', "not valid JSON"),
    ('[1,2]', "expected a JSON object"),
    ('1', "expected a JSON object"),
    ('{"start": "false"}', 'key "start": got \'false\' (str); accepted: true or false'),
    ('{"start": true, "op_time": 1}', 'key "op_time": got 1 (int)'),
    ('{"start": true, "output_pth": "/tmp/x"}', 'unknown key "output_pth" (did you mean "output_path"?)'),
    ('{"start": true, "timeline_limit": 0}', 'key "timeline_limit": got 0'),
    ('{"start": true, "profile_framework": "everything"}', 'accepted: "all", "time" or null'),
    ('{"start": true, "op_time": false, "profile_memory": true}', 'key "profile_memory": true needs "op_time": true'),
    ('{"start": true, "start_step": 5, "stop_step": 2}', 'key "stop_step": got 2, before "start_step" 5'),
]


def check_one_clear_line(result, expected, tmp_path, trained=False):
    """The job left as it would alone (status 3, its own output); one line of ours saying why profiling is off,
    said again last where the process imported a framework (``trained``): the first scrolls away under the job's output."""
    lines = agent_lines(result.stderr)
    assert result.returncode == 3
    assert "trained 6 steps" in result.stdout
    assert len(lines) == 1 + trained, result.stderr
    assert expected in lines[0] and "Profiling is off for this run." in lines[0]
    if trained:
        assert result.stderr.splitlines()[-1] == lines[1] and lines[1].startswith("msprof-agent: no profile written: ") and expected in lines[1]
    assert not os.path.exists(tmp_path / "data")


@pytest.mark.unit
@pytest.mark.parametrize("options, expected", BAD_OPTIONS)
def test_bad_options_give_one_clear_line_and_leave_the_job_alone(options, expected, tmp_path):
    check_one_clear_line(run_script([PLAIN_JOB, "--exit-code", "3"], options=options, cwd=str(tmp_path)), expected, tmp_path)


@pytest.mark.torch
@pytest.mark.parametrize("options, expected", [BAD_OPTIONS[0], ('{"start": true, "profile_memroy": true}',
                                                                 'unknown key "profile_memroy" (did you mean "profile_memory"?)')])
def test_bad_options_leave_a_torch_training_alone(tmp_path, options, expected):
    check_one_clear_line(run_script([TINY, "--exit-code", "3"], options=options, cwd=str(tmp_path)), expected, tmp_path, trained=True)


@pytest.mark.torch
def test_bad_rank_variable_is_reported(tmp_path, out_dir):
    result = run_script([TINY], options=profile_into(out_dir), extra_env={"RANK_ID": "zero"})
    assert result.returncode == 0
    assert "environment variable RANK_ID: got 'zero'" in result.stderr
    assert not os.path.exists(os.path.join(out_dir, "profiler", "summary_0.json"))


@pytest.mark.torch
def test_unwritable_output_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_script([TINY], options=profile_into(str(blocker / "sub")))
    assert result.returncode == 0 and "trained 6 steps" in result.stdout
    first, last = agent_lines(result.stderr)  # said at start, and again as the training exits
    assert 'key "output_path": cannot write to' in first and first.endswith(". Profiling is off for this run.")
    assert last == "msprof-agent: no profile written: " + first.removeprefix("msprof-agent: ").removesuffix(". Profiling is off for this run.")


@pytest.mark.torch
def test_default_output_path_is_data_in_cwd(tmp_path):
    result = run_script([TINY], options={"start": True}, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert os.path.isfile(tmp_path / "data" / "profiler" / "profiler_info_0.json")


# -- the hook itself ------------------------------------------------------------------------------

@pytest.mark.torch
def test_user_sitecustomize_still_runs_exactly_once(tmp_path, out_dir):
    user = tmp_path / "usersite"
    user.mkdir()
    (user / "sitecustomize.py").write_text("print('USER SITECUSTOMIZE', flush=True)\n")
    env = hook_env(profile_into(out_dir))
    env["PYTHONPATH"] = os.pathsep.join([HOOK_DIR, str(user)])
    result = subprocess.run([PY, TINY], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("USER SITECUSTOMIZE") == 1
    assert len(steps_in(out_dir)) == 6


@pytest.mark.unit
def test_user_sitecustomize_failing_on_another_import_is_reported(tmp_path):
    user = tmp_path / "usersite"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import module_that_does_not_exist\n")
    env = hook_env(None)
    env["PYTHONPATH"] = os.pathsep.join([HOOK_DIR, str(user)])
    result = subprocess.run([PY, "-c", "print('ok')"], env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "ok"
    assert "msprof-agent: your sitecustomize failed to import" in result.stderr and "module_that_does_not_exist" in result.stderr


@pytest.mark.unit
def test_python_dash_S_skips_the_hook(out_dir):
    result = run_script(["-S", PROBE], options=profile_into(out_dir))
    assert result.stdout.split()[0] == "no-agent"
    assert not os.path.exists(out_dir)


@pytest.mark.unit
def test_hook_with_variable_set_activates_once(out_dir):
    result = run_script([PROBE], options=profile_into(out_dir))
    assert result.returncode == 0
    assert result.stdout.split()[0] == "agent"
    assert result.stdout.split()[3] == "threads=1"  # no thread before the first step


# -- lifecycle: normal end, exception, signals, fork --------------------------------------------------

@pytest.mark.torch
def test_start_true_profiles_and_prints_a_summary(out_dir):
    result = run_script([TINY, "--steps", "6"], options=profile_into(out_dir))
    assert result.returncode == 0, result.stderr
    assert "trained 6 steps" in result.stdout
    assert steps_in(out_dir) == [1, 2, 3, 4, 5, 6]
    summary = read_json(os.path.join(out_dir, "profiler", "summary_0.json"))
    assert summary["steps_profiled"] == 6 and summary["end_reason"] == "exit"
    assert "msprof-agent: profiled 6 of 6 steps" in result.stderr


@pytest.mark.torch
def test_step_window_from_the_variable(out_dir):
    result = run_script([TINY, "--steps", "8"], options=profile_into(out_dir, start_step=3, stop_step=5))
    assert result.returncode == 0, result.stderr
    assert steps_in(out_dir) == [3, 4, 5]
    summary = read_json(os.path.join(out_dir, "profiler", "summary_0.json"))
    assert summary["steps_total"] == 8  # step timing stays on outside the window


@pytest.mark.torch
def test_exception_at_step_keeps_traceback_status_and_earlier_steps_in(out_dir):
    result = run_script([TINY, "--steps", "8", "--raise-at", "5"], options=profile_into(out_dir))
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "RuntimeError: injected failure at step 5" in result.stderr
    assert steps_in(out_dir) == [1, 2, 3, 4]


@pytest.mark.torch
def test_sigterm_at_step_keeps_status_and_earlier_steps_in(out_dir):
    result = run_script([TINY, "--steps", "8", "--sigterm-at", "5"], options=profile_into(out_dir))
    assert result.returncode == -signal.SIGTERM
    assert steps_in(out_dir) == [1, 2, 3, 4]
    assert read_json(os.path.join(out_dir, "profiler", "summary_0.json"))["end_reason"] == "SIGTERM"


@pytest.mark.torch
def test_sigkill_leaves_raw_data_for_offline_analysis(out_dir):
    """SIGKILL runs no handler: the raw store holds the steps up to its last flush, which happens at
    a step end at most 0.1 s after the one before. Step 4 lasts 0.15 s, so steps 1-4 are on disk."""
    result = run_script([TINY, "--steps", "8", "--slow-at", "4", "--slow-ms", "150", "--sigkill-at", "5"], options=profile_into(out_dir))
    assert result.returncode == -signal.SIGKILL
    assert not os.path.exists(os.path.join(out_dir, "profiler", "summary_0.json"))
    analysed = subprocess.run([PY, "-m", "msprof_agent", "analyse", out_dir], capture_output=True, text=True, timeout=300)
    assert analysed.returncode == 0, analysed.stderr
    assert steps_in(out_dir) == [1, 2, 3, 4]
    assert read_json(os.path.join(out_dir, "profiler", "summary_0.json"))["end_reason"] == "killed (no end record)"


@pytest.mark.torch
def test_two_ranks_sigkilled_together_are_both_analysable(out_dir):
    """Two ranks sharing one output, SIGKILLed at once mid-run (as a scheduler kills a job): analyse finds both
    raw stores and writes each rank's summary, with the steps each had flushed."""
    import time

    procs = [subprocess.Popen([PY, TINY, "--steps", "400", "--sleep-ms", "60"], env=hook_env(profile_into(out_dir), {"RANK_ID": str(rank), "RANK_SIZE": "2"}),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for rank in (0, 1)]
    deadline = time.time() + 120
    raw = os.path.join(out_dir, "profiler", "raw")
    while len(glob.glob(os.path.join(raw, "rank_*", "*.jsonl"))) < 2 and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)  # a few steps each
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
    assert [proc.wait(timeout=60) for proc in procs] == [-signal.SIGKILL] * 2
    analysed = subprocess.run([PY, "-m", "msprof_agent", "analyse", out_dir], capture_output=True, text=True, timeout=300)
    assert analysed.returncode == 0, analysed.stderr
    for rank in (0, 1):
        summary = read_json(os.path.join(out_dir, "profiler", f"summary_{rank}.json"))
        assert summary["end_reason"] == "killed (no end record)" and 2 <= summary["steps_total"] < 400, (rank, summary["steps_total"])


FULL_DISK_JOB = """mount -t tmpfs -o size=32m tmpfs "$1" || exit 99
"$2" "$3" --steps 16 --sleep-ms 40 --fill-disk "$1" --fill-at 5 --free-at 12 --exit-code 3 2>"$4/stderr"
status=$?
cp -a "$1/." "$4"
exit $status
"""


@pytest.mark.torch
def test_a_full_disk_mid_run_costs_the_job_nothing_and_the_lost_steps_are_counted(tmp_path):
    """The job fills its disk at step 5 (a checkpoint) and frees it at step 12, in a 32 MB tmpfs of its own
    (a private mount namespace): it keeps its output and exit status, the agent says the failed write once,
    and the summary and the exit lines count the steps whose raw records were lost."""
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    kept.mkdir()
    env = hook_env(profile_into(str(disk / "prof")))
    result = subprocess.run(["unshare", "-m", "sh", "-c", FULL_DISK_JOB, "job", str(disk), PY, TINY, str(kept)], env=env,
                            capture_output=True, text=True, timeout=300)
    if result.returncode == 99 or "unshare:" in result.stderr:
        pytest.skip(f"no private tmpfs here: {result.stderr.strip()[:200]}")
    stderr = (kept / "stderr").read_text()
    assert result.returncode == 3, stderr
    summary = read_json(str(kept / "prof" / "profiler" / "summary_0.json"))
    lost = 16 - summary["steps_total"]
    assert lost > 0, summary["steps_total"]
    note = f"the raw records of {lost} steps were lost (No space left on device): the figures are of the other steps"
    assert note in summary["notes"]
    lines = agent_lines(stderr)
    assert sum("No space left on device" in line and "the job goes on" in line for line in lines) == 1, lines
    assert any(line.endswith(note) for line in stderr.splitlines()), stderr  # the exit table's note


@pytest.mark.torch
def test_fork_child_writes_nothing(out_dir):
    result = run_script([TINY, "--steps", "6", "--fork-at", "3"], options=profile_into(out_dir), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "child done" in result.stdout and "child status 7" in result.stdout
    raw_files = glob.glob(os.path.join(out_dir, "profiler", "raw", "rank_0", "*.jsonl"))
    assert len(raw_files) == 1
    assert len(steps_in(out_dir)) == 6
    assert result.stderr.count("msprof-agent: profiled") == 1


@pytest.mark.torch
@pytest.mark.parametrize("code", [0, 3])
def test_a_job_leaving_through_os_exit_is_analysed_and_keeps_its_status(out_dir, code):
    """os._exit skips atexit: the patched one analyses first. The fork child (its sys.exit(7) ends in the
    torch fork guard's os._exit) analyses nothing and keeps its status."""
    result = run_script([TINY, "--steps", "6", "--fork-at", "3", "--os-exit", "--exit-code", str(code)], options=profile_into(out_dir), timeout=120)
    assert result.returncode == code, result.stderr
    assert "child status 7" in result.stdout and "trained 6 steps" in result.stdout
    assert steps_in(out_dir) == [1, 2, 3, 4, 5, 6]
    assert read_json(os.path.join(out_dir, "profiler", "summary_0.json"))["end_reason"] == "os._exit"
    assert os.path.exists(os.path.join(out_dir, "profiler", "report_0.html"))
    assert result.stderr.count("msprof-agent: profiled") == 1
    assert len(glob.glob(os.path.join(out_dir, "profiler", "raw", "rank_0", "*.jsonl"))) == 1


SLOW_ANALYSIS_THEN_OS_EXIT = """
import os, sys, time
from msprof_agent import online_analysis, options, session
current = session.start(options.from_mapping({"start": True, "output_path": sys.argv[1]}), origin="test", analyse=online_analysis.analyse)
session.OS_EXIT_ANALYSIS_S = 0.1
current.finalize = lambda reason: (time.sleep(3), print("analysis finished", flush=True))
os._exit(5)
"""


@pytest.mark.unit
def test_an_analysis_past_the_os_exit_bound_leaves_with_the_status_and_says_how_to_analyse(out_dir):
    """The analysis (made to take 3 s) is cut at the bound (0.1 s): one line names the raw data and the command."""
    result = run_script(["-c", SLOW_ANALYSIS_THEN_OS_EXIT, out_dir], timeout=60, hook=False)
    assert result.returncode == 5, result.stderr
    assert "analysis finished" not in result.stdout
    where = os.path.join(out_dir, "profiler")
    assert agent_lines(result.stderr) == [f"msprof-agent: os._exit: the analysis did not finish within 0.1 s; the raw data is in {where}; "
                                          f"analyse it with: msprof-agent analyse {where}"]


STEPS_BY_HAND = """
import sys, time
from msprof_agent import online_analysis, options, session
current = session.start(options.from_mapping({"start": True, "output_path": sys.argv[1]}), origin="test", analyse=online_analysis.analyse)
for _ in range(6):
    current.steps.open()
    time.sleep(0.05)
    current.steps.close()
print("trained 6 steps", flush=True)
"""
AGENT_DEPENDENCIES = "numpy==2.4.6 orjson==3.13.0 psutil==7.2.2 wrapt==2.5.2"  # this venv's, for Python 3.12


@pytest.mark.install
def test_the_exit_analysis_runs_where_an_atexit_handler_cannot_start_threads(out_dir):
    """From Python 3.12 an atexit handler cannot start a thread ("can't create new thread at interpreter
    shutdown"), and the exit analysis loads the store and writes the timeline on threads: there it does that
    work itself, in turn. A job of 6 steps of 50 ms under Python 3.12: every page is written, nothing failed."""
    candidates = [shutil.which("python3.12"), *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))]
    interpreter = next((c for c in candidates if c and subprocess.run([c, "-c", "pass"], capture_output=True).returncode == 0), None)
    if interpreter is None:
        pytest.skip("no Python 3.12 on this machine")
    python = client_python("python3.12-agent", AGENT_DEPENDENCIES, interpreter)
    env = {k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "PYTHONPATH")}
    result = subprocess.run([python, "-c", STEPS_BY_HAND, out_dir], env=dict(env, PYTHONPATH=ROOT), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "trained 6 steps" in result.stdout, result.stderr
    assert "failed" not in result.stderr and "msprof-agent: profiled 6 of 6 steps" in result.stderr, result.stderr
    profiler = os.path.join(out_dir, "profiler")
    summary = read_json(os.path.join(profiler, "summary_0.json"))
    assert summary["steps_total"] == 6 and 45 <= summary["step_time_ms"]["p50"] <= 80, summary["step_time_ms"]
    assert summary["timeline"] and os.path.getsize(os.path.join(profiler, summary["timeline"]["file"])) == summary["timeline"]["bytes"]
    assert os.path.exists(os.path.join(profiler, "step_trace_raw_0_detail_time.csv"))


@pytest.mark.torch
def test_two_ranks_share_one_output_path(two_tiny_ranks):
    out_dir = two_tiny_ranks
    written = [os.path.exists(os.path.join(out_dir, "profiler", f"step_trace_raw_{rank}_detail_time.csv")) for rank in (0, 1)]
    assert all(written), ranks_said(out_dir)
    assert len(steps_in(out_dir, 0)) == 4 and len(steps_in(out_dir, 1)) == 5
    for rank in (0, 1):
        assert read_json(os.path.join(out_dir, "profiler", f"profiler_info_{rank}.json"))["rank_id"] == rank
    cluster = read_json(os.path.join(out_dir, "profiler", "cluster_summary.json"))
    assert [r["rank_id"] for r in cluster["ranks"]] == [0, 1]


# -- msprof-agent run ------------------------------------------------------------------------------------

def agent_run(args, out_dir, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "PYTHONPATH")}
    env.update(env_extra or {})
    return subprocess.run([PY, "-m", "msprof_agent", "run", "--output-path", out_dir, "--", PY] + args,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.torch
@pytest.mark.parametrize("flags, status", [([], 0), (["--exit-code", "3"], 3), (["--sigterm-at", "3"], -signal.SIGTERM)])
def test_run_keeps_the_exit_status(flags, status, out_dir):
    result = agent_run([TINY, "--steps", "5"] + flags, out_dir)
    assert result.returncode == status, result.stderr
    assert os.path.isfile(os.path.join(out_dir, "profiler", "summary_0.json"))


@pytest.mark.unit
@pytest.mark.parametrize("flag, why", [("-S", "-S skips site"), ("-E", "-E ignores PYTHONPATH"), ("-I", "-I ignores PYTHONPATH")])
def test_run_warns_about_flags_that_disable_the_hook(flag, why, out_dir):
    """From a checkout the hook comes through PYTHONPATH, so -E and -I disable it too (not so for an installed .pth: test_install)."""
    result = agent_run([flag, PROBE], out_dir)
    assert why in result.stderr
    assert result.stdout.split()[0] == "no-agent"


@pytest.mark.unit
def test_debug_traceback_of_an_agent_error(tmp_path):
    code = "from msprof_agent import log\ntry:\n    1 / 0\nexcept ZeroDivisionError as exc:\n    log.report_error('probe', exc)\nprint('job goes on')"
    result = run_script(["-c", code], extra_env={"MSPROF_AGENT_DEBUG": "1"}, hook=False, cwd=str(tmp_path))
    assert result.stdout == "job goes on\n"
    assert "Traceback (most recent call last)" in result.stderr and "msprof-agent: probe failed, the job goes on: ZeroDivisionError" in result.stderr


@pytest.mark.unit
def test_run_deduplicates_pythonpath(out_dir):
    result = agent_run(["-c", "import os; print(os.environ['PYTHONPATH'])"], out_dir, {"PYTHONPATH": HOOK_DIR + os.pathsep + "/elsewhere"})
    assert result.stdout.strip().split(os.pathsep) == [HOOK_DIR, ROOT, "/elsewhere"]


@pytest.mark.torch
def test_run_passes_options_through(out_dir):
    env = {k: v for k, v in os.environ.items() if k != "MS_PROFILER_OPTIONS"}
    result = subprocess.run([PY, "-m", "msprof_agent", "run", "--output-path", out_dir, "-o", "start_step=2", "-o", "stop_step=3",
                             "--", PY, TINY, "--steps", "5"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert steps_in(out_dir) == [2, 3]


@pytest.mark.torch
def test_framework_import_under_the_hook_is_transparent(out_dir):
    """The post-import hook wraps torch's loader only while torch/__init__ runs: afterwards the module
    has its own loader back, resources resolve, and the integration is installed."""
    code = ("import importlib.resources, sys, torch; "
            "print(type(torch.__loader__).__name__, type(torch.__spec__.loader).__name__, "
            "importlib.resources.files('torch').joinpath('__init__.py').is_file(), "
            "sys.modules['msprof_agent.frameworks.torch.patch']._state is not None)")
    result = run_script(["-c", code], options=profile_into(out_dir))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["SourceFileLoader", "SourceFileLoader", "True", "True"]


@pytest.mark.torch
def test_a_rerun_into_the_same_output_path_keeps_the_earlier_run(two_tiny_ranks, tmp_path):
    """Two ranks of a second job into the folder a first two-rank job left: the first job's profiler/ is
    moved whole, once, to earlier/<analysed at>/profiler (both summaries and its cluster summary there, said on
    stderr), profiler/ holds the new job's alone, and compare reads the earlier run as a baseline."""
    out = str(tmp_path / "out")
    shutil.copytree(two_tiny_ranks, out)
    procs = [subprocess.Popen([PY, TINY, "--steps", str(6 + rank)], env=hook_env(profile_into(out), {"RANK_ID": str(rank), "RANK_SIZE": "2"}),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    said = []
    for proc in procs:
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        said += [line for line in agent_lines(stderr) if "earlier run" in line]
    (earlier,) = glob.glob(os.path.join(out, "earlier", "*"))
    assert said == [f"msprof-agent: the earlier run in {out}/profiler is kept in {earlier}/profiler"], said
    for rank, (before, now) in enumerate([(4, 6), (5, 7)]):
        assert read_json(os.path.join(earlier, "profiler", f"summary_{rank}.json"))["steps_total"] == before
        assert read_json(os.path.join(out, "profiler", f"summary_{rank}.json"))["steps_total"] == now
        assert len(glob.glob(os.path.join(out, "profiler", "raw", f"rank_{rank}", "*.jsonl"))) == 1
    assert os.path.exists(os.path.join(earlier, "profiler", "cluster_summary.json"))
    compared = subprocess.run([PY, "-m", "msprof_agent", "compare", earlier, out], capture_output=True, text=True, timeout=120)
    assert compared.returncode == 0 and "step" in compared.stdout, compared.stderr
