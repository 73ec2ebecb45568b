"""Host-side collectors the agent runs itself: step boundaries, CPU and memory samples, Python stacks."""
import threading


class SamplerThread:
    """A daemon thread that samples every ``interval_ms`` into a queue the main thread drains.

    Subclasses implement ``_run`` (looping on ``self._stop.wait(self._interval)``) and may add
    ``_after_stop``. Threads start with a window, never at import: a thread alive at ``fork()``
    is what makes children deadlock.
    """

    thread_name = "msprof-agent-sampler"

    def __init__(self, queue, interval_ms):
        self._queue = queue
        self._interval = interval_ms / 1000.0
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2 * self._interval + 1)
            self._thread = None
            self._after_stop()

    def _after_stop(self):
        pass

    def _run(self):
        raise NotImplementedError
