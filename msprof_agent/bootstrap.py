"""Activation from the environment, called at interpreter start by ``sitecustomize_hook`` or the installed .pth.

What happens after bad input: the one-line error names the key, the value and what is accepted,
and profiling stays **off** for that process; the job runs as if the agent were absent. We never
guess at settings the user did not write (a typo'd ``output_path`` must not scatter files).

``MSPROF_DYNAMIC_CFG=DIR`` (with or without the variable) starts the dynamic monitor on the
session's own step boundaries: zero-code Method 3, windows set by editing ``DIR/profiler_config.json``.
"""
from __future__ import annotations

import os
import sys

from . import environment, log
from .contract.names import WRITE_PROBE, run_dir
from .frameworks.mindspore import env_guard as mindspore_env_guard
from .options import OptionsError, parse_text

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    from .session import Session

_activated = False
# Launchers start the ranks and step no model themselves (nor does msrun's scheduler, which runs the
# script as MS_ROLE=MS_SCHED); the ranks inherit the variable and profile.
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
LAUNCHER_SCRIPTS = ("torchrun", "msrun", "deepspeed")


def activate_from_environment() -> Session | None:
    """Parse the variable, then start the session and the framework hooks; runs once per process."""
    global _activated
    if _activated:
        return None
    _activated = True
    text = os.environ.get(environment.OPTIONS, "")
    if text.strip():  # launchers too: msrun and its scheduler import MindSpore, whose own profiler would start there
        mindspore_env_guard.hide_variable_from_mindspore()
    if launcher(sys.orig_argv) or os.environ.get(environment.MS_ROLE) == "MS_SCHED":
        return None
    try:
        opts = parse_text(text) if text.strip() else parse_text("{}")
    except OptionsError as exc:
        _said_off(f"{environment.OPTIONS}: {exc}")
        return None
    dynamic_cfg = os.environ.get(environment.DYNAMIC_CFG)
    if not opts.start and not dynamic_cfg:
        return None
    problem = output_path_error(opts.output_path)
    if problem:
        _said_off(problem)
        return None
    from . import online_analysis, session
    from .frameworks import install_post_import_hooks

    current: Session = session.start(opts, origin="env" if opts.start else "dynamic", analyse=online_analysis.analyse)
    from .capture import attach, follow_requests

    follow_requests(current)
    if opts.capture is not None:
        attach(current)
    if dynamic_cfg:
        _start_dynamic_monitor(current, dynamic_cfg, opts.output_path)
    install_post_import_hooks(current)
    return current


def _said_off(problem: str) -> None:
    """Why profiling is off, said now and again at exit when the process trained (imported a framework),
    where the line is last on the screen rather than scrolled away above the job's output."""
    import atexit

    log.say(f"{problem}. Profiling is off for this run.")
    atexit.register(_repeat_if_trained, problem)


def _repeat_if_trained(problem: str) -> None:
    from .contract.frameworks import PROFILES

    if any(name in sys.modules for name in PROFILES):
        log.say(f"no profile written: {problem}")


def launcher(argv: list[str]) -> str | None:
    """The launcher an interpreter started as ARGV runs (``python -m torch.distributed.run``, ``torchrun``,
    ``msrun``, ``accelerate launch``), or None for anything else."""
    args = argv[1:]
    i = 0
    while i < len(args) and args[i].startswith("-"):  # the interpreter's own options
        if args[i] == "-m":
            return args[i + 1] if args[i + 1:i + 2] and args[i + 1] in LAUNCHER_MODULES else None
        if args[i] == "-c":
            return None
        i += 2 if args[i] in ("-X", "-W") else 1
    name = os.path.basename(args[i]) if i < len(args) else ""
    if name in LAUNCHER_SCRIPTS or (name == "accelerate" and args[i + 1:i + 2] == ["launch"]):
        return name
    return None


PROBE_ATTEMPTS = 20  # ranks starting together each make, probe and remove the folders: one's removal can undo another's making


def output_path_error(output_path: str, source: str | None = environment.OPTIONS) -> str | None:
    """The one-line error (without a final full stop; after ``SOURCE: `` where given) when OUTPUT_PATH/profiler
    cannot be made and written by this process, else None. ``run`` and ``Profiler()`` ask too."""
    profiler_dir = run_dir(output_path)
    made = []  # the folders the probe makes, removed after it: a process that never steps leaves nothing
    folder = os.path.abspath(profiler_dir)
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        made.append(folder)
        folder = os.path.dirname(folder)
    try:
        for attempt in range(PROBE_ATTEMPTS):
            try:
                os.makedirs(profiler_dir, exist_ok=True)
                probe = os.path.join(profiler_dir, WRITE_PROBE.format(pid=os.getpid()))
                with open(probe, "wb"):
                    pass
                os.remove(probe)
                break
            except FileNotFoundError:  # another process of the job removed the folders its own probe made
                if attempt == PROBE_ATTEMPTS - 1:
                    raise
    except OSError as exc:
        return (f'{source + ": " if source else ""}key "output_path": cannot write to {output_path!r} ({exc.strerror}); '
                "accepted: a directory this process can create and write")
    finally:
        for folder in made:  # innermost first; one another process has written into meanwhile stays
            try:
                os.rmdir(folder)
            except OSError:
                break
    return None


def _start_dynamic_monitor(current: Session, cfg_dir: str, output_path: str) -> None:
    """Zero-code Method 3: the monitor follows the session's own step boundaries."""
    try:
        from .dynamic import DynamicProfilerMonitor

        DynamicProfilerMonitor(cfg_dir, output_path, follow_session=True)
    except Exception as exc:
        log.say(f"{environment.DYNAMIC_CFG}={cfg_dir!r}: cannot start dynamic profiling ({type(exc).__name__}: {exc}); "
                "the job runs without it.")
