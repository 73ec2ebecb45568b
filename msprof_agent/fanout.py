"""Many ranks analysed at once: one task per rank, on a local process pool or on a Dask cluster.

A task (``pipeline``'s: it reads one rank's raw store from the shared file system and writes that rank's
files beside it) sends back only the rank's summary; the cluster step then runs on the summaries in the
caller. Every engine runs the same task function, so they write the same files. Dask is an optional extra (``[cluster]``):
``local`` starts a LocalCluster on this machine; a ``tcp://host:port`` address or a scheduler file
(dask-jobqueue, Kubernetes) joins a cluster the user runs, whose workers import msprof_agent themselves.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

Task = tuple[str, int, dict[str, Any]]  # (profiler dir, rank, the analysis's keyword arguments)
Function = Callable[[Task], Any]  # a module-level function: the workers import it by name
INSTALL_CLUSTER = "pip install 'msprof-agent[cluster]'"
IN_FLIGHT_PER_THREAD = 4  # Dask tasks submitted ahead per worker thread: none idles, the scheduler holds few


def cores() -> int:
    """The CPUs this process may run on (a container's or a job's share, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class SchedulerError(Exception):
    """A Dask scheduler was asked for and cannot be used (Dask missing, or the address does not answer)."""


def engine(tasks: list[Task], scheduler: str | None = None, scheduler_file: str | None = None) -> str:
    """What ``run`` runs the tasks on, in words for the progress line."""
    if scheduler or scheduler_file:
        return f"Dask {scheduler_file or scheduler}"
    return "in this process" if len(tasks) == 1 or cores() == 1 else f"{min(cores(), len(tasks))} processes"


def run(function: Function, tasks: list[Task], scheduler: str | None = None, scheduler_file: str | None = None) -> Iterator[tuple[Task, Any]]:
    """(task, ``function(task)`` or the exception it raised) for every task, in the order they finish."""
    if scheduler or scheduler_file:
        yield from _on_dask(function, tasks, scheduler, scheduler_file)
    elif engine(tasks) == "in this process":
        for task in tasks:
            yield task, _called(function, task)
    else:
        yield from _on_pool(function, tasks)


def _called(function: Function, task: Task) -> Any:
    try:
        return function(task)
    except Exception as exc:
        return exc


def _on_pool(function: Function, tasks: list[Task]) -> Iterator[tuple[Task, Any]]:
    # spawn: a fresh interpreter per worker, never a fork of a parent that may hold threads (workers.py)
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(cores(), len(tasks)), mp_context=context) as pool:
        futures = {pool.submit(function, task): task for task in tasks}
        for future in concurrent.futures.as_completed(futures):
            task = futures.pop(future)  # its result goes with it: a thousand ranks' summaries are not all held here
            exc = future.exception()
            yield task, exc if exc is not None else future.result()


def _on_dask(function: Function, tasks: list[Task], scheduler: str | None, scheduler_file: str | None) -> Iterator[tuple[Task, Any]]:
    try:
        import logging

        from distributed import Client, LocalCluster, as_completed
    except ImportError as exc:
        raise SchedulerError(f"a Dask scheduler needs dask[distributed] ({INSTALL_CLUSTER}): {exc}") from None
    cluster = None
    try:
        if scheduler == "local":
            cluster = LocalCluster(n_workers=min(cores(), len(tasks)), threads_per_worker=1, processes=True, host="127.0.0.1",
                                   dashboard_address=None, silence_logs=logging.ERROR)
            client = Client(cluster)
        else:
            # how long to try is Dask's own setting (distributed.comm.timeouts.connect, 30 s unless changed)
            client = Client(scheduler_file=scheduler_file) if scheduler_file else Client(scheduler)
    except (OSError, TimeoutError, ValueError) as exc:
        if cluster is not None:
            cluster.close()
        raise SchedulerError(f"cannot reach the Dask scheduler {scheduler_file or scheduler}: {type(exc).__name__}: {exc}") from None
    try:
        # a few tasks a worker thread in flight, topped up as each finishes (workers may join meanwhile): the
        # scheduler holds a window of tasks, not a thousand ranks' (its memory grew 1.22x from 128 ranks to 1 024)
        waiting, running = tasks[::-1], as_completed()
        by_key: dict[Any, Task] = {}  # a Dask key: a string or a tuple

        def top_up() -> None:
            wanted = IN_FLIGHT_PER_THREAD * max(sum(client.nthreads().values()), 1)
            while waiting and len(by_key) < wanted:
                task = waiting.pop()
                future = client.submit(function, task, pure=False)
                by_key[future.key] = task
                running.add(future)

        top_up()
        for future in running:
            task = by_key.pop(future.key)
            error = future.exception()
            yield task, error if error is not None else future.result()
            future.release()
            top_up()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


class Progress:
    """``analysed 12/128 ranks (3.1 ranks/s)`` on stderr: every rank for a few, at most one line a second for many."""

    def __init__(self, total: int, engine: str):
        self.total, self.engine, self.done = total, engine, 0
        self.began = self.said = time.perf_counter()

    def step(self, rank: int, failed: bool = False) -> None:
        self.done += 1
        now = time.perf_counter()
        if self.total <= 16 or self.done == self.total or now - self.said >= 1.0 or failed:
            self.said = now
            rate = self.done / max(now - self.began, 1e-9)
            sys.stderr.write(f"msprof-agent: analysed {self.done}/{self.total} ranks ({rate:.1f} ranks/s, {self.engine}); "
                             f"last: rank {rank}{' FAILED' if failed else ''}\n")
            sys.stderr.flush()
