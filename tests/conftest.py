"""Shared helpers: run a real Python script in a subprocess under the hook, and read what it wrote.

Every test carries a marker saying what it needs (registered in pyproject.toml): ``unit`` (the fast set:
neither MindSpore nor PyTorch is imported, in the test or in a child it starts), ``mindspore``, ``torch``,
``browser``, ``install`` (fresh virtual environments) or ``client`` (an outside reader of the output).
This file imports neither framework, so ``pytest -m unit`` runs where none is installed.
"""
import concurrent.futures
import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK_DIR = os.path.join(ROOT, "sitecustomize_hook")
EXAMPLES = os.path.join(ROOT, "examples")
SCRIPTS = os.path.join(ROOT, "tests", "scripts")
TINY = os.path.join(SCRIPTS, "tiny_torch.py")
PY = sys.executable

CLIENTS = os.path.join(os.path.expanduser("~"), ".cache", "msprof-agent-test-clients")  # outside readers' venvs, kept between runs
INSTALLS_AHEAD = {}  # venv name: the Future of its install, started when collection ends (pytest_collection_finish)

NEEDS = ("unit", "mindspore", "torch", "browser", "install", "client")
# Variables that steer the agent or the ranks: a child gets only those its test sets.
AGENT_VARIABLES = ("MS_PROFILER_OPTIONS", "PYTHONPATH", "RANK_ID", "RANK", "DEVICE_ID", "LOCAL_RANK", "WORLD_SIZE", "RANK_SIZE",
                   "PROFILING_FP_START", "PROFILING_BP_END", "MSPROF_DYNAMIC_CFG")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Refuse a test that says nothing about what it needs, or that is ``unit`` and needs more (before ``-m`` selects)."""
    unmarked = [item.nodeid for item in items if not any(item.get_closest_marker(name) for name in NEEDS)]
    mixed = [item.nodeid for item in items
             if item.get_closest_marker("unit") and any(item.get_closest_marker(name) for name in NEEDS[1:])]
    problems = [f"no marker of {', '.join(NEEDS)}: {nodeid}" for nodeid in unmarked]
    problems += [f"marked unit and also with what the fast set must not need: {nodeid}" for nodeid in mixed]
    if problems:
        raise pytest.UsageError("tests/conftest.py: every test says what it needs\n  " + "\n  ".join(problems))


def hook_env(options=None, extra=None, hook=True):
    """A child environment with the hook on PYTHONPATH and MS_PROFILER_OPTIONS set (dict -> JSON, str as is)."""
    env = {k: v for k, v in os.environ.items() if k not in AGENT_VARIABLES}
    if hook:
        env["PYTHONPATH"] = HOOK_DIR
    if options is not None:
        env["MS_PROFILER_OPTIONS"] = options if isinstance(options, str) else json.dumps(options)
    env.setdefault("GLOG_v", "3")  # MindSpore: errors only, keep test logs readable
    env.update(extra or {})
    return env


def run_script(args, options=None, extra_env=None, cwd=None, timeout=600, hook=True):
    """Run ``python ARGS`` (a list) and return the CompletedProcess with text output."""
    return subprocess.run([PY] + list(args), env=hook_env(options, extra_env, hook), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def two_tiny_ranks(tmp_path_factory):
    """One run of tiny_torch.py as ranks 0 and 1 (4 and 5 steps) at once, both profiling into the folder
    returned; the tests that read it share it (copy it before writing into it)."""
    base = tmp_path_factory.mktemp("two_tiny_ranks")
    out_dir = str(base / "out")
    procs = [subprocess.Popen([PY, TINY, "--steps", str(4 + rank)], env=hook_env(profile_into(out_dir), {"RANK_ID": str(rank), "RANK_SIZE": "2"}),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    for rank, proc in enumerate(procs):
        _, stderr = proc.communicate(timeout=300)
        (base / f"rank_{rank}.stderr").write_text(stderr)  # what a test finding a rank's files missing shows (``ranks_said``)
        assert proc.returncode == 0, stderr
    return out_dir


def ranks_said(out_dir):
    """What each rank of ``two_tiny_ranks`` said on stderr, and the files of its folder: a failing test's message."""
    base = os.path.dirname(out_dir)
    said = "\n".join(f"rank {r}:\n" + open(os.path.join(base, f"rank_{r}.stderr")).read() for r in (0, 1))
    files = sorted(os.path.relpath(os.path.join(d, f), base) for d, _, names in os.walk(base) for f in names)
    return f"{said}\nfiles: {files}"


def _profiled_example(tmp_path_factory, example, args):
    """examples/EXAMPLE run once under the hook with the plain options; the folder it profiled into."""
    base = tmp_path_factory.mktemp(os.path.splitext(example)[0])
    out = str(base / "prof")
    proc = run_script([os.path.join(EXAMPLES, example), *args], profile_into(out), cwd=str(base))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def lenet_job(tmp_path_factory):
    """The bundled MindSpore LeNet, 12 steps, profiled with the plain options; shared by the tests that read
    it (copy it before writing into it)."""
    return _profiled_example(tmp_path_factory, "mindspore_lenet.py", ["--quiet", "--steps", "12"])


