"""The ``capture`` option: op-collection windows chosen while the job runs, instead of one start_step..stop_step.

Set with the variable: ``MS_PROFILER_OPTIONS='{"start": true, "capture": {"every": 20, "steps": 3}}'``.

Step timing is always on (every step goes into the run's store); a policy opens short windows, each
collected and analysed into ``output_path/window_{start}_{stop}/profiler`` and listed, with what
triggered it, under ``"windows"`` in the run's ``summary_{rank}.json``:

- periodic ``{"every": 20, "steps": 3, "first": 20}``: windows 20-22, 40-42, 60-62, ...; a window the
  job ends inside is dropped.
- slow step ``{"slow_step": 1.5, "steps": 3, "max_windows": 5}``: a step slower than 1.5x the median
  of the steps before it (after ``warmup`` steps; never window steps, nor the step after a window,
  which pays for the window's stop) triggers the next 3 steps; the
  window's store also keeps the slow step's own host record (it ran before anything was collecting).

``max_windows`` and ``max_trace_mb`` (raw data of all windows together) bound the cost: once spent,
no further window opens, which is said once. Windows are analysed in a separate process, so the
training loop does not wait for them.

All ranks at once (``AllRankCapture``): in a job of several ranks a slow step asks every rank for the
window instead, through the job's request file (``contract.names.live_capture_file``), as
``msprof-agent capture DIR --steps 5`` does from outside: the window starts at a step all ranks will reach
(``contract.live.capture_start``: a few seconds of steps ahead), each rank's live thread reads the request
within a second, and each opens the same steps, analysed into the same ``window_{start}_{stop}`` (a job whose
ranks share an output path gets the window's cluster summary comparing them rank by rank).
"""
from __future__ import annotations

import bisect
import collections
import os

from . import log
from .contract import names
from .windows import ASYNC

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    from typing import Any

    from .session import Session
    from .windows import Collection

    Step = dict[str, Any]  # a closed step's record (records.Step), as the session hands it to listeners

HISTORY = 101  # steps the running median looks back on


