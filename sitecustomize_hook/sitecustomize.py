"""msprof-agent bootstrap: the one piece of code both ways into a process run.

- As ``sitecustomize``, when this folder is on PYTHONPATH (a checkout, an editable install, or
  ``msprof-agent run`` there): it runs the user's own sitecustomize first, then starts the agent.
- As ``_msprof_agent_pth``, the copy of this file an installed wheel carries (setup.py): the one line of
  its ``zz_msprof_agent.pth`` imports it only when MS_PROFILER_OPTIONS or MSPROF_DYNAMIC_CFG is set, and
  under that name it leaves the user's sitecustomize alone.

Standard library only, and on the off path (variable unset, empty or ``"start": false``) it does two
``os.environ`` lookups and a string scan: no json, no wrapt, no threads. With both present, the first to
run (the .pth, during site-packages) starts the agent and the other returns at once.
This folder must hold nothing else: every module here becomes importable by its bare name.
"""
import os
import sys


def _chain_user_sitecustomize():
    """Run the user's own sitecustomize (if any) exactly once, as ddtrace-run does. The path finder looks
    for it first: most machines have none, and a failing import costs ~30 µs of exception handling."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    finder = next((f for f in sys.meta_path if getattr(f, "__name__", None) == "PathFinder"), None)
    if finder is not None and finder.find_spec("sitecustomize", rest) is None:
        return
    ours = sys.modules.pop("sitecustomize", None)
    saved_path = list(sys.path)
    sys.path[:] = rest
    try:
        import sitecustomize  # noqa: F401  (the user's)
    except ImportError as exc:
        if exc.name != "sitecustomize":
            sys.stderr.write("msprof-agent: your sitecustomize failed to import: %r\n" % (exc,))
    except Exception as exc:  # the user's file raised: report it as Python itself would, then go on
        sys.stderr.write("msprof-agent: your sitecustomize raised: %r\n" % (exc,))
    finally:
        user = sys.modules.pop("sitecustomize", None)
        if user is not None:
            sys.modules["_msprof_user_sitecustomize"] = user
        sys.path[:] = saved_path
        if ours is not None:
            sys.modules["sitecustomize"] = ours


def _clearly_off(text):
    """True when the options leave profiling off, decided without importing json.

    Only the unambiguous case is decided here: one ``"start"`` key followed by ``false``.
    Everything else is parsed properly by the agent.
    """
    text = text.strip()
    if not text:
        return True
    if text.count('"start"') != 1:
        return False
    rest = text.split('"start"', 1)[1].lstrip()
    return rest.startswith(":") and rest[1:].lstrip().startswith("false")


def _never_profiled():
    """multiprocessing spawn/forkserver workers re-run this file, and so does msprof-agent's own command
    line (run, doctor, view...) when the variable is exported: neither is the job."""
    argv = list(getattr(sys, "orig_argv", ()))
    if "--multiprocessing-fork" in argv or any("multiprocessing" in a and "spawn_main" in a for a in argv):
        return True
    if "-m" in argv:
        return argv[argv.index("-m") + 1:argv.index("-m") + 2] == ["msprof_agent"]
    return len(argv) > 1 and os.path.basename(argv[1]) == "msprof-agent"


def _bootstrap(door):
    if getattr(sys, "_msprof_agent_door", None):  # the other door already started the agent here
        return
    options = os.environ.get("MS_PROFILER_OPTIONS")
    if (options is None or _clearly_off(options)) and not os.environ.get("MSPROF_DYNAMIC_CFG"):
        return
    if _never_profiled():
        return
    sys._msprof_agent_door = door  # one door per process; the tests read which one it was
    try:
        from msprof_agent import bootstrap
    except Exception as exc:
        sys.stderr.write("msprof-agent: cannot import the agent (%r); profiling is off\n" % (exc,))
        return
    bootstrap.activate_from_environment()


if __name__ == "sitecustomize":
    _chain_user_sitecustomize()
try:
    _bootstrap("sitecustomize" if __name__ == "sitecustomize" else ".pth")
except Exception as _exc:  # never harm the user's job
    sys.stderr.write("msprof-agent: internal error at start-up, profiling is off: %r\n" % (_exc,))
