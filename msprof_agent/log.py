"""The agent's only voice on stderr: every line starts with ``msprof-agent:`` and each distinct problem is said once."""
from __future__ import annotations

import os
import sys

from . import environment

PREFIX = "msprof-agent: "
_said: set[object] = set()


def say(message: str) -> None:
    """Print one line to stderr (for notices the user asked for, like the exit summary)."""
    try:
        sys.stderr.write(PREFIX + message + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def warn_once(message: str, key: object = None) -> None:
    """Report a problem once per process; repeats of the same key are dropped so logs are never flooded."""
    key = key or message
    if key in _said:
        return
    _said.add(key)
    say(message)


def report_error(where: str, exc: BaseException) -> None:
    """An agent failure: reported once, never raised into the user's job (MSPROF_AGENT_DEBUG=1 adds the traceback)."""
    if os.environ.get(environment.DEBUG):
        import traceback

        traceback.print_exception(type(exc), exc, exc.__traceback__)  # the one form every Python 3 takes
    warn_once(f"{where} failed, the job goes on: {type(exc).__name__}: {exc}", key=(where, type(exc).__name__))
