"""One profiling session per process: the step stream, the device session, and the collections it feeds.

The variable, the ``Profiler`` API and the dynamic monitor all go through the single ``current()``
session, so a process never collects twice. Its collections (the run in ``output_path/profiler`` and
windows in ``output_path/window_{start}_{stop}/profiler``) are kept by the window registry
(``windows.py``); the session routes step records to them, starts and stops the device session and the
samplers with the recording one, and analyses each when it ends: in this process, in a separate one
(``async``), or not at all.

Which steps belong to a window is decided by time (``Collection.contains``): a step is in the window
when recording was on between the start of its work and its end. So ``start()`` anywhere in step k
takes step k whole (its ops from the start on), ``stop()`` after step m's work keeps step m and leaves
the next step out, and analysis that would miss a still-open window step waits until that step has closed.
At exit, on SIGTERM, on ``os._exit`` (within OS_EXIT_ANALYSIS_S), or on an explicit stop, whatever
was collected is flushed and analysed; a fork child never writes.
"""
from __future__ import annotations

import atexit
import dataclasses
import os
import signal
import sys
import time

from . import environment, log, records
from .collectors.steps import StepRecorder
from .windows import ASYNC, Windows

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from types import FrameType
    from typing import Any, NoReturn, Protocol

    from .collectors import SamplerThread
    from .contract.names import RunFolders
    from .contract.summary import Summary
    from .live import LiveState
    from .options import Options
    from .store import EventWriter, Record
    from .windows import Collection

    class Recorder(Protocol):
        """What a device session hands its read-back records to: the session (the recording collection's raw store)."""

        def record(self, record: Record) -> None:
            """Store one raw record (an ops batch, a collective, a memory sample) in the recording collection."""

        def flush(self) -> None:
            """Write the records stored so far, so their memory is freed before the process's memory is read again."""

    class DeviceSession(Protocol):
        """A framework's profiler for an op-collection window (frameworks/<name>/device.py): started when the recording
        collection's first step opens, stopped when its last closes (or at exit)."""

        def start(self, options: Options) -> None:
            """Start collecting with the recording collection's options (the variable's, the Profiler's or a window's)."""

        def stop(self, recorder: Recorder) -> object:
            """Stop, and hand what was collected to ``recorder.record`` (ops in column batches)."""

    class StepListener(Protocol):
        """Told of every step's boundaries; may also have ``finish(reason)``, called at the session's end."""

        def step_opened(self, n: int, start_ns: int) -> object: ...

        def step_closed(self, step: dict[str, Any]) -> object: ...

    class Analyse(Protocol):
        """A finished collection's analysis in this process (``online_analysis.analyse``, handed over by the door that
        started the session): the session collects and never imports the analysis."""

        def __call__(self, profiler_dir: str, rank: int, announce: bool, output: RunFolders) -> Summary: ...

    SignalHandler = Callable[[int, FrameType | None], Any] | int  # what signal.getsignal returns, None aside

_current: Session | None = None
STACK_SAMPLING_MS = 5  # fine enough for a flame chart of a ~10 ms step, ~1 % of one core
OS_EXIT_ANALYSIS_S = 60.0  # os._exit waits this long for the analysis, then leaves saying where the raw data is


def current() -> Session | None:
    """The process's session, or None when profiling is off."""
    return _current


