"""CPU and host-memory sampling on a daemon thread, started with the first recorded step.

psutil gives machine user/sys/iowait/idle and context switches, /proc/stat the runnable count,
and the process's own CPU times and RSS; with ``host_sys`` "disk" / "network", the machine's disk and
network I/O counters (and the process's own disk bytes) as deltas per sample. Samples go to the
writer's thread-safe queue; the main thread writes them at the next flush, so this thread never touches a file or a lock of ours.
"""
from __future__ import annotations

import collections
import os
import time
from collections.abc import Iterable

import psutil

from . import SamplerThread

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from ..store import Record


def _runnable_processes() -> int:
    try:
        with open("/proc/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"procs_running"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _io_counters(process: psutil.Process, kinds: tuple[str, ...]) -> dict[str, int]:
    """The cumulative counters of KINDS ("disk", "network"), flat, so that a sample is their difference."""
    counters: dict[str, int] = {}
    if "disk" in kinds:
        disk = psutil.disk_io_counters()
        if disk is not None:
            counters.update(disk_read=disk.read_bytes, disk_write=disk.write_bytes, disk_reads=disk.read_count,
                            disk_writes=disk.write_count)
        try:
            own = process.io_counters()
            counters.update(proc_read=own.read_bytes, proc_write=own.write_bytes)
        except (psutil.Error, AttributeError, OSError):
            pass
    if "network" in kinds:
        net = psutil.net_io_counters()
        if net is not None:
            counters.update(net_sent=net.bytes_sent, net_recv=net.bytes_recv, net_psent=net.packets_sent, net_precv=net.packets_recv)
    return counters


class CpuSampler(SamplerThread):
    """Machine, process and memory readings; the last one is taken as it stops, so short windows have one."""

    thread_name = "msprof-agent-cpu"

    def __init__(self, queue: collections.deque[Record], interval_ms: float, host_io: Iterable[str] = ()) -> None:
        super().__init__(queue, interval_ms)
        self._io_kinds = tuple(host_io)  # "disk", "network": host_sys kinds beyond cpu and mem

    def _run(self) -> None:
        process = psutil.Process(os.getpid())  # made here, after any fork, so it is this process
        cpus = psutil.cpu_count() or 1
        psutil.cpu_times_percent(interval=None)
        last_ctx = psutil.cpu_stats().ctx_switches
        last_proc = process.cpu_times()
        last_wall = time.monotonic()
        last_io = _io_counters(process, self._io_kinds) if self._io_kinds else None
        while True:
            stopping = self._stop.wait(self._interval)
            try:
                machine = psutil.cpu_times_percent(interval=None)
                ctx = psutil.cpu_stats().ctx_switches
                proc = process.cpu_times()
                wall = time.monotonic()
                span = max(wall - last_wall, 1e-6) * cpus
                now_ms = time.time_ns() // 1_000_000
                self._queue.append({
                    "k": "cpu", "ts": now_ms,
                    "user": machine.user, "sys": machine.system, "io": getattr(machine, "iowait", 0.0),
                    "idle": machine.idle, "ctx": ctx - last_ctx, "run": _runnable_processes(),
                    "puser": 100.0 * (proc.user - last_proc.user) / span,
                    "psys": 100.0 * (proc.system - last_proc.system) / span,
                    "rss": process.memory_info().rss,
                })
                last_ctx, last_proc, last_wall = ctx, proc, wall
                if last_io is not None:
                    io = _io_counters(process, self._io_kinds)
                    self._queue.append(dict({key: io[key] - last_io.get(key, io[key]) for key in io}, k="hostio", ts=now_ms))
                    last_io = io
            except Exception:  # a vanished /proc entry must not kill sampling or the job
                pass
            if stopping:
                return
