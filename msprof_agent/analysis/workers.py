"""A few worker threads for the analysis's GIL-releasing work (integer parsing, block formatting, pwrite).

Not concurrent.futures: the analysis of a profiled job runs at interpreter exit, where its executors
refuse work ("cannot schedule new futures after interpreter shutdown"). From Python 3.12 an atexit handler
cannot start a thread at all ("can't create new thread at interpreter shutdown"): there the caller's thread
does the work itself, in turn.
"""
from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")

COUNT = min(4, os.cpu_count() or 1)


class Job(Generic[T]):
    """One submitted call: ``done()`` without waiting, ``result()`` waits and re-raises its exception."""

    def __init__(self, function: Callable[..., T], args: tuple[Any, ...]) -> None:
        self._call = (function, args)
        self._finished = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        function, args = self._call
        try:
            self._value = function(*args)
        except BaseException as exc:  # handed to whoever asks for the result
            self._error = exc
        finally:
            self._finished.set()

    def done(self) -> bool:
        return self._finished.is_set()

    def result(self) -> T:
        self._finished.wait()
        if self._error is not None:
            raise self._error
        return cast(T, self._value)  # set by run() before _finished, when no error was raised


def _started(thread: threading.Thread) -> bool:
    """Start ``thread``; False where the interpreter refuses new threads (an atexit handler from Python 3.12)."""
    try:
        thread.start()
    except RuntimeError:
        return False
    return True


def in_background(name: str, function: Callable[..., T], *args: Any) -> Job[T]:
    """``function(*args)`` on a thread of its own, started now: work that releases the GIL (formatting, pwrite)
    runs beside the caller's Python. Where no thread can start, it runs now, before this returns."""
    job = Job(function, args)
    if not _started(threading.Thread(target=job.run, name=name, daemon=True)):
        job.run()
    return job


class Workers:
    """``with Workers(n) as pool: pool.submit(f, *args)``; leaving the block waits for every job."""

    def __init__(self, count: int = COUNT, name: str = "msprof-agent-worker") -> None:
        self._jobs: queue.SimpleQueue[Job[Any] | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True) for i in range(count)]

    def __enter__(self) -> Workers:
        self._threads = [thread for thread in self._threads if _started(thread)]  # none: submit() runs each job itself
        return self

    def __exit__(self, *exc_info: object) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()

    def submit(self, function: Callable[..., T], *args: Any) -> Job[T]:
        job = Job(function, args)
        if self._threads:
            self._jobs.put(job)
        else:
            job.run()
        return job

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job.run()