def _physical_memory() -> int | None:
    """The machine's memory, for the analyses' capacities (they may run on another machine)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


class Session:
    def __init__(self, options: Options, origin: str, analyse: Analyse) -> None:
        self.options = options  # the process's: integrations read rank_id and data_process; windows bring their own
        self.origin = origin
        self.analysis = analyse  # what analyses a finished collection here (the door's, online_analysis.analyse)
        self.started_ns = time.time_ns()
        self.owner_pid = os.getpid()
        self.framework: str | None = None
        self.device: DeviceSession | None = None  # ops for the recording collection
        self.disabled = False
        self.finished = False
        self.meta: dict[str, Any] = {
            "format": records.FORMAT, "pid": self.owner_pid, "rank_id": options.rank_id, "device_id": options.device_id, "rank_size": options.world_size,
            "started_ns": self.started_ns, "host": os.uname().nodename, "python": sys.version.split()[0],
            "argv": list(sys.argv), "device_target": "CPU", "cpus": os.cpu_count(), "memory_bytes": _physical_memory(),
        }
        self.windows = Windows(self.meta, options, origin)
        self.listeners: list[StepListener] = []  # objects with step_opened(n, start_ns) / step_closed(step) (dynamic monitor, capture)
        # told the recording collection when one starts, None when it stops: integrations hook what only a window needs then
        self.recording_watchers: list[Callable[[Collection | None], object]] = []
        self.finishers: list[Callable[[], object]] = []  # integrations' last words at the end, before the last window stops
        self.background: list[subprocess.Popen[bytes]] = []  # analyses running in their own process
        self.steps = StepRecorder(self._step_opened, self._step_closed)
        self._samplers: list[SamplerThread] = []  # threads started with a window: CPU, and Python stacks when asked
        self.live: LiveState | None = None  # the rank's live record (live.py), kept from the first step on

    # -- the collections, as integrations and tests know them ------------------------------------
    @property
    def run(self) -> Collection:
        return self.windows.run

    @property
    def owner(self) -> Collection | None:
        """The collection recording now, or None."""
        return self.windows.owner

    @property
    def writer(self) -> EventWriter:
        return self.run.writer

    @property
    def profiler_dir(self) -> str:
        return self.run.profiler_dir

    def start_window(self, output_path: str, start: int, stop: int, options: Options, origin: str, analyse_mode: str | None,
                     info: dict[str, Any], at_ns: int | None = None, after_open_step: bool = False) -> Collection | None:
        """Open the window of steps START..STOP and record into it; None (nothing written) when another
        collection records. AFTER_OPEN_STEP: the opener counts the step still open as done (a step-end
        callback that runs before the framework closes the step), so the window begins with the next one."""
        c = self.windows.open_window(output_path, start, stop, options, origin, analyse_mode, info)
        if after_open_step and self.steps.current is not None:
            c.skip_steps_before(self.steps.current["n"] + 1)
        if self.start_recording(c, at_ns=at_ns):
            return c
        self.windows.abandon(c)
        return None

    # -- wiring by integrations -------------------------------------------------------------
    def attach(self, framework: str, device: DeviceSession | None = None, **meta: object) -> bool:
        """The first framework to attach owns the step stream; a second one is refused."""
        if self.framework not in (None, framework):
            return False
        self.framework = framework
        if device is not None:
            self.device = device
        self.add_meta(framework=framework, **meta)
        return True

    def add_meta(self, **values: object) -> None:
        self.meta.update(values)
        if not self.disabled:
            for c in self.windows.live():
                c.writer.add({**values, records.KIND: records.META})

    def record(self, record: Record) -> None:
        """Store one raw record (ops batch, queue sample, comm call...) in the recording collection, else the run."""
        if self.disabled:
            return
        target = self.owner or self.run
        if not target.analysed:
            target.writer.add(record)

    def flush(self) -> None:
        """Write what the recording collection holds (a device session's read-back batches), freeing their memory."""
        if self.owner is not None:
            self.owner.writer.flush()

    def writer_now(self) -> EventWriter | None:
        """The recording collection's writer, for a record that must be on disk at once (``EventWriter.write_now``); None when off."""
        target = None if self.disabled else self.owner or self.run
        return None if target is None or target.analysed else target.writer

    # -- step boundaries -------------------------------------------------------------------------
    def _step_opened(self, n: int, start_ns: int) -> None:
        if self.disabled or self.finished:
            return
        if n == 1:
            self._take_device_default_window()
        if self.windows.step_window_opens(n):
            self.start_recording(self.run, at_ns=start_ns)
        if self.listeners:
            self._tell_listeners("step_opened", n, start_ns)

    def _step_closed(self, step: dict[str, Any]) -> None:
        if self.disabled or self.finished:
            return
        if self.live is not None:
            self.live.step_closed(step)
        windows = self.windows
        run = windows.run
        if windows.owner is None and not windows.awaiting and not self.listeners and not run.analysed:
            # step timing only, once per step: the run's record is the step itself, no copy, no window to end
            step["win"] = win = run.contains(step)
            if win:
                run.collected.add(step["n"])
            run.writer.add_later(step)
            run.writer.flush_if_due(step["end"])
            return
        for c in self.windows.live():
            win = c.contains(step)
            if win:
                c.collected.add(step["n"])
            if win or c is run:  # a window's store holds its own steps
                c.writer.add_later(dict(step, win=win))
        if self.windows.step_window_ends(step["n"]):
            self.stop_recording()
        for c in self.windows.take_awaiting():
            self._analyse_now(c, "analyse")
        if self.listeners:
            self._tell_listeners("step_closed", step)
        for c in self.windows.live():
            c.writer.flush_if_due(step["end"])

    def _take_device_default_window(self) -> None:
        """The device's own default op window (a GPU's: a few steps after the warm-up, every step timed), where the
        variable chose no steps: recording every op of a long GPU job would cost what a bare profiler costs."""
        run = self.run
        choose = getattr(self.device, "default_window", None)
        if choose is None or run.explicit or not run.options.op_time or {"start_step", "stop_step", "capture"} & set(run.options.keys_given):
            return
        try:
            window = choose()
        except Exception as exc:
            log.report_error("choosing the device's op window", exc)
            return
        if window is None:
            return
        run.options = dataclasses.replace(run.options, start_step=window[0], stop_step=window[1])
        run.writer.add({records.KIND: records.META, "options": run.options.to_dict()})
        self.record({records.KIND: records.NOTE, "ts": time.time_ns(), "text": f"ops recorded for steps {window[0]}-{window[1]}, the "
                     f"default on a GPU (every step is timed); start_step / stop_step choose others (start_step 1 alone: every step)"})

    def _tell_listeners(self, event: str, *args: object) -> None:
        for listener in list(self.listeners):
            try:
                getattr(listener, event)(*args)
            except Exception as exc:
                log.report_error("a step listener", exc)

    # -- recording ---------------------------------------------------------------------------------
    def start_recording(self, collection: Collection | None = None, explicit: bool = False, at_ns: int | None = None) -> bool:
        """Record into COLLECTION (default: the run); False when another collection records already."""
        c = collection or self.run
        if self.disabled or self.finished or c.analysed:
            return False
        if self.owner is not None:
            return self.owner is c
        self.windows.begin(c, at_ns or time.time_ns(), explicit)
        self._tell_recording_watchers(c)
        self.record({records.KIND: records.WINDOW, "event": "start", "ts": time.time_ns(), "step": self.steps.completed + 1})
        device = self._wanted_device(c.options)
        if device is not None:
            began = time.time_ns()
            try:
                device.start(c.options)
            except Exception as exc:
                log.report_error("starting the device profiler", exc)
            # ours, inside the window's first step: the advisor and warm-up leave it out of the job's time
            self.record({records.KIND: records.PAUSE, "start": began, "end": time.time_ns(), "what": "profiler start-up"})
        self._start_samplers(c)
        c.writer.flush()
        return True

    def stop_recording(self) -> Collection | None:
        """Stop the recording collection (its device records still land in it); returns it."""
        c = self.owner
        if c is None:
            return None
        stopped_ns = time.time_ns()
        device = self._wanted_device(c.options)
        if device is not None:
            try:
                device.stop(self)
            except Exception as exc:
                log.report_error("stopping the device profiler", exc)
        for sampler in self._samplers:
            sampler.stop()
        self._samplers = []
        self.record({records.KIND: records.WINDOW, "event": "stop", "ts": time.time_ns(), "step": self.steps.completed})
        self.windows.end(stopped_ns)
        self._tell_recording_watchers(None)
        c.writer.flush()
        return c

    def _tell_recording_watchers(self, owner: Collection | None) -> None:
        for watcher in self.recording_watchers:
            try:
                watcher(owner)
            except Exception as exc:
                log.report_error("a recording watcher", exc)

    def _wanted_device(self, options: Options) -> DeviceSession | None:
        """The device session when OPTIONS want what it collects: ops (op_time) and, where it can, the data pipeline (data_process)."""
        return self.device if options.op_time or options.data_process else None

    def _start_samplers(self, c: Collection) -> None:
        """CPU and memory always (disk, network with host_sys); the training thread's Python stack with with_stack / profile_framework."""
        try:
            from .collectors.cpu import CpuSampler

            host_io = [kind for kind in c.options.host_sys if kind in ("disk", "network")]
            self._samplers = [CpuSampler(c.writer.queue, c.options.cpu_sampling_interval, host_io,
                                         adaptive="cpu_sampling_interval" not in c.options.keys_given)]
            if c.options.with_stack or c.options.profile_framework:
                from .collectors.stacks import StackSampler

                self._samplers.append(StackSampler(c.writer.queue, STACK_SAMPLING_MS))
            for sampler in self._samplers:
                sampler.start()
        except Exception as exc:
            log.report_error("starting CPU sampling", exc)

    # -- analysis --------------------------------------------------------------------------------
    def analyse(self, collection: Collection | None, reason: str = "analyse", mode: str | None = None) -> Summary | None:
        """Stop COLLECTION and analyse it (MODE: SYNC, ASYNC or None for raw data only; default: the
        collection's own), after the step it holds open (if any) has closed."""
        if collection is None or collection.analysed or self.disabled or os.getpid() != self.owner_pid:
            return None
        if mode is not None:
            collection.analyse_as(mode)
        if self.owner is collection:
            self.stop_recording()
        open_step = self.steps.current
        if open_step is not None and collection.contains(open_step) and not self.finished:
            self.windows.await_open_step(collection)
            return None
        return self._analyse_now(collection, reason)

    def discard(self, collection: Collection) -> None:
        """Drop a window and its folder (a periodic window the job ended inside)."""
        if self.owner is collection:
            self.stop_recording()
        self.windows.discard(collection)

    def _analyse_now(self, c: Collection, reason: str) -> Summary | None:
        if c.analysed:
            return c.summary
        if self.owner is c:
            self.stop_recording()
        end: dict[str, Any] = {records.KIND: records.END, "reason": reason, "ts": time.time_ns(), "steps": self.steps.completed}
        if c.writer.lost_steps:  # a full disk earlier: the analysis counts them (this record may reach the disk later)
            end.update(lost_steps=c.writer.lost_steps, lost_because=c.writer.lost_because)
        try:
            finished = self.windows.finish(c, end)
        except OSError:
            if c.writer.lost_steps:
                log.say(f"no analysis of {c.profiler_dir}: the raw records of {c.writer.lost_steps} steps were lost ({c.writer.lost_because})")
            raise
        if not finished:  # never stepped a model: leaves nothing, says nothing (``msprof-agent run`` says why)
            return None
        if c.analyse_mode is None:
            log.say(f"raw data kept in {c.profiler_dir} (no online analysis); analyse it with: msprof-agent analyse {c.profiler_dir}")
            return None
        if c.analyse_mode == ASYNC:
            self._analyse_in_background(c)
            return None
        summary = c.summary = self.analysis(c.profiler_dir, c.options.rank_id, c.recorded, c.folders)
        if c is self.run and self.windows.listed:
            self._list_windows(c, summary)
        return summary

    def _list_windows(self, run: Collection, summary: Summary) -> None:
        """Say where the windows went (the run's summary lists them from its raw store)."""
        if not run.recorded:
            log.say(f"step timing of {summary['steps_total']} steps (rank {run.options.rank_id}) -> {run.profiler_dir}")
        for w in self.windows.listed:
            log.say(f"  window      steps {w['steps'][0] if w['steps'] else '-'}..{w['steps'][-1] if w['steps'] else '-'} "
                    f"({w.get('trigger', 'window')}) -> {w['dir']}")

    def _analyse_in_background(self, c: Collection) -> None:
        """``python -m msprof_agent.background_analysis`` in a separate process, so training keeps its CPU
        time and the GIL; its table goes to our stderr (one line for capture-policy windows, which may be
        many). The child runs without our variables, so the hook stays off there."""
        import subprocess  # here, not at start-up: most sessions never analyse in the background

        env = {k: v for k, v in os.environ.items() if k not in environment.AGENT_STARTS}
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        try:
            self.background = [p for p in self.background if p.poll() is None]  # reap finished ones
            argv = [sys.executable, "-m", "msprof_agent.background_analysis", c.profiler_dir, str(c.options.rank_id)]
            if c.origin == "capture":
                argv.append("--quiet")
            self.background.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL))
        except OSError as exc:
            log.report_error("starting the background analysis", exc)

    def wait_for_background(self, timeout_s: float = 600) -> None:
        import subprocess

        deadline = time.monotonic() + timeout_s
        for proc in self.background:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warn_once(f"background analysis (pid {proc.pid}) still running; it finishes on its own")

    # -- the end -------------------------------------------------------------------------------
    def finalize(self, reason: str) -> Summary | None:
        """Flush, stop and analyse once; safe from atexit, a signal handler or an explicit call."""
        if self.disabled or os.getpid() != self.owner_pid or self.finished:
            return None
        self.finished = True
        self.steps.discard_open()
        for finisher in list(self.finishers):
            try:
                finisher()
            except Exception as exc:
                log.report_error("an integration at the end", exc)
        if self.live is not None:
            self.live.finish(reason)
        for listener in list(self.listeners):
            finish = getattr(listener, "finish", None)
            if finish is not None:
                try:
                    finish(reason)
                except Exception as exc:
                    log.report_error("a step listener at the end", exc)
        stopped = self.stop_recording()
        pending = self.windows.take_awaiting() + ([stopped] if stopped is not None and stopped is not self.run else [])
        for c in pending:
            self._analyse_now(c, reason)
        summary = self._analyse_now(self.run, reason)
        if reason == "exit":
            self.wait_for_background()
        return summary

    def forget_in_fork_child(self) -> None:
        """A forked worker inherits this object: it must never write, sample or analyse."""
        self.disabled = True
        self._samplers = []
        self.background = []
        self.windows.abandon_all()


