"""A fork child of a process where kineto ran leaves without C destructors (they hang there)."""
import os

_fork_guard_installed = False


def guard_fork_children_against_kineto_exit():
    """Once kineto has run, a child forked from this process hangs in C exit handlers.

    kineto's config thread waits on a condition variable; in a fork child that thread is gone and
    glibc's ``pthread_cond_destroy`` in kineto's static destructor waits for it forever (seen with
    torch 2.13 on a plain ``os.fork()`` child that calls ``sys.exit``). DataLoader workers leave with
    ``os._exit`` and never get there. For any other fork child we run its atexit handlers, flush, and
    leave with ``os._exit`` and the status the child chose, skipping only the C destructors.
    """
    global _fork_guard_installed
    if not _fork_guard_installed:
        _fork_guard_installed = True
        os.register_at_fork(after_in_child=_exit_child_without_c_destructors)


def _exit_child_without_c_destructors():
    import atexit
    import sys

    chosen = {"code": None}
    original_exit = sys.exit

    def remembering_exit(code=None):
        chosen["code"] = code
        original_exit(code)

    def leave():
        atexit.unregister(leave)
        atexit._run_exitfuncs()  # the child's other handlers still run, in their order
        code = chosen["code"]
        if code is None:
            status = 1 if getattr(sys, "last_value", None) is not None else 0
        elif isinstance(code, int):
            status = code
        else:
            sys.stderr.write(f"{code}\n")
            status = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)

    sys.exit = remembering_exit
    atexit.register(leave)
