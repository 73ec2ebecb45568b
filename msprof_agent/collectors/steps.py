"""Step boundaries as the framework integrations report them, on one wall clock (``time.time_ns``).

A step runs from the end of the previous step (or the first sign of training) to its boundary,
the end of its work: the end of ``optimizer.step`` in PyTorch, the step-end callback, the optimizer
cell's or the compiled step function's return in MindSpore (see the integrations). Everything
between two boundaries belongs to the later step, so the stages always add up to the step time.
Integrations call ``open`` / ``data_wait`` / ``mark_fp`` / ``mark_bp`` / ``close``; the recorder
knows nothing about frameworks.
"""
from __future__ import annotations

import time

from .. import records

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Record = dict[str, Any]  # the open step (records.Step), filled in as the step runs

MAX_WAITS_KEPT = 32


class StepRecorder:
    def __init__(self, on_open: Callable[[int, int], object], on_close: Callable[[Record], object]) -> None:
        self._on_open = on_open
        self._on_close = on_close
        self.completed = 0
        self.current: Record | None = None
        self._next_start: int | None = None

    def open(self, now: int | None = None) -> Record:
        """Make sure a step is open (idempotent); the first call marks the start of training."""
        if self.current is None:
            start = self._next_start or (time.time_ns() if now is None else now)
            self.current = {records.KIND: records.STEP, "n": self.completed + 1, "start": start, "wait": 0, "waits": [], "fp": None, "bp": None}
            self._on_open(self.current["n"], start)
        return self.current

    def data_wait(self, start: int, end: int, cpu_ns: int | None = None) -> None:
        """A fetch from the training data source; a fetch with no open step opens one where it began.
        ``cpu_ns``: the CPU time the fetch itself used, where the loading runs in the fetching thread
        (the advisor tells loading that computes from loading that waits by it)."""
        step = self.current or self.open(start)
        step["wait"] += end - start
        if cpu_ns is not None:
            step["wait_cpu"] = step.get("wait_cpu", 0) + cpu_ns
        if len(step["waits"]) < MAX_WAITS_KEPT:
            step["waits"].append((start, end))

    def mark_fp(self, now: int | None = None) -> None:
        step = self.current or self.open(now)
        if step["fp"] is None:
            step["fp"] = time.time_ns() if now is None else now

    def mark_bp(self, now: int | None = None) -> None:
        (self.current or self.open(now))["bp"] = time.time_ns() if now is None else now

    def close(self, now: int | None = None, **extra: object) -> Record | None:
        """End the open step at ``now``; the next step starts there, so no time falls between steps."""
        if self.current is None:
            return None
        end = time.time_ns() if now is None else now
        step, self.current = self.current, None
        step["end"] = self._next_start = end
        if extra:
            step.update(extra)
        self.completed = step["n"]
        self._on_close(step)
        return step

    def start_next_at(self, now: int) -> None:
        """Time the agent itself spent between two steps (a profiler hand-over) belongs to no step."""
        if self.current is None and self._next_start is not None:
            self._next_start = now

    def discard_open(self) -> None:
        """A step cut short (crash, signal, end of data) is not a step: drop it."""
        self.current = None