def start(options: Options, origin: str, analyse: Analyse) -> Session:
    """Create the process's session (once), analysing what it collects with ANALYSE, and the exit, signal and fork
    hooks that protect its data."""
    global _current
    if _current is not None:
        return _current
    _current = Session(options, origin, analyse)
    from . import live

    _current.live = live.start(_current)
    _install_process_hooks()
    return _current


def _finalize_current(reason: str) -> None:
    session = _current
    if session is None:
        return
    try:
        session.finalize(reason)
    except Exception as exc:
        log.report_error("analysis at exit", exc)


_previous_handlers: dict[int, SignalHandler] = {}


def _on_terminate(signum: int, frame: FrameType | None) -> None:
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


_real_os_exit: Callable[[int], NoReturn] | None = None  # os._exit before _patch_os_exit replaced it


def _patch_os_exit() -> None:
    """``os._exit`` skips atexit, so a job leaving through it (launchers do, to skip a slow teardown) would
    leave raw data only: as coverage.py's patch of it, the session's process finalizes first. Fork
    children (DataLoader workers, the torch fork guard's exit) are not the owner and pass straight through."""
    global _real_os_exit
    if _real_os_exit is None:
        _real_os_exit = os._exit
        os._exit = _exit_after_analysis


def _exit_after_analysis(status: int) -> NoReturn:
    session = _current
    if session is not None and os.getpid() == session.owner_pid and not session.disabled and not session.finished:
        import threading

        watchdog = threading.Timer(OS_EXIT_ANALYSIS_S, _exit_unanalysed, (session, status))
        watchdog.daemon = True
        watchdog.start()
        _finalize_current("os._exit")
        watchdog.cancel()
    assert _real_os_exit is not None  # kept by _patch_os_exit before it put this function in its place
    _real_os_exit(status)


def _exit_unanalysed(session: Session, status: int) -> NoReturn:
    """The analysis ran past OS_EXIT_ANALYSIS_S: leave now, with the status the job chose, saying how to analyse later."""
    where = session.profiler_dir
    log.say(f"os._exit: the analysis did not finish within {OS_EXIT_ANALYSIS_S:g} s; the raw data is in {where}; "
            f"analyse it with: msprof-agent analyse {where}")
    assert _real_os_exit is not None  # the watchdog runs only once os._exit is ours
    _real_os_exit(status)


def _forget_in_fork_child() -> None:
    if _current is not None:
        _current.forget_in_fork_child()


def _install_process_hooks() -> None:
    atexit.register(_finalize_current, "exit")
    _patch_os_exit()
    os.register_at_fork(after_in_child=_forget_in_fork_child)
    try:
        previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, _on_terminate)
        _previous_handlers[signal.SIGTERM] = previous if previous is not None else signal.SIG_DFL
    except ValueError:  # not the main thread: atexit still covers normal ends
        pass
