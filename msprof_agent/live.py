"""The rank's live state while the job runs: ``raw/rank_{rank}/live.json``, rewritten about once a second.

``msprof-agent top``, the viewer and the other ranks read it to see a running job: steps done, the recent
steps' times and their split (data wait, before the forward, forward and backward, after the backward, in
collectives), the heap in use, the collective each group entered last, and, once a step has been open long, the
training thread's Python stack. The findings are drawn from it by the readers (``analysis/live.py``).

The training thread only appends one tuple a step (``step_closed``) and notes collectives (the torch
integration's entries); a daemon thread, started at the first step's close (never at import: a thread
alive at ``fork()`` is a hazard), does the rest: the heap sample, the atomic write, the hang watch (no rank has
finished a step for ``hang_after_s``: said once a stall on stderr by the lowest rank still writing its record, the job left alone)
and the job's all-rank capture request (``capture.AllRankCapture`` follows it). The thread's CPU time is
kept in the record (``cost_ms``); ``bench/live_record.py`` measures what it costs a step.
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import time

from . import environment, log
from .contract import live as contract
from .contract import names

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    from .collectors.heap import HeapReader
    from .collectors.steps import StepRecorder
    from .options import Options
    from .windows import Collection

    class Watched(Protocol):
        """What the live record reads of its session (the session holds the record: it is told each step's close)."""

        meta: dict[str, Any]
        options: Options
        framework: str | None
        started_ns: int
        steps: StepRecorder

        @property
        def owner(self) -> Collection | None: ...

        @property
        def run(self) -> Collection: ...

        @property
        def profiler_dir(self) -> str: ...

INTERVAL_S = 1.0
KEPT_STEPS = 128  # recent steps kept (and written); the rules read them
KEPT_MEMORY = 128  # heap samples kept, one a tick at most
ADVICE_META = ("data_settings", "cpus", "memory_bytes")  # the run's settings the readers' rules word their advice with


def hang_after_s() -> float | None:
    """The hang threshold the user set (``MSPROF_AGENT_HANG_S``; 0 turns the watch off), None for the job's own default."""
    text = os.environ.get(environment.HANG_AFTER_S, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        log.warn_once(f"{environment.HANG_AFTER_S}={text!r}: accepted: seconds (a number, 0 for no hang watch); the default is used")
        return None
    return value if value >= 0 else None


class LiveState:
    """The live record's data (filled by the training thread) and its writer thread."""

    def __init__(self, session: Watched) -> None:
        self.session = session
        options = session.options
        self.rank = options.rank_id
        self.path = os.path.join(session.profiler_dir, names.RAW_FOLDER, names.RAW_RANK_FOLDER.format(rank=self.rank), names.LIVE_RECORD)
        self.steps: collections.deque[tuple[int, int, int, int, int | None, int | None, int]] = collections.deque(maxlen=KEPT_STEPS)
        self.entered: dict[str, tuple[int, str, int, list[int] | None]] = {}  # group -> (seq, name, step, its ranks)
        self.memory: collections.deque[tuple[int, int]] = collections.deque(maxlen=KEPT_MEMORY)  # (ts, heap bytes in use)
        self.device_steps: collections.deque[tuple[int, float]] = collections.deque(maxlen=KEPT_STEPS)  # (n, ms on the GPU's clock)
        self.hang_after_s = hang_after_s()
        self.on_capture_request: Callable[[dict[str, Any]], object] | None = None  # capture.AllRankCapture.follow
        self.capture: dict[str, Any] | None = None  # the all-rank window this rank follows, as the record shows it
        self.cost_ns = 0  # the writer thread's CPU time so far
        self.ticks = 0
        self._comm_ns = 0  # time in collectives in the open step
        self._heap: HeapReader | None = None  # made in the thread: ctypes is not loaded at start-up
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._request_stamp: tuple[int, int] | None = None
        self._said: set[int] = set()

    # -- the training thread ---------------------------------------------------------------------------
    def step_closed(self, step: dict[str, Any]) -> None:
        self.steps.append((step["n"], step["start"], step["end"], step["wait"], step["fp"], step["bp"], self._comm_ns))
        self._comm_ns = 0
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="msprof-agent-live", daemon=True)
            self._thread.start()

    def device_step(self, n: int, ns: int) -> None:
        """Step N's time on the device (CUDA events, read once completed: a step or two after its close)."""
        self.device_steps.append((n, round(ns / 1e6, 3)))

    def collective_entered(self, group: str, seq: int, name: str, step: int, ranks: list[int] | None) -> None:
        self.entered[group] = (seq, name, step, ranks)

    def collective_left(self, ns: int) -> None:
        self._comm_ns += ns

    # -- the writer thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            self.tick()

    def tick(self, state: str = "running", reason: str | None = None) -> dict[str, Any] | None:
        """One update: the record written, a hang said, a capture request followed. Never raises."""
        spent = time.thread_time_ns()
        try:
            return self._tick(state, reason)
        except Exception as exc:
            log.report_error("the live record", exc)
            return None
        finally:
            self.cost_ns += time.thread_time_ns() - spent
            self.ticks += 1

    def _tick(self, state: str, reason: str | None) -> dict[str, Any]:
        from .writers import write_json

        now = time.time_ns()
        steps = list(self.steps)
        if self._heap is None:
            from .collectors.heap import HeapReader

            self._heap = HeapReader()
        heap = self._heap.read()
        if heap is not None:
            self.memory.append((now, heap.bytes))
        meta = self.session.meta
        threshold = self.hang_after_s if self.hang_after_s is not None else contract.default_hang_after_s(steps)
        open_s = (now - steps[-1][2]) / 1e9 if steps else 0.0
        record: dict[str, Any] = {
            "format": contract.FORMAT, "rank": self.rank, "rank_size": self.session.options.world_size, "host": meta.get("host"),
            "pid": os.getpid(), "framework": self.session.framework, "state": state, "started_ns": self.session.started_ns, "updated_ns": now,
            "steps_done": self.session.steps.completed, "hang_after_s": threshold, "cost_ms": round(self.cost_ns / 1e6, 3),
            "ticks": self.ticks, "steps": contract.step_columns(steps), "memory": [list(m) for m in self.memory],
            "collectives": {g: {"seq": s, "name": n, "step": st, "ranks": r} for g, (s, n, st, r) in list(self.entered.items())},
            "meta": {key: meta[key] for key in ADVICE_META if key in meta}, "recording": self._recording(),
        }
        if self.device_steps:
            timed = list(self.device_steps)
            record["device_steps"] = {"n": [n for n, _ in timed], "ms": [ms for _, ms in timed]}
        if reason:
            record["end_reason"] = reason
        if self.capture:
            record["capture"] = self.capture
        if state == "running" and threshold and open_s > max(1.0, contract.STACK_AFTER_SHARE * threshold):
            frame = sys._current_frames().get(threading.main_thread().ident or 0)
            if frame is not None:
                from .collectors.stacks import stack_of

                record["stack"] = stack_of(frame)
                del frame
        write_json(self.path, record)
        if state == "running":
            if threshold and open_s > threshold:
                self._watch_hang(now)
            self._follow_capture_request()
        return record

    def _recording(self) -> str | None:
        """What records ops now: "run" (the run's own window, every step), "window", or None (step timing only)."""
        owner = self.session.owner
        return None if owner is None else "run" if owner is self.session.run else "window"

    def _watch_hang(self, now: int) -> None:
        """Every rank's step has stalled: the lowest rank still writing its record says who is missing, who waits where."""
        hang = contract.hang(contract.job_records(names.cluster_dir(self.session.profiler_dir)), now)
        if not hang:
            return
        # One stall (since the last step end) is said once, by the lowest rank still writing its record: the
        # ranks catching up after it move the collective and who waits in it, not who speaks.
        if min(hang["fresh"] or [self.rank]) != self.rank or hang["since_ns"] in self._said:
            return
        self._said.add(hang["since_ns"])
        for line in contract.hang_lines(hang):
            log.say(line)

    def _follow_capture_request(self) -> None:
        if self.on_capture_request is None:
            return
        path = names.live_capture_file(self.session.profiler_dir)
        try:
            info = os.stat(path)
        except OSError:
            return
        stamp = (info.st_mtime_ns, info.st_size)
        if stamp == self._request_stamp:
            return
        self._request_stamp = stamp
        import orjson

        try:
            with open(path, "rb") as handle:
                request = orjson.loads(handle.read())
        except (OSError, ValueError):
            self._request_stamp = None  # half a file from another writer: read it again next time
            return
        self.on_capture_request(request)

    def request_capture(self, steps: int, info: dict[str, Any]) -> dict[str, Any] | None:
        """Ask every rank of the job to record op detail for STEPS steps from a step all of them will reach (this one's
        lead, ``contract.live.capture_start``); None when a request is still pending or recording."""
        from .writers import write_json

        path = names.live_capture_file(self.session.profiler_dir)
        done = self.session.steps.completed
        if contract.pending_request(path, done):
            return None
        start = contract.capture_start(done, contract.recent_step_s([(end - begin) / 1e6 for _, begin, end, *_ in list(self.steps)]))
        now = time.time_ns()
        request = {"id": f"{self.rank}-{now}", "at_ns": now, "start": start, "steps": steps, "by": f"rank {self.rank}", **info}
        write_json(path, request)
        if self.on_capture_request is not None:
            self.on_capture_request(request)
        return request

    def finish(self, reason: str) -> None:
        """The job ends: the thread stops and the record says so."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * INTERVAL_S)
        if thread is not None:
            self.tick("ended", reason)


def start(session: Watched) -> LiveState | None:
    """The session's live state (None if it cannot be kept); its thread starts at the first step's close."""
    try:
        return LiveState(session)
    except Exception as exc:
        log.report_error("starting the live record", exc)
        return None