class CapturePolicy:
    """A session listener: opens a window at a step's opening, analyses it when its last step closes."""

    def __init__(self, session: Session, policy: dict[str, Any]) -> None:
        self.session = session
        self.policy = policy
        self.kind = "periodic" if "every" in policy else "slow_step"
        self.active: tuple[int, Collection] | None = None  # (stop step, collection)
        self.opened = 0
        self.spent_bytes = 0
        self._finished: list[Collection] = []  # collections whose raw size counts against max_trace_mb
        self._history: collections.deque[int] = collections.deque()  # durations (ns) of ordinary steps, in order
        self._sorted: list[int] = []  # the same, sorted, for the median
        self._trigger: tuple[Step, int, int] | None = None  # (slow step record, its duration, the median it was compared with)
        self._skip: int | None = None  # the step after a window

    # -- session listener -------------------------------------------------------------------------------
    def step_opened(self, n: int, start_ns: int) -> None:
        if self.active is not None:
            return
        if self.kind == "periodic":
            first, every = self.policy["first"], self.policy["every"]
            if n >= first and (n - first) % every == 0:
                self._open(n, start_ns, {"trigger": "periodic"})
        elif self._trigger is not None:
            step, duration, median = self._trigger
            self._trigger = None
            info = {"trigger": "slow_step", "slow_step": step["n"], "slow_ms": round(duration / 1e6, 3),
                    "median_ms": round(median / 1e6, 3), "factor": self.policy["slow_step"]}
            live = self.session.live
            if live is not None and self.session.options.world_size > 1:  # every rank records the same steps
                if self._within_budget():  # a request another rank made first counts too: this rank records it
                    live.request_capture(self.policy["steps"], dict(info, rank=self.session.options.rank_id))
                    self.opened += 1
                return
            collection = self._open(n, start_ns, info)
            if collection is not None:
                collection.writer.add(dict(step, win=False))

    def step_closed(self, step: Step) -> None:
        if self.active is not None:
            stop, collection = self.active
            if step["n"] >= stop:
                self.active = None
                self._skip = step["n"] + 1  # the next step pays for the stop: it is not judged
                self._finished.append(collection)
                self.session.analyse(collection, reason=f"{self.kind} window end")
            return
        if self.session.owner is not None:  # a window's step (an all-rank one's) pays for the recording: not judged
            self._skip = step["n"] + 1
            return
        if self.kind == "slow_step" and step["n"] > 1 and step["n"] != self._skip:  # step 1 carries start-up work
            self._observe(step)

    def finish(self, _reason: str) -> None:
        """At the end of the job: a periodic window cut short is dropped (the run's step timing has those steps)."""
        if self.active is not None and self.kind == "periodic":
            self.session.discard(self.active[1])
            self.active = None

    # -- slow steps -----------------------------------------------------------------------------------------
    def _observe(self, step: Step) -> None:
        duration = step["end"] - step["start"]
        if len(self._history) >= self.policy["warmup"]:
            median = self._sorted[len(self._sorted) // 2]
            if duration > self.policy["slow_step"] * median:
                self._trigger = (step, duration, median)
                return  # a slow step stays out of the median it is judged against
        self._history.append(duration)
        bisect.insort(self._sorted, duration)
        if len(self._history) > HISTORY:
            old = self._history.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    # -- windows ------------------------------------------------------------------------------------------------
    def _open(self, n: int, start_ns: int, info: dict[str, Any]) -> Collection | None:
        if not self._within_budget():
            return None
        stop = n + self.policy["steps"] - 1
        base = self.session.run.options
        collection = self.session.start_window(base.output_path, n, stop, base, "capture", ASYNC, info, at_ns=start_ns)
        if collection is None:
            log.warn_once(f"capture: window {n}..{stop} skipped, another collection is recording", key=("capture-busy", n))
            return None
        self.active = (stop, collection)
        self.opened += 1
        return collection

    def _within_budget(self) -> bool:
        limit = self.policy["max_windows"]
        if limit is not None and self.opened >= limit:
            log.warn_once(f"capture: max_windows {limit} reached; no further windows", key="capture-max-windows")
            return False
        budget = self.policy["max_trace_mb"]
        if budget is None:
            return True
        for collection in self._finished:
            self.spent_bytes += _tree_bytes(collection.folder)
        self._finished = []
        if self.spent_bytes >= budget * (1 << 20):
            log.warn_once(f"capture: max_trace_mb {budget:g} reached ({self.spent_bytes / (1 << 20):.1f} MB in {self.opened} windows); "
                          "no further windows", key="capture-max-trace")
            return False
        return True


def _tree_bytes(path: str) -> int:
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                pass
    return total


class AllRankCapture:
    """Follows the job's all-rank capture requests (``live.LiveState`` hands each one over, from its thread): a
    session listener only from a request's arrival to its window's end, so steps keep their fast path otherwise."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.request: dict[str, Any] | None = None  # the request armed, until its window ends
        self.active: tuple[int, Collection] | None = None
        self.seen: set[str] = set()

    def follow(self, request: dict[str, Any]) -> None:
        live = self.session.live
        key = str(request.get("id"))
        if key in self.seen or self.active is not None or live is None:
            return
        self.seen.add(key)
        if int(request.get("at_ns") or 0) < self.session.started_ns:  # an earlier job's request left in the folder
            return
        start, stop = int(request["start"]), int(request["start"]) + int(request["steps"]) - 1
        live.capture = {"id": key, "steps": [start, stop], "by": request.get("by"), "state": "armed"}
        if start <= self.session.steps.completed + 1 - (self.session.steps.current is None):
            live.capture["state"] = "missed"
            log.warn_once(f"capture: the all-rank window {start}..{stop} was asked for after this rank had begun step {start}; "
                          "this rank records nothing", key=("capture-missed", key))
            return
        self.request = request
        if self not in self.session.listeners:
            self.session.listeners.append(self)

    def step_opened(self, n: int, start_ns: int) -> None:
        request = self.request
        if request is None or self.active is not None or n < int(request["start"]):
            return
        start, stop = n, int(request["start"]) + int(request["steps"]) - 1
        if n > int(request["start"]):  # armed too late after all: the window would not be the other ranks' steps
            self._done("missed")
            return
        base = self.session.run.options
        info = {"trigger": "all_ranks", "requested_by": request.get("by"), "request": request.get("id")}
        info.update({k: request[k] for k in ("slow_step", "slow_ms", "median_ms", "rank") if k in request})
        collection = self.session.start_window(base.output_path, start, stop, base, "capture", ASYNC, info, at_ns=start_ns)
        if collection is None:
            log.warn_once(f"capture: all-rank window {start}..{stop} skipped, another collection is recording", key=("capture-busy", start))
            self._done("skipped")
            return
        self.active = (stop, collection)
        self._state("recording")

    def step_closed(self, step: Step) -> None:
        if self.active is not None and step["n"] >= self.active[0]:
            collection = self.active[1]
            self.active = None
            self._done("done")
            self.session.analyse(collection, reason="all-rank capture end")

    def _state(self, state: str) -> None:
        live = self.session.live
        if live is not None and live.capture is not None:
            live.capture = dict(live.capture, state=state)

    def _done(self, state: str) -> None:
        self._state(state)
        self.request = None
        if self in self.session.listeners:
            self.session.listeners.remove(self)


def follow_requests(session: Session) -> AllRankCapture | None:
    """Let the session's live record hand the job's all-rank capture requests to a follower."""
    if session.live is None:
        return None
    follower = AllRankCapture(session)
    session.live.on_capture_request = follower.follow
    return follower


def request_from_outside(path: str, steps: int) -> int:
    """``msprof-agent capture PATH --steps N``: ask every rank of the running job under PATH for the same N steps."""
    import time

    from .contract import live as contract
    from .writers import write_json

    if steps < 1:
        print(f"msprof-agent capture: --steps {steps}: accepted: 1 or more")
        return 2
    now = time.time_ns()
    running = [r for r in contract.job_records(path) if contract.state_of(r, now) == "running"]
    if not running:
        print(f"msprof-agent capture: no running job under {path} (no fresh live record, raw/rank_*/live.json)")
        return 2
    if all(r.get("recording") == "run" for r in running):
        print(f"msprof-agent capture: the job under {path} records the ops of every step already (its run's own window); "
              "a job leaves op recording to captures under a capture policy (\"capture\": {...})")
        return 1
    lead = max(running, key=lambda r: r.get("steps_done", 0))
    done = int(lead.get("steps_done", 0))
    profiler_dir = os.path.dirname(os.path.dirname(os.path.dirname(lead["path"])))
    request_path = names.live_capture_file(profiler_dir)
    pending = contract.read_request(request_path)
    if pending is not None and contract.pending_request(request_path, done):
        print(f"msprof-agent capture: steps {pending['start']}..{pending['start'] + pending['steps'] - 1} are already asked for "
              f"({pending.get('by')}); try again after them")
        return 1
    start = contract.capture_start(done, contract.recent_step_s((lead.get("steps") or {}).get("ms") or []))
    stop = start + steps - 1
    write_json(request_path, {"id": f"cli-{now}", "at_ns": now, "start": start, "steps": steps, "by": "msprof-agent capture"})
    window = os.path.join(os.path.dirname(profiler_dir), names.window_name(start, stop), names.RUN_FOLDER)
    print(f"msprof-agent capture: steps {start}..{stop} on every rank ({len(running)} running, the furthest at step {done}) -> {window}")
    return 0


def attach(session: Session) -> CapturePolicy | None:
    """Run the session's capture policy (from the ``capture`` option) on its step boundaries."""
    policy = session.run.options.capture
    if policy is None:
        return None
    session.run.claim()  # the policy's windows replace the run's own step window
    listener = CapturePolicy(session, policy)
    session.listeners.append(listener)
    return listener
