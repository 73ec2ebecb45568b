"""Running a job as our child, so that something can be said after it: ``run`` reports whether a
profile was written, ``run --baseline`` compares. The job keeps its signals and its exit status:
SIGINT/SIGTERM sent to us reach it, and a job killed by a signal kills us with the same signal.
"""
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

FORWARDED = {signal.SIGINT, signal.SIGTERM}


def _run_forwarding(executable: str, command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run the job and wait, passing on SIGINT/SIGTERM sent to us by kill(). A terminal's Ctrl-C
    already reached the job (same process group), so a kernel-sent signal is not sent twice.
    The signals stay blocked in us and are taken with sigtimedwait, which tells who sent them."""
    waited = FORWARDED | {signal.SIGCHLD}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        proc = subprocess.Popen(command, executable=executable, env=env, preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, mask))
        while proc.poll() is None:
            info = signal.sigtimedwait(waited, 0.5)
            if info is not None and info.si_signo in FORWARDED and info.si_code <= 0:  # SI_USER, SI_QUEUE, SI_TKILL
                proc.send_signal(info.si_signo)
        while signal.sigtimedwait(waited, 0) is not None:  # the job is gone: drop what arrived with its end
            pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return proc.returncode


def _run_with_handlers(executable: str, command: Sequence[str], env: Mapping[str, str]) -> int:
    """Where sigtimedwait is missing (macOS): forward every SIGINT/SIGTERM, so a terminal's Ctrl-C reaches the job twice."""
    proc = subprocess.Popen(command, executable=executable, env=env)
    previous = {sig: signal.signal(sig, lambda number, _frame: proc.send_signal(number)) for sig in FORWARDED}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_job(executable: str, command: Sequence[str], env: Mapping[str, str]) -> int:
    """The job's status as subprocess gives it: its exit code, or minus the signal that killed it."""
    sys.stdout.flush()
    sys.stderr.flush()
    return (_run_forwarding if hasattr(signal, "sigtimedwait") else _run_with_handlers)(executable, command, env)


def end_like(status: int) -> int:
    """Our exit status for the job's: a signal is reset to its default action and sent to ourselves,
    so our parent sees the same death (-15 stays -15); should that not end us, 128 + the signal, as a shell says."""
    if status >= 0:
        return status
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
    return 128 - status
