"""``msprof-agent`` command line: run, analyse, view, doctor, compare.

Each subcommand parses its own arguments here and hands off to the module that owns the work,
so this file stays a table of contents.
"""
from __future__ import annotations

import argparse
import os
import shutil

from . import environment, log
from .contract.names import RUN_FOLDER, SUMMARY, rank_file, run_dir, summary_ranks

TYPE_CHECKING = False  # what follows is for the type checker only
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from .options import Options


def _prepend_path(value: str | None, entries: Sequence[str]) -> str:
    """Put entries first in an os.pathsep list, removing any other copy (compared normalised)."""
    ours = {os.path.normpath(e) for e in entries}
    parts = [p for p in (value or "").split(os.pathsep) if p and os.path.normpath(p) not in ours]
    return os.pathsep.join(list(entries) + parts)


def _python_flags_warning(command: Sequence[str], through_pth: bool) -> str | None:
    """-S skips both doors; -E and -I skip only the hook on PYTHONPATH, not an installed .pth."""
    if not command or "python" not in os.path.basename(command[0]):
        return None
    flags = {"S": "skips site (so the agent's .pth and sitecustomize)"}
    if not through_pth:
        flags.update(E="ignores PYTHONPATH, where run puts the agent's hook", I="ignores PYTHONPATH, where run puts the agent's hook")
    for arg in command[1:]:
        if not arg.startswith("-") or arg.startswith("--"):
            break
        for flag, why in flags.items():
            if arg != "-" and flag in arg[1:] and not arg.startswith("-c") and not arg.startswith("-m"):
                return f"{command[0]} {arg}: -{flag} {why}, so the agent cannot load and nothing will be profiled"
        if arg in ("-c", "-m"):
            break
    return None


def _option_items(args: argparse.Namespace) -> list[tuple[str, str, Any]]:
    """The -o KEY=VALUE items as (item, key, value): the value as JSON, else as the text given."""
    import json

    items: list[tuple[str, str, Any]] = []
    for item in args.option or []:
        key, _, raw = item.partition("=")
        try:
            items.append((item, key, json.loads(raw)))
        except ValueError:
            items.append((item, key, raw))
    return items


def _options_json(args: argparse.Namespace) -> str:
    """The variable's JSON for the job: the exported one (which must be a JSON object), start true, then -o."""
    import json

    from .options import parse_text

    values: dict[str, Any] = {}
    existing = os.environ.get(environment.OPTIONS, "").strip()
    if existing:
        parse_text(existing)  # its own one-line error, naming the variable
        values = json.loads(existing)
    values["start"] = True
    if args.output_path:
        values["output_path"] = os.path.abspath(args.output_path)
    for _, key, value in _option_items(args):
        values[key] = value
    return json.dumps(values)


def _checked_options(args: argparse.Namespace) -> tuple[str, Options] | str:
    """(the variable's text, its parsed options), or the one-line error when the job cannot be
    profiled; the error names the door the bad value came through (the variable, ``-o KEY=VALUE``, ``--output-path``)."""
    from .bootstrap import output_path_error
    from .options import OptionsError, from_mapping, parse_text

    items = _option_items(args)
    try:
        text = _options_json(args)
    except OptionsError as exc:
        return f"{environment.OPTIONS}: {exc}"
    for item, key, value in items:
        try:
            from_mapping({key: value})
        except OptionsError as exc:
            return f"-o {item}: {exc}"
    try:
        opts = parse_text(text)
    except OptionsError as exc:
        given = ([environment.OPTIONS] if os.environ.get(environment.OPTIONS, "").strip() else []) + [f"-o {item}" for item, _, _ in items]
        return f"{' with '.join(given) or environment.OPTIONS}: {exc}"
    problem = output_path_error(opts.output_path)
    if problem:
        door = "--output-path" if args.output_path else next((f"-o {i}" for i, k, _ in items if k == "output_path"), environment.OPTIONS)
        problem = door + problem[len(environment.OPTIONS):]
    return problem if problem else (text, opts)


