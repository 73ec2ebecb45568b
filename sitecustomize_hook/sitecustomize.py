"""msprof-agent bootstrap: runs at interpreter start when this folder is on PYTHONPATH.

Standard library only, and on the off path (variable unset, empty or ``"start": false``)
it does two ``os.environ`` lookups and a string scan: no json, no wrapt, no threads.
This folder must hold nothing else: every module here becomes importable by its bare name.
"""
import os
import sys


def _chain_user_sitecustomize():
    """Run the user's own sitecustomize (if any) exactly once, as ddtrace-run does."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved_path = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
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


def _is_multiprocessing_child():
    """multiprocessing spawn/forkserver workers re-run this hook; they are never profiled."""
    argv = getattr(sys, "orig_argv", ())
    return "--multiprocessing-fork" in argv or any("multiprocessing" in a and "spawn_main" in a for a in argv)


def _bootstrap():
    options = os.environ.get("MS_PROFILER_OPTIONS")
    if (options is None or _clearly_off(options)) and not os.environ.get("MSPROF_DYNAMIC_CFG"):
        return
    if _is_multiprocessing_child():
        return
    try:
        from msprof_agent import bootstrap
    except Exception as exc:
        sys.stderr.write("msprof-agent: cannot import the agent (%r); profiling is off\n" % (exc,))
        return
    bootstrap.activate_from_environment()


_chain_user_sitecustomize()
try:
    _bootstrap()
except Exception as _exc:  # never harm the user's job
    sys.stderr.write("msprof-agent: internal error at start-up, profiling is off: %r\n" % (_exc,))
