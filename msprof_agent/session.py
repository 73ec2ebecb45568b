"""One profiling session per process: the step stream, the device session, and the collections it feeds.

The variable, the ``Profiler`` API and the dynamic monitor all go through the single ``current()``
session, so a process never collects twice: only one collection records at a time (``owner``).

- The *run* (variable, API, or the dynamic monitor's) is ``output_path/profiler``: it receives every
  step record (always-on step timing) and is analysed at its stop, at ``analyse()``, or at exit; its
  summary lists the windows below under ``"windows"``.
- A *window* (dynamic monitor, capture policy) is its own collection in its own folder
  (``output_path/window_{start}_{stop}/profiler``), holding the records of its window only,
  analysed there when it stops: in this process, in a separate one (``async``), or not at all.

Which steps belong to a window is decided by time: a step is in the window when recording was on
at its start (its host-side forward start where the integration marks one, else its opening). So
``start()`` called after a step's compute leaves that step out, ``stop()`` called after it keeps it in,
and analysis that would miss a still-open window step waits until that step has closed.
At exit, on SIGTERM, or on an explicit stop, whatever was collected is flushed and analysed; a fork
child never writes.
"""
import atexit
import copy
import os
import signal
import sys
import time
from dataclasses import fields

from . import log
from .collectors.steps import StepRecorder
from .store import EventWriter

IDLE, RECORDING, STOPPED, ANALYSED = "idle", "recording", "stopped", "analysed"
SYNC, ASYNC = "sync", "async"
_PROCESS_KEYS = ("rank_id", "device_id", "world_size", "fp_start", "bp_end")

_current = None
STACK_SAMPLING_MS = 5  # fine enough for a flame chart of a ~10 ms step, ~1 % of one core


def current():
    """The process's session, or None when profiling is off."""
    return _current


class Collection:
    """One output folder: its raw store, the intervals it recorded, and how it is analysed."""

    def __init__(self, meta, options, profiler_dir, origin, analyse_mode=SYNC):
        self.options = options
        self.profiler_dir = profiler_dir
        self.origin = origin
        self.analyse_mode = analyse_mode  # SYNC, ASYNC (a separate process) or None (raw data only)
        self.state = IDLE
        self.explicit = False  # an API call drives the window, not the variable's steps
        self.intervals = []  # [start_ns, stop_ns or None] per recording
        self.summary = None
        self.info = {}  # what the owner wants remembered (trigger, steps) for listings
        self.collected = set()  # numbers of the window's steps
        self.writer = EventWriter(profiler_dir, options.rank_id, time.time_ns())
        self.writer.add(dict(meta, k="meta", origin=origin, options=options.to_dict()))

    def contains(self, step):
        """True when recording was on at the step's start (forward start if marked, else opening)."""
        if not self.intervals:  # the run between windows: every step closes through here
            return False
        anchor = step.get("fp") or step["start"]
        return any(start <= anchor and (stop is None or anchor < stop) for start, stop in self.intervals)


