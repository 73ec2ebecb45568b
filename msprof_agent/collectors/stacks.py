"""Host Python stacks of the training thread, sampled for the timeline (``with_stack`` / ``profile_framework``).

A daemon thread reads the main thread's frame every few milliseconds with ``sys._current_frames``
(no tracing hook, so the training code runs at full speed between samples) and queues the stack
as "function (file:line)" strings, outermost first. The timeline merges consecutive samples into
a flame chart. The frames of the agent itself are left out.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from .. import records
from . import SamplerThread

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    import collections
    from types import CodeType, FrameType

    from ..store import Record

AGENT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_DEPTH = 64


# "function (file:line)" of each (code, line) seen, or None for the agent's own code: the sampler holds
# the GIL while it reads a stack, so formatting each frame anew (~1 us each) would stall the training thread.
_names: dict[tuple[CodeType, int], str | None] = {}


def _describe(code: CodeType, line: int) -> str | None:
    if code.co_filename.startswith(AGENT_DIR):
        name = None
    else:
        name = f"{code.co_name} ({os.path.basename(code.co_filename)}:{line})"
    _names[(code, line)] = name
    return name


def stack_of(frame: FrameType | None) -> list[str]:
    """The frame's stack, outermost first, without the agent's own frames."""
    frames: list[str] = []
    names = _names
    while frame is not None and len(frames) < MAX_DEPTH:
        key = (frame.f_code, frame.f_lineno)
        name = names[key] if key in names else _describe(*key)
        if name is not None:
            frames.append(name)
        frame = frame.f_back
    frames.reverse()
    return frames


class StackSampler(SamplerThread):
    thread_name = "msprof-agent-stacks"

    def __init__(self, queue: collections.deque[Record], interval_ms: float, thread_id: int | None = None) -> None:
        super().__init__(queue, interval_ms)
        self._target = thread_id if thread_id is not None else threading.main_thread().ident or 0  # a started thread has an ident

    def _after_stop(self) -> None:
        """An empty stack closes every open frame at the window's end."""
        self._queue.append({records.KIND: records.STACK, "ts": time.time_ns(), "frames": []})

    def _run(self) -> None:
        previous = None
        while not self._stop.wait(self._interval):
            frame = sys._current_frames().get(self._target)
            if frame is None:
                continue
            frames = stack_of(frame)
            del frame
            if frames != previous:  # an unchanged stack adds nothing: the timeline extends the last one
                self._queue.append({records.KIND: records.STACK, "ts": time.time_ns(), "frames": frames})
                previous = frames
