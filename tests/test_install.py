"""The package as a user installs it: a wheel built once, installed (not editable) into a fresh venv with
no PYTHONPATH, where exporting MS_PROFILER_OPTIONS is all it takes. The frameworks come from this
interpreter's site-packages through a plain path entry (a second multi-gigabyte install buys nothing)."""
import glob
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request

import pytest

from conftest import EXAMPLES, HOOK_DIR, ROOT, hook_env, read_csv

pytestmark = pytest.mark.install

SCRIPTS = os.path.join(ROOT, "tests", "scripts")
TINY = os.path.join(SCRIPTS, "tiny_torch.py")
PROBE = os.path.join(SCRIPTS, "probe_imports.py")
DOOR = "import sys; print(getattr(sys, '_msprof_agent_door', None), 'msprof_agent.session' in sys.modules)"


def readme_install_commands():
    """The pip commands of the README's Install section, split as a shell would, keyed by what they do."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        section = handle.read().split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    lines = [shlex.split(line, comments=True) for line in section.splitlines() if line.startswith("pip ")]
    [checkout] = [words for words in lines if words[1:] and words[-1].startswith(".[")]
    [build] = [words for words in lines if words[1] == "wheel"]
    [wheel] = [words for words in lines if ".whl" in words[-1]]
    return {"checkout": checkout, "build": build, "wheel": wheel}


def git_status():
    return subprocess.run(["git", "status", "--ignored", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def fresh_venv(directory):
    """(its python, its purelib) of a fresh venv seeing the frameworks and dependencies of this interpreter."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True, timeout=120)
    python = str(directory / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # Frameworks and dependencies from here; "frameworks.pth" runs before the agent's zz_msprof_agent.pth.
    specs = [importlib.util.find_spec(m) for m in ("torch", "mindspore", "wrapt", "orjson", "psutil", "numpy", "plotly", "jinja2")]
    deps = sorted({os.path.dirname(os.path.dirname(spec.origin)) for spec in specs if spec is not None})
    with open(os.path.join(site, "frameworks.pth"), "w") as handle:
        handle.write("\n".join(deps) + "\n")
    return python, site


def pip(words, python=None, cwd=ROOT):
    """A README pip command, run by this interpreter's pip (into PYTHON's venv); offline here: no index, no
    build isolation, the dependencies already seen through frameworks.pth."""
    target = ["--python", python] if python else []
    offline = ["--no-build-isolation"] + (["--no-deps", "--no-index"] if words[1] == "install" else [])
    subprocess.run([sys.executable, "-m", "pip"] + target + words[1:] + ["-q"] + offline, cwd=cwd, check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """(python, msprof-agent script, bin dir, site, the work tree's status before and after the build) of a fresh
    venv holding the wheel built from this checkout by the README's commands."""
    root = tmp_path_factory.mktemp("install")
    commands, wheels = readme_install_commands(), str(root / "wheels")
    written = os.path.dirname(commands["wheel"][-1])  # the README's wheel folder, here a temporary one
    before = git_status()
    pip([wheels if word == written else word for word in commands["build"]])
    after = git_status()
    env_dir = root / "venv"
    python, site = fresh_venv(env_dir)
    pip([word.replace(written, wheels) for word in commands["wheel"]], python)
    return {"python": python, "agent": str(env_dir / "bin" / "msprof-agent"), "bin": str(env_dir / "bin"), "site": site,
            "status": (before, after), "wheel": glob.glob(os.path.join(wheels, "*.whl"))[0]}


def test_the_wheel_is_built_by_the_readme_and_leaves_the_work_tree_as_it_was(venv):
    before, after = venv["status"]
    assert after == before


@pytest.mark.torch
@pytest.mark.parametrize("module, broken", [("session.py", None),  # a half-upgraded install: a module gone
                                            ("analysis/summary.py", "def broken(:\n")])  # one that fails only at the exit analysis
def test_a_broken_install_leaves_the_job_unharmed_with_one_line(venv, tmp_path, out_dir, module, broken):
    python, site = fresh_venv(tmp_path / "venv")
    pip(["pip", "install", venv["wheel"]], python)
    path = os.path.join(site, "msprof_agent", module)
    if broken is None:
        os.remove(path)
    else:
        with open(path, "w") as handle:
            handle.write(broken)
    result = subprocess.run([python, TINY, "--steps", "4", "--exit-code", "3", "--os-exit"], env=venv_env(venv, on(out_dir)),
                            cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert result.returncode == 3 and "trained 4 steps" in result.stdout, result.stderr
    [line] = agent_lines(result.stderr)
    assert ("session" if broken is None else "SyntaxError") in line, line


def test_install_from_the_checkout_by_the_readme(tmp_path):
    python, site = fresh_venv(tmp_path / "venv")
    before = git_status()
    pip(readme_install_commands()["checkout"], python)
    assert git_status() == before
    result = subprocess.run([python, "-c", "import msprof_agent; print(msprof_agent.__file__)"], cwd=str(tmp_path), capture_output=True, text=True)
    assert result.stdout.startswith(site) and os.path.isfile(os.path.join(site, "zz_msprof_agent.pth")), result.stderr


def venv_env(venv, options=None, extra=None):
    """No PYTHONPATH, only the variable (when given); the venv's bin first, so ``python`` in a command is its own."""
    env = hook_env(options, extra, hook=False)
    env["PATH"] = venv["bin"] + os.pathsep + env.get("PATH", "")
    return env


def run(venv, args, options=None, extra=None, cwd=None, timeout=300):
    """Run from the venv's folder by default: from the checkout, ``-c`` would import the package beside it."""
    return subprocess.run(args, env=venv_env(venv, options, extra), cwd=cwd or os.path.dirname(venv["bin"]),
                          capture_output=True, text=True, timeout=timeout)


def on(out_dir):
    return {"start": True, "output_path": out_dir}


def agent_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("msprof-agent:")]


def test_the_wheel_is_what_runs(venv):
    code = "import msprof_agent, msprof_agent.doors as d; print(msprof_agent.__file__); print(d.installed_pth()); print(d.hook_dir())"
    result = run(venv, [venv["python"], "-c", code])
    package, pth, hook = result.stdout.split()
    assert package.startswith(venv["site"]) and pth == os.path.join(venv["site"], "zz_msprof_agent.pth") and hook == "None"
    with open(pth) as handle:
        assert len(handle.read().splitlines()) == 1
    imported = "import sys; print('_msprof_agent_pth' in sys.modules)"
    assert run(venv, [venv["python"], "-c", imported]).stdout == "False\n"  # unset: the .pth imports nothing
    assert run(venv, [venv["python"], "-c", imported], {"start": False}).stdout == "True\n"


@pytest.mark.parametrize("options", [None, '{"start": false}'])
def test_off_prints_nothing_and_loads_nothing(venv, options, tmp_path):
    result = run(venv, [venv["python"], PROBE], options, cwd=str(tmp_path))
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.split() == ["no-agent", "no-wrapt", "no-json", "threads=1"]
    assert os.listdir(tmp_path) == []


@pytest.mark.torch
def test_unmodified_torch_script_with_only_the_variable(venv, out_dir):
    result = run(venv, [venv["python"], TINY, "--steps", "4"], on(out_dir))
    assert result.returncode == 0, result.stderr
    assert "trained 4 steps" in result.stdout
    rows = read_csv(os.path.join(out_dir, "profiler", "step_trace_raw_0_detail_time.csv"))
    assert [r[0] for r in rows[1:] if r[0] != "-"] == ["1", "2", "3", "4"]
    assert os.path.isfile(os.path.join(out_dir, "profiler", "summary_0.json"))


@pytest.mark.mindspore
def test_unmodified_mindspore_script_with_only_the_variable(venv, out_dir):
    result = run(venv, [venv["python"], os.path.join(EXAMPLES, "mindspore_lenet.py"), "--steps", "3", "--quiet"], on(out_dir))
    assert result.returncode == 0, result.stderr
    rows = read_csv(os.path.join(out_dir, "profiler", "step_trace_raw_0_detail_time.csv"))
    assert [r[0] for r in rows[1:] if r[0] != "-"] == ["1", "2", "3"]
    assert glob.glob(os.path.join(out_dir, "profiler", "cpu_op_type_info_0.csv"))


@pytest.mark.parametrize("flag, door", [("-I", ".pth True"), ("-E", ".pth True"), ("-S", "None False")])
def test_interpreter_flags(venv, flag, door, out_dir):
    """-I and -E keep site-packages, and so the .pth; -S skips it."""
    result = run(venv, [venv["python"], flag, "-c", DOOR], on(out_dir))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == door


def test_user_sitecustomize_runs_once_with_both_doors(venv, tmp_path, out_dir):
    """The .pth starts the agent; the hook, also on PYTHONPATH, only chains the user's sitecustomize."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("print('user sitecustomize')\n")
    for path in (str(user), HOOK_DIR + os.pathsep + str(user)):
        result = run(venv, [venv["python"], "-c", DOOR + "; import msprof_agent.bootstrap as b; print(b._activated)"], on(out_dir), {"PYTHONPATH": path})
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["user sitecustomize", ".pth True", "True"]


@pytest.mark.torch
@pytest.mark.parametrize("code, status", [(None, 0), ("import sys; sys.exit(3)", 3),
                                          ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", -signal.SIGTERM)])
def test_run_keeps_the_exit_status_and_says_where_the_profile_is(venv, code, status, out_dir):
    command = ["python", TINY, "--steps", "3"] if code is None else ["python", "-c", code]
    result = run(venv, [venv["agent"], "run", "--output-path", out_dir, "--"] + command)
    assert result.returncode == status, result.stderr
    if code is None:
        assert agent_lines(result.stderr)[-1] == f"msprof-agent: profile written: {out_dir}/profiler (summary_0.json)"
    else:
        assert "the agent started, but the job ran no MindSpore or PyTorch training step" in agent_lines(result.stderr)[-1]


@pytest.mark.parametrize("require", [[], ["--require-profile"]])
def test_run_with_a_bad_option(venv, require, out_dir):
    """Refused before the job starts, exit 2: the line names the door (-o, not the variable) and the key meant."""
    job = "import sys; print('launched'); print('job done', file=sys.stderr)"
    result = run(venv, [venv["agent"], "run", "--output-path", out_dir, "-o", "profile_memroy=true"] + require + ["--", "python", "-c", job])
    assert result.returncode == 2 and result.stdout == "" and "job done" not in result.stderr
    cause = '-o profile_memroy=true: unknown key "profile_memroy" (did you mean "profile_memory"?)'
    (line,) = agent_lines(result.stderr)
    assert line.startswith("msprof-agent: " + cause) and line.endswith("The job is not started.")


@pytest.mark.parametrize("require, status", [([], 0), (["--require-profile"], 2)])
def test_run_of_a_command_that_disables_the_agent(venv, require, status, out_dir):
    result = run(venv, [venv["agent"], "run", "--output-path", out_dir] + require + ["--", "bash", "-c", "python -S -c pass"])
    assert result.returncode == status
    assert agent_lines(result.stderr) == [f"msprof-agent: no profile written to {out_dir}/profiler: the agent did not start in the job "
                                          "(a Python started with -S, a wrapper that drops the environment, or an interpreter without msprof-agent installed)"]


def test_run_warns_only_about_dash_S(venv, out_dir):
    result = run(venv, [venv["agent"], "run", "--output-path", out_dir, "--", "python", "-I", "-c", DOOR])
    assert result.stdout.strip() == ".pth True" and "-I" not in result.stderr
    result = run(venv, [venv["agent"], "run", "--output-path", out_dir, "--", "python", "-S", "-c", DOOR])
    assert result.stdout.strip() == "None False" and "python -S: -S skips site" in result.stderr


def test_viewer_serves_its_static_files(venv, tmp_path):
    proc = subprocess.Popen([venv["agent"], "view", "--summary-base-dir", str(tmp_path), "--port", "0"], env=venv_env(venv),
                            cwd=str(tmp_path), stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        url = re.search(r"at (http://\S+/)", line).group(1)
        for name in ("viewer.js", "viewer.css", "plotly.min.js"):
            with urllib.request.urlopen(url + "static/" + name, timeout=30) as response:
                assert response.status == 200 and len(response.read()) > 1000
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def doctor(venv, options, cwd=None):
    return run(venv, [venv["agent"], "doctor"], options, cwd=cwd)


def doctor_fields(stdout):
    return dict(line.split(":", 1) for line in stdout.splitlines() if ":" in line and not line.startswith(" "))


def test_doctor_without_the_variable(venv, tmp_path):
    result = doctor(venv, None, cwd=str(tmp_path))
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "verdict: NOT profiled: MS_PROFILER_OPTIONS is not set (export it, or use msprof-agent run)"
    assert os.listdir(tmp_path) == []


def test_doctor_with_a_valid_variable(venv, out_dir):
    from importlib.metadata import version

    result = doctor(venv, {"start": True, "output_path": out_dir, "l2_cache": True})
    assert result.returncode == 0, result.stdout
    fields = doctor_fields(result.stdout)
    assert fields["doors"].strip().startswith(".pth in site-packages: " + os.path.join(venv["site"], "zz_msprof_agent.pth"))
    assert fields["frameworks"].strip() == f"mindspore {version('mindspore')}, torch {version('torch')}"
    assert fields["rank"].strip() == "0 of 1, device 0"
    in_effect = json.loads(fields["options in effect"])
    assert in_effect["start"] is True and in_effect["export_type"] == [] and "start_profile" not in in_effect
    assert fields["not applicable"].strip() == "l2_cache needs an Ascend device; not applicable on CPU"
    assert fields["output"].strip() == f"{out_dir}/profiler (writable)"
    assert result.stdout.splitlines()[-1] == "verdict: a Python started here would be profiled (through the .pth)"
    assert not os.path.exists(out_dir)  # doctor creates nothing


def test_doctor_with_a_bad_variable(venv):
    result = doctor(venv, {"start": True, "op_time": 1})
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == ('verdict: NOT profiled: MS_PROFILER_OPTIONS: key "op_time": got 1 (int); '
                                              "accepted: true or false (JSON booleans, not strings)")


def test_doctor_with_an_unwritable_output_path(venv, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = doctor(venv, on(str(blocker / "sub")))
    assert result.returncode == 1
    assert doctor_fields(result.stdout)["output"].strip() == f"{blocker}/sub/profiler (NOT writable by this user)"
    assert result.stdout.splitlines()[-1] == f"verdict: NOT profiled: MS_PROFILER_OPTIONS: key \"output_path\": cannot write to '{blocker}/sub'"