def _physical_memory():
    """The machine's memory, for the analyses' capacities (they may run on another machine)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


class Session:
    def __init__(self, options, origin):
        self.options = options  # live: device sessions read it at start(); a window applies its own keys
        self._base_options = copy.copy(options)
        self.origin = origin
        self.started_ns = time.time_ns()
        self.owner_pid = os.getpid()
        self.framework = None
        self.device = None
        self.disabled = False
        self.finished = False
        self.meta = {
            "pid": self.owner_pid, "rank_id": options.rank_id, "device_id": options.device_id, "rank_size": options.world_size,
            "started_ns": self.started_ns, "host": os.uname().nodename, "python": sys.version.split()[0],
            "argv": list(sys.argv), "device_target": "CPU", "cpus": os.cpu_count(), "memory_bytes": _physical_memory(),
        }
        self.run = Collection(self.meta, options, os.path.join(options.output_path, "profiler"), origin)
        self.owner = None  # the collection recording now
        self.listeners = []  # objects with step_opened(n, start_ns) / step_closed(step) (dynamic monitor, policies)
        self.background = []  # analyses running in their own process
        self._awaiting = []  # stopped collections analysed once the open step they hold closes
        self.window_log = []  # windows collected into their own folders, for the run's summary
        self.steps = StepRecorder(self._step_opened, self._step_closed)
        self._samplers = []  # threads started with a window: CPU, and Python stacks when asked

    # -- the run, as integrations and tests know it ---------------------------------------------
    @property
    def writer(self):
        return self.run.writer

    @property
    def profiler_dir(self):
        return self.run.profiler_dir

    def open_run(self, options, origin):
        """A new run in a new folder (the API after an earlier run was analysed, or on a dynamic-only session)."""
        if self.run.state != ANALYSED:
            self.run.state = ANALYSED
            self.run.writer.close()
        self.run = Collection(self.meta, options, os.path.join(options.output_path, "profiler"), origin)
        return self.run

    def open_window(self, options, profiler_dir, origin, analyse_mode):
        """A collection of its own for one window; start it with ``start_recording(window)``."""
        return Collection(self.meta, options, profiler_dir, origin, analyse_mode)

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

    def _live(self):
        if self.owner is None and not self._awaiting:  # step timing only: the common case, once per step
            return [self.run] if self.run.state != ANALYSED else []
        out = []
        for c in [self.run, self.owner] + self._awaiting:
            if c is not None and c.state != ANALYSED and c not in out:
                out.append(c)
        return out

    def add_meta(self, **values):
        self.meta.update(values)
        if not self.disabled:
            for c in self._live():
                c.writer.add(dict(values, k="meta"))

    def record(self, record):
        """Store one raw record (ops batch, queue sample, comm call...) in the recording collection, else the run."""
        if self.disabled:
            return
        target = self.owner or self.run
        if target.state != ANALYSED:
            target.writer.add(record)

    # -- step boundaries -------------------------------------------------------------------------
    def _step_opened(self, n, start_ns):
        if self.disabled or self.finished:
            return
        run = self.run
        if run.state == IDLE and not run.explicit and run.options.start and self.owner is None:
            stop = run.options.stop_step
            if n >= run.options.start_step and (stop is None or n <= stop):
                self.start_recording(run, at_ns=start_ns)
        for listener in list(self.listeners):
            try:
                listener.step_opened(n, start_ns)
            except Exception as exc:
                log.report_error("a step listener", exc)

    def _step_closed(self, step):
        if self.disabled or self.finished:
            return
        for c in self._live():
            win = c.contains(step)
            if win:
                c.collected.add(step["n"])
            if win or c is self.run:  # a window's store holds its own steps
                c.writer.add_later(dict(step, win=win))
        run = self.run
        if self.owner is run and not run.explicit and run.options.stop_step is not None \
                and step["n"] >= run.options.stop_step:
            self.stop_recording()
        for c in list(self._awaiting):
            self._awaiting.remove(c)
            self._analyse_now(c, "analyse")
        for listener in list(self.listeners):
            try:
                listener.step_closed(step)
            except Exception as exc:
                log.report_error("a step listener", exc)
        for c in self._live():
            c.writer.flush_if_due(step["end"])

    # -- the window ----------------------------------------------------------------------------
    def start_recording(self, collection=None, explicit=False, at_ns=None):
        """Record into COLLECTION (default: the run); False when another collection records already."""
        c = collection or self.run
        if self.disabled or self.finished or c is None or c.state == ANALYSED:
            return False
        if self.owner is not None:
            return self.owner is c
        c.explicit = c.explicit or explicit
        c.state = RECORDING
        c.intervals.append([at_ns or time.time_ns(), None])
        self.owner = c
        self._use_options(c.options)
        self.record({"k": "window", "event": "start", "ts": time.time_ns(), "step": self.steps.completed + 1})
        if self._device_wanted:
            try:
                self.device.start()
            except Exception as exc:
                log.report_error("starting the device profiler", exc)
        self._start_sampler(c.writer)
        c.writer.flush()
        return True

    def stop_recording(self):
        """Stop the recording collection (its device records still land in it); returns it."""
        c = self.owner
        if c is None:
            return None
        c.intervals[-1][1] = time.time_ns()
        if self._device_wanted:
            try:
                self.device.stop(self)
            except Exception as exc:
                log.report_error("stopping the device profiler", exc)
        for sampler in self._samplers:
            sampler.stop()
        self._samplers = []
        self.record({"k": "window", "event": "stop", "ts": time.time_ns(), "step": self.steps.completed})
        self.owner = None
        c.state = STOPPED
        self._use_options(self._base_options)
        c.writer.flush()
        return c

    def _use_options(self, options):
        """Device sessions hold ``self.options``: a window's settings are copied into it, then restored."""
        if options is self.options:
            return
        for f in fields(options):
            if f.name not in _PROCESS_KEYS:
                setattr(self.options, f.name, getattr(options, f.name))

    @property
    def _device_wanted(self):
        """The device session collects ops (op_time) and, where it can, the data pipeline (data_process)."""
        return self.device is not None and (self.options.op_time or self.options.data_process)

    def _start_sampler(self, writer):
        """CPU and memory always; the training thread's Python stack with with_stack / profile_framework."""
        try:
            from .collectors.cpu import CpuSampler

            self._samplers = [CpuSampler(writer.queue, self.options.cpu_sampling_interval)]
            if self.options.with_stack or self.options.profile_framework:
                from .collectors.stacks import StackSampler

                self._samplers.append(StackSampler(writer.queue, STACK_SAMPLING_MS))
            for sampler in self._samplers:
                sampler.start()
        except Exception as exc:
            log.report_error("starting CPU sampling", exc)

    # -- analysis --------------------------------------------------------------------------------
    def analyse(self, collection, reason="analyse"):
        """Stop COLLECTION and analyse it, after the step it holds open (if any) has closed."""
        if collection is None or collection.state == ANALYSED or self.disabled or os.getpid() != self.owner_pid:
            return None
        if self.owner is collection:
            self.stop_recording()
        open_step = self.steps.current
        if open_step is not None and collection.contains(open_step) and not self.finished:
            if collection not in self._awaiting:
                self._awaiting.append(collection)
            return None
        return self._analyse_now(collection, reason)

    def discard(self, collection):
        """Drop a window and its folder (a periodic window the job ended inside)."""
        if self.owner is collection:
            self.stop_recording()
        collection.state = ANALYSED
        collection.writer.close()
        import shutil

        shutil.rmtree(os.path.dirname(collection.profiler_dir), ignore_errors=True)

    def _analyse_now(self, c, reason):
        if c.state == ANALYSED:
            return c.summary
        if self.owner is c:
            self.stop_recording()
        c.state = ANALYSED
        listing = self.window_log if c is self.run else None
        if not c.intervals and not listing:
            c.writer.abandon()
            if c is self.run and self.framework is not None and not self.steps.completed and c.options.start:
                log.say(f"no step trace: no {self.framework} training or inference step was seen (no optimizer step, training-data "
                        "fetch, compiled step function or model forward), so no window opened; run the model through an "
                        "nn.Module / Cell, or profile a region with msprof_agent.Profiler start() / stop()")
            return None
        c.writer.add({"k": "end", "reason": reason, "ts": time.time_ns(), "steps": self.steps.completed})
        c.writer.close()
        if c is not self.run:
            entry = dict(c.info, dir=os.path.dirname(c.profiler_dir), analyse_mode=c.analyse_mode, steps=sorted(c.collected))
            self.window_log.append(entry)
            self.run.writer.add(dict(entry, k="window", event="collected"))  # the run's summary lists it, offline too
        if c.analyse_mode is None:
            log.say(f"raw data kept in {c.profiler_dir} (no online analysis); analyse it with: msprof-agent analyse {c.profiler_dir}")
            return None
        if c.analyse_mode == ASYNC:
            self._analyse_in_background(c)
            return None
        from .analysis import analyse_rank

        c.summary = analyse_rank(c.profiler_dir, c.options.rank_id, announce=bool(c.intervals))
        if listing:
            self._list_windows(c)
        return c.summary

    def _list_windows(self, run):
        """Say where the windows went (the run's summary lists them from its raw store)."""
        if not run.intervals:
            log.say(f"step timing of {run.summary['steps_total']} steps (rank {run.options.rank_id}) -> {run.profiler_dir}")
        for w in self.window_log:
            log.say(f"  window      steps {w['steps'][0] if w['steps'] else '-'}..{w['steps'][-1] if w['steps'] else '-'} "
                    f"({w.get('trigger', 'window')}) -> {w['dir']}")

    def _analyse_in_background(self, c):
        """A separate process, so training keeps its CPU time and the GIL; its table goes to our stderr
        (one line for capture-policy windows, which may be many)."""
        code = ("import os, sys; os.nice(5); from msprof_agent import log; from msprof_agent.analysis import analyse_rank; "
                "loud = sys.argv[3] == '1'; s = analyse_rank(sys.argv[1], int(sys.argv[2]), announce=loud); "
                "loud or log.say(f\"analysed steps {s['step_range']} -> {s['profiler_dir']}\")")
        import subprocess  # here, not at start-up: most sessions never analyse in the background

        env = {k: v for k, v in os.environ.items() if k not in ("MS_PROFILER_OPTIONS", "MSPROF_DYNAMIC_CFG")}
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        try:
            self.background = [p for p in self.background if p.poll() is None]  # reap finished ones
            argv = [sys.executable, "-c", code, c.profiler_dir, str(c.options.rank_id), "0" if c.origin == "capture" else "1"]
            self.background.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL))
        except OSError as exc:
            log.report_error("starting the background analysis", exc)

    def wait_for_background(self, timeout_s=600):
        import subprocess

        deadline = time.monotonic() + timeout_s
        for proc in self.background:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warn_once(f"background analysis (pid {proc.pid}) still running; it finishes on its own")

    # -- the end -------------------------------------------------------------------------------
    def finalize(self, reason):
        """Flush, stop and analyse once; safe from atexit, a signal handler or an explicit call."""
        if self.disabled or os.getpid() != self.owner_pid or self.finished:
            return None
        self.finished = True
        self.steps.discard_open()
        for listener in list(self.listeners):
            finish = getattr(listener, "finish", None)
            if finish is not None:
                try:
                    finish(reason)
                except Exception as exc:
                    log.report_error("a step listener at the end", exc)
        stopped = self.stop_recording()
        pending = list(self._awaiting) + ([stopped] if stopped is not None and stopped is not self.run else [])
        self._awaiting = []
        for c in pending:
            self._analyse_now(c, reason)
        summary = self._analyse_now(self.run, reason)
        if reason == "exit":
            self.wait_for_background()
        return summary

    def forget_in_fork_child(self):
        """A forked worker inherits this object: it must never write, sample or analyse."""
        self.disabled = True
        self._samplers = []
        self.background = []
        for c in [self.run, self.owner] + self._awaiting:
            if c is not None:
                c.writer.abandon()


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
