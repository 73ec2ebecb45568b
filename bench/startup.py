"""Interpreter start-up cost of the agent's two doors, measured side by side in one run.

Prints the median wall and CPU time of ``python -c pass`` with no hook, with the hook on PYTHONPATH and the
variable unset, with ``"start": false``, and with ``"start": true``; and, for the installed package's
.pth, in a fresh venv with the wheel installed and the variable unset against the same kind of venv
without it. Runs are interleaved, in a shuffled order each round, so that load on the shared machine hits every variant alike; then the
ratios (target for both doors with the variable unset: <= 1.01).

The hook's bytecode is written first, as ``scripts/setup_env.sh`` and ``msprof-agent run`` do (and
any first start without PYTHONDONTWRITEBYTECODE): the wheel's copy is compiled by pip at install. A
copy of the hook without bytecode, under PYTHONDONTWRITEBYTECODE, shows what compiling it at every
start would cost. Two stand-ins for the hook give the PYTHONPATH door's floor: an empty ``sitecustomize.py``
on PYTHONPATH (what any module there costs), and one that only looks for the user's own sitecustomize
along the rest of ``sys.path`` (what a hook that keeps the user's must do before anything else).
"""
import argparse
import glob
import json
import os
import py_compile
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = os.path.join(ROOT, "sitecustomize_hook")


def make_venvs(work):
    """Two venvs of this interpreter, one with the wheel built from this checkout installed: their pythons."""
    wheels = os.path.join(work, "wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, ROOT], check=True)
    pythons = {}
    for name in ("bare", "installed"):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", os.path.join(work, name)], check=True)
        pythons[name] = os.path.join(work, name, "bin", "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", pythons["installed"], "install", "-q", "--no-deps", "--no-index",
                    glob.glob(os.path.join(wheels, "*.whl"))[0]], check=True)
    return pythons


def pth_cost(python, env):
    """timeit's line for what site spends on the installed .pth with the variable unset: a ratio of
    whole starts cannot resolve 50 µs on a shared machine, this can."""
    setup = "import site, sysconfig; purelib = sysconfig.get_paths()['purelib']"
    return subprocess.run([python, "-m", "timeit", "-s", setup, "site.addpackage(purelib, 'zz_msprof_agent.pth', set())"],
                          env=env, check=True, capture_output=True, text=True).stdout.strip()


def uncompiled_hook(work):
    """A copy of the hook folder without bytecode."""
    folder = os.path.join(work, "hook_without_bytecode")
    os.makedirs(folder)
    shutil.copyfile(os.path.join(HOOK, "sitecustomize.py"), os.path.join(folder, "sitecustomize.py"))
    return folder


FINDS_THE_USERS = """import os, sys
here = os.path.dirname(os.path.abspath(__file__))
finder = next(f for f in sys.meta_path if getattr(f, "__name__", None) == "PathFinder")
finder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != here])
"""


def stand_ins(work):
    """The floor's two stand-ins for the hook's folder (module docstring), their bytecode written: (empty, finding the user's)."""
    folders = []
    for name, text in (("empty_sitecustomize", ""), ("sitecustomize_finding_the_users", FINDS_THE_USERS)):
        folder = os.path.join(work, name)
        os.makedirs(folder)
        with open(os.path.join(folder, "sitecustomize.py"), "w") as handle:
            handle.write(text)
        py_compile.compile(os.path.join(folder, "sitecustomize.py"), doraise=True)
        folders.append(folder)
    return folders


def variants(out_dir, pythons, uncompiled, empty, finding):
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MS_PROFILER_OPTIONS", "MSPROF_DYNAMIC_CFG")}
    hooked = dict(base, PYTHONPATH=HOOK)
    here = sys.executable
    return {
        "no hook": (here, base),
        "hook, variable unset": (here, hooked),
        "hook without bytecode, unset": (here, dict(base, PYTHONPATH=uncompiled, PYTHONDONTWRITEBYTECODE="1")),
        "hook, start false": (here, dict(hooked, MS_PROFILER_OPTIONS=json.dumps({"start": False}))),
        "hook, start true": (here, dict(hooked, MS_PROFILER_OPTIONS=json.dumps({"start": True, "output_path": out_dir}))),
        "empty sitecustomize on PYTHONPATH": (here, dict(base, PYTHONPATH=empty)),
        "sitecustomize finding the user's": (here, dict(base, PYTHONPATH=finding)),
        "venv without package": (pythons["bare"], base),
        "venv, .pth, unset": (pythons["installed"], base),
        "venv, .pth, start false": (pythons["installed"], dict(base, MS_PROFILER_OPTIONS=json.dumps({"start": False}))),
    }


def time_once(python, env):
    """(wall, CPU) seconds of one start: CPU time (user + system, from wait4) is what the start itself
    costs; on a shared machine the wall time mostly measures the neighbours."""
    began = time.perf_counter()
    proc = subprocess.Popen([python, "-c", "pass"], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{python} -c pass exited with {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    py_compile.compile(os.path.join(HOOK, "sitecustomize.py"), doraise=True)  # its __pycache__, as a first start writes it
    with tempfile.TemporaryDirectory() as work:
        pythons = make_venvs(work)
        cases = variants(os.path.join(work, "out"), pythons, uncompiled_hook(work), *stand_ins(work))
        samples = {name: [] for name in cases}
        for case in cases.values():  # warm the page cache once
            time_once(*case)
        order = list(cases)
        shuffle = random.Random(0).shuffle
        for _ in range(args.rounds):
            shuffle(order)  # no variant always runs right after the same other one
            for name in order:
                samples[name].append(time_once(*cases[name]))
        pth_line = pth_cost(*cases["venv, .pth, unset"])
    medians = {name: [statistics.median(v[i] for v in values) for i in (0, 1)] for name, values in samples.items()}
    print(f"python -c pass, {args.rounds} interleaved rounds, medians (ms):        wall      CPU")
    for name, (wall, cpu) in medians.items():
        print(f"  {name:44s} {wall * 1000:8.2f} {cpu * 1000:8.2f}")
    ratios = [("hook+unset / no hook", "hook, variable unset", "no hook", "  (target <= 1.01)"),
              ("hook without bytecode+unset / no hook", "hook without bytecode, unset", "no hook", ""),
              ("hook+start false / no hook", "hook, start false", "no hook", ""),
              ("hook+start true / hook+unset", "hook, start true", "hook, variable unset", ""),
              ("empty sitecustomize / no hook", "empty sitecustomize on PYTHONPATH", "no hook", "  (the door's floor: any module there)"),
              ("sitecustomize finding the user's / no hook", "sitecustomize finding the user's", "no hook", "  (and keeping the user's)"),
              (".pth+unset / venv without package", "venv, .pth, unset", "venv without package", "  (target <= 1.01)"),
              (".pth+start false / venv without package", "venv, .pth, start false", "venv without package", "")]
    print("ratios:                                          wall      CPU")
    for label, top, bottom, target in ratios:
        print(f"  {label:44s} {medians[top][0] / medians[bottom][0]:8.3f} {medians[top][1] / medians[bottom][1]:8.3f}{target}")
    print(f"site's processing of zz_msprof_agent.pth, variable unset: {pth_line}")

if __name__ == "__main__":
    main()
