"""A few worker threads for the analysis's GIL-releasing work (np.fromstring, block formatting, pwrite).

Not concurrent.futures: the analysis of a profiled job runs at interpreter exit, where its executors
refuse work ("cannot schedule new futures after interpreter shutdown").
"""
import os
import queue
import threading

COUNT = min(4, os.cpu_count() or 1)


class Job:
    """One submitted call: ``done()`` without waiting, ``result()`` waits and re-raises its exception."""

    def __init__(self, function, args):
        self._call = (function, args)
        self._finished = threading.Event()
        self._value = self._error = None

    def run(self):
        function, args = self._call
        try:
            self._value = function(*args)
        except BaseException as exc:  # handed to whoever asks for the result
            self._error = exc
        finally:
            self._finished.set()

    def done(self):
        return self._finished.is_set()

    def result(self):
        self._finished.wait()
        if self._error is not None:
            raise self._error
        return self._value


class Workers:
    """``with Workers(n) as pool: pool.submit(f, *args)``; leaving the block waits for every job."""

    def __init__(self, count=COUNT, name="msprof-agent-worker"):
        self._jobs = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True) for i in range(count)]

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info):
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join()

    def submit(self, function, *args):
        job = Job(function, args)
        self._jobs.put(job)
        return job

    def _serve(self):
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job.run()