def _say_outcome(output_path: str, before_ns: int) -> bool:
    """After the job: where its profile is, or why there is none. True when a profile was written.

    BEFORE_NS is profiler/'s modification time once ``run`` had probed it: the agent's own probe at
    start-up in the job changes it again, so a later time means the agent started there."""
    import glob

    profiler_dir = run_dir(output_path)
    dirs = [profiler_dir] + sorted(glob.glob(os.path.join(output_path, "*", RUN_FOLDER)))
    written = (os.path.join(d, rank_file(SUMMARY, rank)) for d in dirs for rank in summary_ranks(d))
    summaries = sorted(f for f in written if os.stat(f).st_mtime_ns > before_ns)
    if summaries:
        where = sorted({os.path.dirname(f) for f in summaries})
        log.say(f"profile written: {', '.join(where)} ({', '.join(os.path.basename(f) for f in summaries)})")
        return True
    if os.stat(profiler_dir).st_mtime_ns <= before_ns:
        log.say(f"no profile written to {profiler_dir}: the agent did not start in the job (a Python started with -S, "
                "a wrapper that drops the environment, or an interpreter without msprof-agent installed)")
    elif any(os.stat(f).st_mtime_ns > before_ns for f in glob.glob(os.path.join(profiler_dir, "*"))):
        log.say(f"no analysed profile in {profiler_dir}: the job left raw data but ended before the analysis "
                f"(killed?); analyse it with: msprof-agent analyse {output_path}")
    else:
        log.say(f"no profile written to {profiler_dir}: the agent started, but the job ran no MindSpore or PyTorch "
                "training step it could profile (no optimizer step, training-data fetch, compiled step function or model "
                "forward): run the model through an nn.Module / Cell, or profile a region with msprof_agent.Profiler start() / stop()")
    return False


EXIT_NOT_PROFILED = 2


def cmd_run(args: argparse.Namespace) -> int:
    """Profile one command: options checked before it starts, the job supervised, the outcome said after it."""
    from . import doors, supervise

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("msprof-agent run: give the command to profile after --, e.g. msprof-agent run -- python train.py")
    executable = command[0] if os.path.sep in command[0] else shutil.which(command[0])
    if executable is None:
        raise SystemExit(f"msprof-agent run: command not found: {command[0]}")
    env = dict(os.environ)
    checked = _checked_options(args)
    if isinstance(checked, str):  # bad input: said before the job starts, which is not started
        log.say(f"{checked}. The job is not started.")
        return EXIT_NOT_PROFILED
    text, opts = checked
    env[environment.OPTIONS] = text
    through_pth = doors.installed_pth() is not None
    if not through_pth:
        hook = doors.hook_dir()
        if hook is None:
            raise SystemExit("msprof-agent run: this installation has neither its .pth in site-packages nor a "
                             "sitecustomize_hook folder beside the package; reinstall it (pip install msprof-agent)")
        doors.compile_hook(hook)
        # the checkout too: a job's sys.path starts with its script's folder, not the one run was started from
        env["PYTHONPATH"] = _prepend_path(env.get("PYTHONPATH"), [hook, os.path.dirname(hook)])
    warning = _python_flags_warning(command, through_pth)
    if warning:
        log.say(warning)
    if args.baseline:
        from .compare import run_with_baseline

        return run_with_baseline(executable, command, env, args)
    os.makedirs(run_dir(opts.output_path), exist_ok=True)  # the agent's probe in the job then changes its time (_say_outcome)
    before_ns = os.stat(run_dir(opts.output_path)).st_mtime_ns
    status = supervise.run_job(executable, command, env)
    written = _say_outcome(opts.output_path, before_ns)
    if status == 0 and args.require_profile and not written:
        return EXIT_NOT_PROFILED
    return supervise.end_like(status)


def cmd_analyse(args: argparse.Namespace) -> int:
    from .export import kinds as export_kinds
    from .fanout import SchedulerError
    from .pipeline import offline_analyse

    try:
        step_list = [int(s) for s in args.step_list.split(",")] if args.step_list else None
        export_kinds(args.export)  # a wrong name is said before any analysis
        if args.scheduler and args.scheduler_file:
            raise ValueError("give --scheduler or --scheduler-file, not both")
        if args.scheduler and args.scheduler != "local" and "://" not in args.scheduler:
            raise ValueError(f"--scheduler: got {args.scheduler!r}; accepted: local, or a Dask scheduler address such as tcp://host:8786")
        offline_analyse(args.path, pretty=args.pretty, step_list=step_list, data_simplification=args.data_simplification, announce=True,
                        export_type=args.export, output=args.output, scheduler=args.scheduler, scheduler_file=args.scheduler_file,
                        keep_summaries=False)
    except (ValueError, FileNotFoundError, SchedulerError, RuntimeError) as exc:
        log.say(f"analyse: {exc}")
        return 2
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from .viewer.server import serve

    status: int = serve(args.summary_base_dir, host=args.host, port=args.port)
    return status


def cmd_doctor(_args: argparse.Namespace) -> int:
    from .doctor import main as doctor_main

    return doctor_main()


def cmd_compare(args: argparse.Namespace) -> int:
    from .compare import main as compare_main

    return compare_main(args)


