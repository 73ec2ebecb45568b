"""``msprof-agent`` command line: run, analyse, view, compare.

Each subcommand parses its own arguments here and hands off to the module that owns the work,
so this file stays a table of contents.
"""
import argparse
import os
import shutil
import sys

from . import log


def hook_dir():
    """The folder holding only sitecustomize.py, shipped beside the package in a source checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidate = os.path.join(os.path.dirname(here), "sitecustomize_hook")
    if os.path.isfile(os.path.join(candidate, "sitecustomize.py")):
        return candidate
    raise SystemExit("msprof-agent: cannot find the sitecustomize_hook folder next to the package; install from a checkout (pip install -e .)")


def _prepend_path(value, entry):
    """Put entry first in an os.pathsep list, removing any other copy (compared normalised)."""
    parts = [p for p in (value or "").split(os.pathsep) if p and os.path.normpath(p) != os.path.normpath(entry)]
    return os.pathsep.join([entry] + parts)


_HOOK_DISABLING_FLAGS = {"-S": "skips site (and so sitecustomize)", "-E": "ignores PYTHONPATH", "-I": "ignores PYTHONPATH and site"}


def _python_flags_warning(command):
    if not command or "python" not in os.path.basename(command[0]):
        return None
    for arg in command[1:]:
        if not arg.startswith("-") or arg.startswith("--"):
            break
        for flag, why in _HOOK_DISABLING_FLAGS.items():
            if arg != "-" and flag[1] in arg[1:] and not arg.startswith("-c") and not arg.startswith("-m"):
                return f"{command[0]} {arg}: {flag} {why}, so the agent cannot load and nothing will be profiled"
        if arg in ("-c", "-m"):
            break
    return None


def _options_json(args):
    import json

    values = {}
    existing = os.environ.get("MS_PROFILER_OPTIONS")
    if existing:
        try:
            values = json.loads(existing)
        except ValueError:
            values = {}
        if not isinstance(values, dict):
            values = {}
    values["start"] = True
    if args.output_path:
        values["output_path"] = os.path.abspath(args.output_path)
    for item in args.option or []:
        key, _, raw = item.partition("=")
        try:
            values[key] = json.loads(raw)
        except ValueError:
            values[key] = raw
    return json.dumps(values)


def cmd_run(args):
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("msprof-agent run: give the command to profile after --, e.g. msprof-agent run -- python train.py")
    warning = _python_flags_warning(command)
    if warning:
        log.say(warning)
    env = dict(os.environ)
    env["MS_PROFILER_OPTIONS"] = _options_json(args)
    env["PYTHONPATH"] = _prepend_path(env.get("PYTHONPATH"), hook_dir())
    executable = command[0] if os.path.sep in command[0] else shutil.which(command[0])
    if executable is None:
        raise SystemExit(f"msprof-agent run: command not found: {command[0]}")
    if args.baseline:
        from .compare import run_with_baseline

        return run_with_baseline(executable, command, env, args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(executable, command, env)  # signals and exit status belong to the job itself


def cmd_analyse(args):
    from .analysis import offline_analyse

    try:
        step_list = [int(s) for s in args.step_list.split(",")] if args.step_list else None
        offline_analyse(args.path, pretty=args.pretty, step_list=step_list, data_simplification=args.data_simplification,
                        announce=True, output=args.output)
    except (ValueError, FileNotFoundError) as exc:
        log.say(f"analyse: {exc}")
        return 2
    return 0


def cmd_view(args):
    from .viewer.server import serve

    return serve(args.summary_base_dir, host=args.host, port=args.port)


def cmd_compare(args):
    from .compare import main as compare_main

    return compare_main(args)


def build_parser():
    parser = argparse.ArgumentParser(prog="msprof-agent", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    run = sub.add_parser("run", help="profile a command: msprof-agent run [options] -- python train.py")
    run.add_argument("--output-path", help="output directory (default: ./data, or the variable's output_path)")
    run.add_argument("-o", "--option", action="append", metavar="KEY=VALUE", help="any MS_PROFILER_OPTIONS key, value as JSON")
    run.add_argument("--baseline", help="after the job, compare its profile with this earlier output directory")
    run.add_argument("--fail-on", default=None, help='gate for --baseline, e.g. "step_time>5%%,data_wait>10%%"')
    run.add_argument("--markdown", action="store_true", help="with --baseline: print the comparison as Markdown")
    run.add_argument("--json", dest="json_out", help="with --baseline: also write the comparison as JSON to this file")
    run.add_argument("command", nargs=argparse.REMAINDER)
    run.set_defaults(func=cmd_run)

    analyse = sub.add_parser("analyse", aliases=["analyze"], help="analyse raw data offline (single or multi-card)")
    analyse.add_argument("path", help="a directory holding profiler/ or rank_*/profiler/")
    analyse.add_argument("--pretty", action="store_true", help="indent JSON output")
    analyse.add_argument("--step-list", help="comma-separated consecutive steps to analyse, e.g. 3,4,5; "
                                             "written to --output (default PATH/steps_3-5), never over the run's files")
    analyse.add_argument("--output", help="write the analysis here, laid out as PATH (profiler/ or rank_*/profiler/)")
    analyse.add_argument("--no-data-simplification", dest="data_simplification", action="store_false")
    analyse.set_defaults(func=cmd_analyse)

    view = sub.add_parser("view", help="serve the analysed profiles under a directory")
    view.add_argument("--summary-base-dir", required=True)
    view.add_argument("--host", default="127.0.0.1")
    view.add_argument("--port", type=int, default=8080)
    view.set_defaults(func=cmd_view)

    compare = sub.add_parser("compare", help="compare two runs and gate on regressions")
    compare.add_argument("base")
    compare.add_argument("new")
    compare.add_argument("--fail-on", default=None, help='e.g. "step_time>5%%,data_wait>10%%,peak_memory>10%%" or a TOML file')
    compare.add_argument("--markdown", action="store_true", help="print Markdown instead of the text table")
    compare.add_argument("--json", dest="json_out", help="also write the comparison as JSON to this file")
    compare.set_defaults(func=cmd_compare)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    result = args.func(args)
    return result if isinstance(result, int) else 0
