"""One profiling session: idle -> recording -> stopped -> analysed, whoever drives it.

The variable, the ``Profiler`` API and the dynamic monitor all go through the single
``current()`` session, so a process never collects twice. Framework integrations report step
boundaries to ``session.steps`` and hand over a device session (the framework's own profiler)
that the window starts and stops. At exit, on SIGTERM, or on an explicit stop, whatever was
collected is flushed and analysed; a fork child never writes.
"""
import atexit
import os
import platform
import signal
import sys
import time

from . import log
from .collectors.steps import StepRecorder
from .store import EventWriter

IDLE, RECORDING, STOPPED, ANALYSED = "idle", "recording", "stopped", "analysed"

_current = None


def current():
    """The process's session, or None when profiling is off."""
    return _current


class Session:
    def __init__(self, options, origin):
        self.options = options
        self.origin = origin
        self.profiler_dir = os.path.join(options.output_path, "profiler")
        self.started_ns = time.time_ns()
        self.owner_pid = os.getpid()
        self.state = IDLE
        self.framework = None
        self.device = None
        self.disabled = False
        self.explicit = False  # started by an API call, not by a step window
        self.windows = 0
        self.summary = None
        self.writer = EventWriter(self.profiler_dir, options.rank_id, self.started_ns)
        self.steps = StepRecorder(self._step_opened, self._step_closed)
        self._cpu = None
        self.add_meta(
            pid=self.owner_pid, rank_id=options.rank_id, device_id=options.device_id, rank_size=options.world_size,
            origin=origin, started_ns=self.started_ns, host=platform.node(), python=platform.python_version(),
            argv=list(sys.argv), options=options.to_dict(), device_target="CPU",
        )

    # -- wiring by integrations -------------------------------------------------------------
    def attach(self, framework, device=None, **meta):
        """The first framework to attach owns the step stream; a second one is refused."""
        if self.framework not in (None, framework):
            return False
        self.framework = framework
        if device is not None:
            self.device = device
        self.add_meta(framework=framework, **meta)
        return True

    def add_meta(self, **values):
        self.writer.add(dict(values, k="meta"))

    def record(self, record):
        """Store one raw record (ops batch, queue sample, comm call...) unless this is a fork child."""
        if not self.disabled:
            self.writer.add(record)

    @property
    def recording(self):
        return self.state == RECORDING

    # -- the window ----------------------------------------------------------------------------
    def _in_window(self, n):
        stop = self.options.stop_step
        return n >= self.options.start_step and (stop is None or n <= stop)

    def _step_opened(self, n, _start_ns):
        if self.state == IDLE and not self.explicit and self.options.start and self._in_window(n):
            self.start_recording()

    def _step_closed(self, step):
        if self.disabled:
            return
        step["win"] = self.state == RECORDING
        self.writer.add(step)
        if step["win"] and not self.explicit and self.options.stop_step is not None and step["n"] >= self.options.stop_step:
            self.stop_recording()
        self.writer.flush()

    def start_recording(self, explicit=False):
        if self.disabled or self.state == RECORDING:
            return
        self.explicit = self.explicit or explicit
        self.state = RECORDING
        self.windows += 1
        self.record({"k": "window", "event": "start", "ts": time.time_ns(), "step": self.steps.completed + 1})
        if self.device is not None and self.options.op_time:
            try:
                self.device.start()
            except Exception as exc:
                log.report_error("starting the device profiler", exc)
        self._start_sampler()
        self.writer.flush()

    def stop_recording(self):
        if self.state != RECORDING:
            return
        self.state = STOPPED
        if self.device is not None and self.options.op_time:
            try:
                self.device.stop(self)
            except Exception as exc:
                log.report_error("stopping the device profiler", exc)
        if self._cpu is not None:
            self._cpu.stop()
            self._cpu = None
        self.record({"k": "window", "event": "stop", "ts": time.time_ns(), "step": self.steps.completed})
        self.writer.flush()

    def _start_sampler(self):
        try:
            from .collectors.cpu import CpuSampler

            self._cpu = CpuSampler(self.writer.queue, self.options.cpu_sampling_interval)
            self._cpu.start()
        except Exception as exc:
            log.report_error("starting CPU sampling", exc)

    # -- the end -------------------------------------------------------------------------------
    def finalize(self, reason):
        """Flush, stop and analyse once; safe from atexit, a signal handler or an explicit call."""
        if self.disabled or os.getpid() != self.owner_pid or self.state == ANALYSED:
            return None
        self.steps.discard_open()
        self.stop_recording()
        collected = self.windows > 0
        self.state = ANALYSED
        if not collected:
            self.writer.abandon()
            return None
        self.record({"k": "end", "reason": reason, "ts": time.time_ns(), "steps": self.steps.completed})
        self.writer.close()
        from .analysis import analyse_rank

        self.summary = analyse_rank(self.profiler_dir, self.options.rank_id, announce=True)
        return self.summary

    def forget_in_fork_child(self):
        """A forked worker inherits this object: it must never write, sample or analyse."""
        self.disabled = True
        self._cpu = None
        self.writer.abandon()


def start(options, origin):
    """Create the process's session (once) and the exit, signal and fork hooks that protect its data."""
    global _current
    if _current is not None:
        return _current
    _current = Session(options, origin)
    _install_process_hooks()
    return _current


def _finalize_current(reason):
    session = _current
    if session is None:
        return
    try:
        session.finalize(reason)
    except Exception as exc:
        log.report_error("analysis at exit", exc)


_previous_handlers = {}


def _on_terminate(signum, frame):
    """Keep the data, then let the signal do what it did before we were here (exit status -15 stays -15)."""
    _finalize_current(signal.Signals(signum).name)
    previous = _previous_handlers.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
        return
    if previous == signal.SIG_IGN:
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_process_hooks():
    atexit.register(_finalize_current, "exit")
    os.register_at_fork(after_in_child=lambda: _current is not None and _current.forget_in_fork_child())
    try:
        previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_terminate)
        _previous_handlers[signal.SIGTERM] = previous if previous is not None else signal.SIG_DFL
    except ValueError:  # not the main thread: atexit still covers normal ends
        pass