def cmd_top(args: argparse.Namespace) -> int:
    from .top import main as top_main

    return top_main(args.path, once=args.once)


def cmd_capture(args: argparse.Namespace) -> int:
    from .capture import request_from_outside

    return request_from_outside(args.path, args.steps)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="msprof-agent", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    run = sub.add_parser("run", help="profile a command: msprof-agent run [options] -- python train.py")
    run.add_argument("--output-path", help="output directory (default: ./data, or the variable's output_path)")
    run.add_argument("-o", "--option", action="append", metavar="KEY=VALUE", help="any MS_PROFILER_OPTIONS key, value as JSON")
    run.add_argument("--baseline", help="after the job, compare its profile with this earlier output directory")
    run.add_argument("--fail-on", default=None, help='gate for --baseline, e.g. "step_time>5%%,data_wait>10%%"')
    run.add_argument("--markdown", action="store_true", help="with --baseline: print the comparison as Markdown")
    run.add_argument("--json", dest="json_out", help="with --baseline: also write the comparison as JSON to this file")
    run.add_argument("--allow-different", action="store_true",
                     help="with --baseline: gate even when the runs differ in framework, world size or model (op types)")
    run.add_argument("--require-profile", action="store_true",
                     help="exit 2 when the job passed but left no profile (bad options always exit 2, the job not started)")
    run.add_argument("command", nargs=argparse.REMAINDER)
    run.set_defaults(func=cmd_run)

    analyse = sub.add_parser("analyse", aliases=["analyze"], help="analyse raw data offline (single or multi-card)")
    analyse.add_argument("path", help="a directory holding profiler/ or rank_*/profiler/")
    analyse.add_argument("--pretty", action="store_true", help="indent JSON output")
    analyse.add_argument("--step-list", help="comma-separated consecutive steps to analyse, e.g. 3,4,5; "
                                             "written to --output (default PATH/steps_3-5), never over the run's files")
    analyse.add_argument("--output", help="write the analysis here, laid out as PATH (profiler/ or rank_*/profiler/)")
    analyse.add_argument("--no-data-simplification", dest="data_simplification", action="store_false")
    analyse.add_argument("--export", help="also write these exports: text (Ascend layout, HTA trace), db (Ascend SQLite), e.g. text,db")
    analyse.add_argument("--scheduler", help="analyse the ranks on Dask (the [cluster] extra): local (a LocalCluster here) or the address "
                                             "of a running scheduler, tcp://host:8786; default: a process pool of this machine's cores")
    analyse.add_argument("--scheduler-file", help="analyse the ranks on the Dask cluster this scheduler file describes (dask-jobqueue, ...)")
    analyse.set_defaults(func=cmd_analyse)

    view = sub.add_parser("view", help="serve the analysed profiles under a directory")
    view.add_argument("--summary-base-dir", required=True, metavar="DIR",
                      help="the directory whose analysed runs (each holding profiler/ or rank_*/profiler/) are listed")
    view.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s, this machine only)")
    view.add_argument("--port", type=int, default=8080, help="the port to listen on; 0 picks a free one (default: %(default)s)")
    view.set_defaults(func=cmd_view)

    doctor = sub.add_parser("doctor", help="say whether a Python started here would be profiled, and how")
    doctor.set_defaults(func=cmd_doctor)

    compare = sub.add_parser("compare", help="compare two runs and gate on regressions")
    compare.add_argument("base")
    compare.add_argument("new")
    compare.add_argument("--fail-on", default=None, help='e.g. "step_time>5%%,data_wait>10%%,peak_memory>10%%" or a TOML file')
    compare.add_argument("--markdown", action="store_true", help="print Markdown instead of the text table")
    compare.add_argument("--json", dest="json_out", help="also write the comparison as JSON to this file")
    compare.add_argument("--allow-different", action="store_true",
                         help="gate even when the runs differ in framework, world size or model (less than half their op time by op type shared)")
    compare.set_defaults(func=cmd_compare)

    top = sub.add_parser("top", help="a running job's every rank in the terminal, updated in place (Ctrl-C quits)")
    top.add_argument("path", help="the job's output path (holding profiler/ or rank_*/profiler/)")
    top.add_argument("--once", action="store_true", help="print one screen and leave")
    top.set_defaults(func=cmd_top)

    capture = sub.add_parser("capture", help="record op detail of the same steps on every rank of a running job")
    capture.add_argument("path", help="the job's output path (holding profiler/ or rank_*/profiler/)")
    capture.add_argument("--steps", type=int, default=5, help="steps to record (default: %(default)s)")
    capture.set_defaults(func=cmd_capture)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = args.func(args)
    return result if isinstance(result, int) else 0