@pytest.fixture(scope="session")
def cnn_job(tmp_path_factory):
    """The bundled torch CNN as it comes (10 steps), profiled with the plain options; shared as lenet_job."""
    return _profiled_example(tmp_path_factory, "torch_cnn.py", [])


@pytest.fixture(scope="session")
def slowed_rank_cnn_job(tmp_path_factory):
    """One torchrun/gloo job of examples/torch_cnn.py on 2 ranks, 6 steps, rank 1 sleeping 200 ms a step
    before its all_reduce (rank 0 waits for it inside the collective); the folder it profiled into, shared
    by the tests that read it (copy it before writing into it)."""
    out = str(tmp_path_factory.mktemp("slowed_rank_cnn") / "prof")
    proc = subprocess.run([PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", os.path.join(EXAMPLES, "torch_cnn.py"),
                           "--steps", "6", "--sleep-rank", "1", "--sleep-ms", "200"],
                          env=hook_env(profile_into(out)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def injected_line(function):
    """The line of FUNCTION's sleep in tests/scripts/injected_causes.py (the line a stack sample finds it at)."""
    with open(os.path.join(SCRIPTS, "injected_causes.py")) as handle:
        lines = handle.read().splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"def {function}(")))
    return next(i for i in range(start, len(lines)) if "time.sleep" in lines[i]) + 1


def free_port():
    """A TCP port nothing listens on now (a launcher's or a server's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def profile_into(out_dir, **extra):
    """MS_PROFILER_OPTIONS that profile into ``out_dir``, plus ``extra`` keys."""
    return dict({"start": True, "output_path": out_dir}, **extra)


def agent_lines(stderr):
    """The agent's messages on stderr (continuation lines, indented after the prefix, left out)."""
    return [line for line in stderr.splitlines() if line.startswith("msprof-agent:") and not line.startswith("msprof-agent:  ")]


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def same_mean(tenths, thousandths):
    """A finding's ms (to 0.1) and the summary's mean of the same number (to 0.001) agree: they may differ by the two
    roundings (74.1 of a mean of 74.1499 ms, which the summary writes 74.15 and rounds again to 74.2)."""
    return abs(tenths - thousandths) <= 0.05 + 0.0005 + 1e-9


def one_verdict(summaries, clean=False):
    """Runs of one job give one verdict and top finding. A CLEAN job's findings sit near their triggers, where noise
    decides: there runs may differ where one side says it is unsure (``verdict_basis`` confidence close or near its
    trigger; balanced, no finding, is sure), as long as most agree."""
    picks = [(s["verdict"], s["findings"][0]["id"] if s["findings"] else None) for s in summaries]
    common = max(picks, key=picks.count)
    if not clean:
        assert picks == [common] * len(picks), picks
    sure = [(s["verdict_basis"] or {}).get("confidence", "clear") == "clear" for s in summaries]
    odd, usual = [ok for ok, pick in zip(sure, picks) if pick != common], [ok for ok, pick in zip(sure, picks) if pick == common]
    assert len(usual) > len(picks) / 2 and (not any(odd) or not any(usual)), (picks, sure)


def read_records(profiler_dir, rank):
    """Every record of one rank's raw store; a torn last line (killed mid-write) is skipped."""
    import orjson

    from msprof_agent.store import raw_lines

    records = []
    for line in raw_lines(profiler_dir, rank):
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return records


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


def step_trace(profiler_dir, rank=0):
    """One rank's step-trace CSV as (header, step rows, average rows), all cells as text."""
    rows = read_csv(os.path.join(profiler_dir, f"step_trace_raw_{rank}_detail_time.csv"))
    return rows[0], [r for r in rows[1:] if r[0] != "-"], [r for r in rows[1:] if r[0] == "-"]


def step_numbers(profiler_dir, rank=0):
    """The steps one rank's step-trace CSV lists."""
    return [int(row[0]) for row in step_trace(profiler_dir, rank)[1]]


def steps_in(output_path, rank=0):
    """The steps analysed in the run or window whose output path (the folder above ``profiler/``) is given."""
    return step_numbers(os.path.join(output_path, "profiler"), rank)


def windows_made(out):
    """The window folders under an output path, by start step."""
    return sorted((name for name in os.listdir(out) if name.startswith("window_")), key=lambda name: int(name.split("_")[1]))


@pytest.fixture
def out_dir(tmp_path):
    return str(tmp_path / "prof")


