"""CPU and host-memory sampling on a daemon thread, started with the first recorded step.

psutil gives machine user/sys/iowait/idle and context switches, /proc/stat the runnable count,
and the process's own CPU times and RSS. Samples go to the writer's thread-safe queue; the main
thread writes them at the next flush, so this thread never touches a file or a lock of ours.
"""
from __future__ import annotations

import os
import time

import psutil

from . import SamplerThread


def _runnable_processes() -> int:
    try:
        with open("/proc/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"procs_running"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class CpuSampler(SamplerThread):
    """Machine, process and memory readings; the last one is taken as it stops, so short windows have one."""

    thread_name = "msprof-agent-cpu"

    def _run(self) -> None:
        process = psutil.Process(os.getpid())  # made here, after any fork, so it is this process
        cpus = psutil.cpu_count() or 1
        psutil.cpu_times_percent(interval=None)
        last_ctx = psutil.cpu_stats().ctx_switches
        last_proc = process.cpu_times()
        last_wall = time.monotonic()
        while True:
            stopping = self._stop.wait(self._interval)
            try:
                machine = psutil.cpu_times_percent(interval=None)
                ctx = psutil.cpu_stats().ctx_switches
                proc = process.cpu_times()
                wall = time.monotonic()
                span = max(wall - last_wall, 1e-6) * cpus
                self._queue.append({
                    "k": "cpu", "ts": time.time_ns() // 1_000_000,
                    "user": machine.user, "sys": machine.system, "io": getattr(machine, "iowait", 0.0),
                    "idle": machine.idle, "ctx": ctx - last_ctx, "run": _runnable_processes(),
                    "puser": 100.0 * (proc.user - last_proc.user) / span,
                    "psys": 100.0 * (proc.system - last_proc.system) / span,
                    "rss": process.memory_info().rss,
                })
                last_ctx, last_proc, last_wall = ctx, proc, wall
            except Exception:  # a vanished /proc entry must not kill sampling or the job
                pass
            if stopping:
                return
