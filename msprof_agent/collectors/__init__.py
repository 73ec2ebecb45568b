"""Host-side collectors the agent runs itself: step boundaries, CPU and memory samples, Python stacks."""
from __future__ import annotations

import threading

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    import collections

    from ..store import Record


class SamplerThread:
    """A daemon thread that samples every ``interval_ms`` into a queue the main thread drains.

    Subclasses implement ``_run`` (looping on ``self._stop.wait(self._interval)``) and may add
    ``_after_stop``. Threads start with a window, never at import: a thread alive at ``fork()``
    is what makes children deadlock.
    """

    thread_name = "msprof-agent-sampler"

    def __init__(self, queue: collections.deque[Record], interval_ms: float) -> None:
        self._queue = queue
        self._interval = interval_ms / 1000.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2 * self._interval + 1)
            self._thread = None
            self._after_stop()

    def _after_stop(self) -> None:
        pass

    def _run(self) -> None:
        raise NotImplementedError
