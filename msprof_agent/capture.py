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
"""
from __future__ import annotations

import bisect
import collections
import os

from . import log
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


def attach(session: Session) -> CapturePolicy | None:
    """Run the session's capture policy (from the ``capture`` option) on its step boundaries."""
    policy = session.run.options.capture
    if policy is None:
        return None
    session.run.claim()  # the policy's windows replace the run's own step window
    listener = CapturePolicy(session, policy)
    session.listeners.append(listener)
    return listener