def overlapping_slices(events):
    """The complete (``X``) slices that overlap another on their (pid, tid) track without nesting in it,
    read as a viewer does: ``ts`` and ``dur`` parsed as doubles (us), then taken to the nearest ns."""
    tracks = {}
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "X":
            start = round(event["ts"] * 1000)
            tracks.setdefault((event.get("pid"), event.get("tid")), []).append((start, start + round(event["dur"] * 1000), event.get("name")))
    bad = []
    for track, slices in tracks.items():
        open_ends = []  # the ends of the slices enclosing the current one, innermost last
        for start, end, name in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1][0] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1][0]:
                bad.append((track, name, start, end, open_ends[-1]))
            open_ends.append((end, name))
    return bad


def pytest_collection_finish(session):
    """Start making the outside venvs the selected tests' modules name (``VENVS``: (name, requirements, kind)
    with kind ``client`` or ``stack``), one after another in a background thread, while the first tests run:
    an install waits on the package index far more than it computes. ``client_python`` and ``stack_python``
    then wait for their venv. A daemon thread: a run that stops early does not wait for an install, and a
    half-made venv has no ``.installed`` mark, so the next run makes it again."""
    wanted = {}
    for item in session.items:
        if item.get_closest_marker("unit"):  # the fast set needs no outside venv
            continue
        for name, requirements, kind in getattr(getattr(item, "module", None), "VENVS", ()):
            wanted.setdefault(name, (_client_venv if kind == "client" else _stack_venv, requirements))
    jobs = []
    for name, (make, requirements) in wanted.items():
        INSTALLS_AHEAD[name] = future = concurrent.futures.Future()
        jobs.append((future, make, name, requirements))

    def install_all():
        for future, make, name, requirements in jobs:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(make(name, requirements))
                except BaseException as exc:  # pytest's skip is a BaseException: it reaches the test that waits
                    future.set_exception(exc)
    if jobs:
        threading.Thread(target=install_all, name="venv-installs", daemon=True).start()


def client_python(name, requirement, interpreter=None):
    """The python of the venv ``CLIENTS/NAME`` with REQUIREMENT (one or more, space-separated) installed from the
    package index (on first use; the readers pin their own libraries), made by INTERPRETER (default: this one),
    or a skip saying why it could not be installed."""
    ahead = INSTALLS_AHEAD.get(name)
    return ahead.result() if ahead else _client_venv(name, requirement, interpreter)


def _client_venv(name, requirement, interpreter=None):
    venv = os.path.join(CLIENTS, name)
    python = os.path.join(venv, "bin", "python")
    installed = os.path.join(venv, ".installed")
    if not os.path.exists(installed):
        shutil.rmtree(venv, ignore_errors=True)
        steps = ([interpreter or sys.executable, "-m", "venv", venv], [python, "-m", "pip", "install", "-q", *requirement.split()])
        for step in steps:
            try:
                proc = subprocess.run(step, capture_output=True, text=True, timeout=900)
            except subprocess.TimeoutExpired:
                pytest.skip(f"CLIENT NOT INSTALLED: installing {requirement} took over 15 minutes (no package index?)")
            if proc.returncode:
                pytest.skip(f"CLIENT NOT INSTALLED: {requirement} could not be installed ({' '.join(step[-2:])}): "
                            f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
        open(installed, "w").close()
    return python


def stack_python(name, requirements):
    """The python of the venv ``CLIENTS/NAME`` for a third-party training stack (accelerate, ...): REQUIREMENTS
    (pinned) installed once from the package index over this interpreter's own packages, which a .pth line
    names, so the stack trains with the tests' torch build and imports the agent from this checkout; torch is
    pinned to that build (a constraints file), never downloaded again. A skip says why it could not be made."""
    ahead = INSTALLS_AHEAD.get(name)
    return ahead.result() if ahead else _stack_venv(name, requirements)


def _stack_venv(name, requirements):
    import torch

    venv = os.path.join(CLIENTS, name)
    python = os.path.join(venv, "bin", "python")
    installed = os.path.join(venv, ".installed")
    if not os.path.exists(installed):
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True, timeout=300)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                          check=True).stdout.strip()
    ours = [ROOT] + [path for path in sys.path if path.endswith("site-packages") and os.path.isdir(path)]
    with open(os.path.join(site, "zz_msprof_agent_tests.pth"), "w") as handle:  # every time: this checkout, this interpreter
        handle.write("\n".join(ours) + "\n")
    if os.path.exists(installed):
        return python
    constraints = os.path.join(venv, "constraints.txt")
    with open(constraints, "w") as handle:
        handle.write(f"torch=={torch.__version__.split('+')[0]}\n")
    try:
        proc = subprocess.run([python, "-m", "pip", "install", "-q", "-c", constraints] + list(requirements),
                              capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        pytest.skip(f"STACK NOT INSTALLED: installing {requirements} took over 15 minutes (no package index?)")
    if proc.returncode:
        pytest.skip(f"STACK NOT INSTALLED: {requirements} could not be installed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    open(installed, "w").close()
    return python
