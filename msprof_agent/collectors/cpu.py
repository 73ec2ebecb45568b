"""CPU and host-memory sampling on a daemon thread, started with the first recorded step.

/proc/stat gives machine user/sys/nice/iowait/steal/idle, context switches and the runnable count (one
read: ``_machine_state``), psutil the job's CPU times (``job_tree``: this process and its descendants, DataLoader, dataset
and compile workers included) apart from the agent's own processes (its niced background analysis),
and this process's RSS and heap in use (``heap.py``: the C heap's, where the C library counts it, and
Python's small objects') and the memory left to it (``memory_left.py``); with ``host_sys`` "disk" / "network",
the machine's disk and network I/O counters (and the process's own disk bytes) as deltas per sample. Samples go to the writer's thread-safe
queue; the main thread writes them at the next flush, so this thread never touches a file or a lock of ours.

It also probes the machine's speed as it starts and as it stops (``probe`` records): ``compare``
tells a slower machine (other work on the cores, another host) from a slower job by their ratio.
"""
from __future__ import annotations

import collections
import os
import time
from collections.abc import Iterable

import psutil

from .. import records
from . import SamplerThread
from .heap import HeapReader
from .memory_left import MemoryLeft

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from typing import Any

    from ..records import Cpu
    from ..store import Record


class _MachineTimes(collections.namedtuple("_MachineTimes", "user nice system idle iowait irq softirq steal guest guest_nice")):
    """The machine's CPU times as /proc/stat's first line gives them (clock ticks), named as psutil names them."""


def _machine_state() -> tuple[Any, int, int]:
    """(the machine's CPU times, context switches so far, runnable threads now) from one read of /proc/stat: psutil's
    ``cpu_times`` and ``cpu_stats`` read it a file each, and every read lets go of the GIL that the training thread
    then waits to have back (``bench/sampler_gil.py``). psutil's where the file cannot be read (not Linux)."""
    try:
        with open("/proc/stat", "rb") as handle:
            text = handle.read()
        times = [int(v) for v in text[:text.index(b"\n")].split()[1:11]]
        ctx = int(text[text.index(b"\nctxt ") + 6:].split(None, 1)[0])
        running = int(text[text.index(b"\nprocs_running ") + 15:].split(None, 1)[0])
        return _MachineTimes(*times, *[0] * (10 - len(times))), ctx, running
    except (OSError, ValueError, IndexError):
        return psutil.cpu_times(), psutil.cpu_stats().ctx_switches, 0


OUR_PROCESSES = b"msprof_agent.background_analysis"  # a child running this is the agent's, not the job's


def _descendants(pid: int, every_thread: bool = True) -> list[int]:
    """The process's descendants, from /proc's per-thread ``children`` lists (cheap: no scan of every
    process); psutil's scan where the kernel has no such list. ``every_thread`` false: only the children each
    process's main thread forked, one file a process instead of one a thread (a training process has dozens)."""
    found, todo = [], [pid]
    try:
        while todo:
            parent = todo.pop()
            for task in os.listdir(f"/proc/{parent}/task") if every_thread else [str(parent)]:
                try:
                    with open(f"/proc/{parent}/task/{task}/children", "rb") as handle:
                        children = [int(c) for c in handle.read().split()]
                except FileNotFoundError:  # a thread that ended, or no children lists in this kernel
                    if parent == pid and task == str(pid):
                        raise
                    continue
                found += children
                todo += children
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        found = [child.pid for child in psutil.Process(pid).children(recursive=True)]
    return found


class _JobTree:
    """CPU seconds of this process and its descendants since the last reading, the agent's own
    processes apart. A child first seen counts from the time of the reading before (the tree's state
    at the start is the baseline). A child that ended is counted through its parent: the kernel adds a
    reaped child's whole life to its parent's ``children_*`` times, less what earlier readings counted of
    it. So a DataLoader's workers, which end with each epoch, are the job's to their last instant, and a
    child that started and ended between two readings is not lost."""

    EVERY_THREAD_EVERY = 10  # every thread's children read at one reading in this many; the main threads' at each

    def __init__(self, process: psutil.Process) -> None:
        self.process = process
        self.known: dict[int, _Seen] = {}
        self._readings = 0
        self.read()

    def _pids(self) -> list[int]:
        """This process and its descendants. Reading every thread's ``children`` file costs ~15 us a thread, half a
        millisecond for a torch process's 30-50 threads, the GIL held, ten times a second in a short window: so
        only at one reading in ``EVERY_THREAD_EVERY``; between them the main threads' children (DataLoader workers,
        compile workers) and every descendant seen before. A child another thread forked is found a few readings
        late, with all its CPU time (a process first seen counts from zero), and one that ended before is still
        counted, through its parent's reaped-children times."""
        pid = self.process.pid
        every_thread = self._readings % self.EVERY_THREAD_EVERY == 0
        self._readings += 1
        found = _descendants(pid, every_thread)
        return [pid] + list(dict.fromkeys(found + ([] if every_thread else [p for p in self.known if p != pid])))

    def read(self) -> tuple[float, float, float, float]:
        """(job user, job system, ours, the job's descendants' user + system) seconds since the last call."""
        job_user = job_sys = ours = own = 0.0
        seen: dict[int, _Seen] = {}
        reaped: dict[int, list[float]] = {}  # [user, system] each process's ended children added since the last reading
        for pid in self._pids():
            try:
                entry = self.known.get(pid)
                if entry is None:
                    proc = self.process if pid == self.process.pid else psutil.Process(pid)
                    mine = pid != self.process.pid and OUR_PROCESSES in b" ".join(arg.encode() for arg in proc.cmdline())
                    parent = proc.ppid()
                    last = _Seen(proc, 0.0, 0.0, 0.0, 0.0, mine, parent) if self.known else None
                else:
                    proc, mine, parent, last = entry.proc, entry.mine, entry.parent, entry
                times = proc.cpu_times()
            except (psutil.Error, OSError):
                continue
            seen[pid] = _Seen(proc, times.user, times.system, times.children_user, times.children_system, mine, parent)
            if last is None:
                continue
            if mine:
                ours += times.user - last.user + times.system - last.system
            else:
                job_user, job_sys = job_user + times.user - last.user, job_sys + times.system - last.system
                if pid == self.process.pid:
                    own = times.user - last.user + times.system - last.system
            reaped[pid] = [times.children_user - last.children_user, times.children_system - last.children_system]
        ended_mine: set[int] = set()  # parents that reaped an agent's process since the last reading
        for pid, gone in self.known.items():
            if pid not in seen and gone.parent in reaped:  # ended and reaped by a process still read: counted up to the last reading
                added = reaped[gone.parent]
                added[0] -= gone.user + gone.children_user
                added[1] -= gone.system + gone.children_system
                if gone.mine:
                    ended_mine.add(gone.parent)
        for pid, (user, system) in reaped.items():
            user, system = max(user, 0.0), max(system, 0.0)  # a child caught between its parent's reading and its own
            if seen[pid].mine or pid in ended_mine:
                ours += user + system
            else:
                job_user, job_sys = job_user + user, job_sys + system
        self.known = seen
        return job_user, job_sys, ours, max(job_user + job_sys - own, 0.0)


class _Seen:
    """One process at a reading: its CPU seconds so far, its own and its reaped children's."""
    __slots__ = ("proc", "user", "system", "children_user", "children_system", "mine", "parent")

    def __init__(self, proc: psutil.Process, user: float, system: float, children_user: float, children_system: float,
                 mine: bool, parent: int) -> None:
        self.proc, self.user, self.system = proc, user, system
        self.children_user, self.children_system = children_user, children_system
        self.mine, self.parent = mine, parent  # the agent's own process; its parent's pid


PROBE_LOOPS, PROBE_REPEATS = 20_000, 5  # about 1 ms a repeat on an idle core


def speed_probe() -> dict[str, float | int]:
    """The machine's speed, in two parts, for ``summary.machine_speed``:

    ``mips``: million iterations per second of a fixed pure-Python loop, the best of a few repeats
    (a few ms in all): the host's own speed. Pure Python, not the BLAS matmul of the MFU calibration,
    which spins its threads at barriers and takes seconds, not milliseconds, on busy cores.
    ``run_ns`` / ``wait_ns``: this process's time on a CPU and waiting in a run queue for one so far
    (Linux schedstat, all threads): between two probes, how much other work took the cores from the job.
    A short probe cannot see that itself: the scheduler favours a thread that just woke up.
    """
    best = float("inf")
    for _ in range(PROBE_REPEATS):
        began, total = time.perf_counter(), 0
        for i in range(PROBE_LOOPS):
            total += i
        best = min(best, time.perf_counter() - began)
    probe = {"mips": round(PROBE_LOOPS / best / 1e6, 3)}
    try:
        run_ns = wait_ns = 0
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/schedstat", "rb") as handle:
                fields = handle.read().split()
            run_ns, wait_ns = run_ns + int(fields[0]), wait_ns + int(fields[1])
        probe.update(run_ns=run_ns, wait_ns=wait_ns)
    except (OSError, ValueError, IndexError):  # not Linux, or a kernel without schedstat: the loop speed alone
        pass
    return probe


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


def machine_percents(before: Any, after: Any) -> dict[str, float]:
    """Each CPU state's share (%) of the machine's time between two ``psutil.cpu_times()`` readings (guest time is
    inside user already). Not ``psutil.cpu_times_percent``: psutil 7 divides by at least one CPU-second, so every
    state of a shorter span (the 10 ms first samples) read low, and busy (100 - idle) near 100 %."""
    delta = {name: max(0.0, getattr(after, name) - getattr(before, name)) for name in after._fields if name not in ("guest", "guest_nice")}
    total = sum(delta.values())
    return {name: 100.0 * value / total if total else 0.0 for name, value in delta.items()}


class CpuSampler(SamplerThread):
    """Machine, process and memory readings; the last one is taken as it stops, so short windows have one.

    Unless the user gave ``cpu_sampling_interval`` (``adaptive``: the session checks ``Options.keys_given``), the wait adapts to the window: a
    ``1/POINTS`` of the time sampled so far, from ``FIRST_WAIT_S`` up to the interval, so a window of
    any length has at least about ``POINTS`` samples; any other interval the user gives is kept as is.
    Each sample says how long it covers (``span``, ns); one covering under ``MIN_SPAN_S`` (a stop right
    after a sample) holds no measurement and is not taken.
    """

    thread_name = "msprof-agent-cpu"
    POINTS, FIRST_WAIT_S, MIN_SPAN_S = 20, 0.01, 0.005

    def __init__(self, queue: collections.deque[Record], interval_ms: float, host_io: Iterable[str] = (), adaptive: bool = False) -> None:
        super().__init__(queue, interval_ms)
        self._io_kinds = tuple(host_io)  # "disk", "network": host_sys kinds beyond cpu and mem
        self._adaptive = adaptive  # the interval is the default, not one the user gave: adapt to the window

    def _run(self) -> None:
        self._queue.append({**speed_probe(), records.KIND: records.PROBE, "at": "start", "ts": time.time_ns()})
        process = psutil.Process(os.getpid())  # made here, after any fork, so it is this process
        cpus = psutil.cpu_count() or 1
        last_times, last_ctx, _ = _machine_state()
        tree = _JobTree(process)
        heap = HeapReader()
        left = MemoryLeft()
        began = last_wall = time.monotonic()
        adaptive = self._adaptive
        last_io = _io_counters(process, self._io_kinds) if self._io_kinds else None
        while True:
            wait = min(self._interval, max(self.FIRST_WAIT_S, (time.monotonic() - began) / self.POINTS)) if adaptive else self._interval
            stopping = self._stop.wait(wait)
            try:
                wall = time.monotonic()
                if wall - last_wall >= self.MIN_SPAN_S:
                    times, ctx, running = _machine_state()
                    machine = machine_percents(last_times, times)
                    job_user, job_sys, ours, children = tree.read()
                    span = (wall - last_wall) * cpus
                    now = time.time_ns()
                    sample: Cpu = {
                        records.KIND: records.CPU, "ts": now, "span": round((wall - last_wall) * 1e9),
                        "user": machine["user"], "sys": machine["system"], "nice": machine.get("nice", 0.0),
                        "iowait": machine.get("iowait", 0.0), "steal": machine.get("steal", 0.0),
                        "idle": machine["idle"], "ctx": ctx - last_ctx, "run": running,
                        "puser": 100.0 * job_user / span, "psys": 100.0 * job_sys / span, "agent": 100.0 * ours / span,
                        "pchildren": 100.0 * children / span,
                        "rss": process.memory_info().rss,
                    }
                    held = heap.read()
                    if held is not None:
                        sample["heap"] = held.bytes
                        if held.small is not None:
                            sample["small"] = held.small
                    sample["avail"], cgroup = left.read()
                    if cgroup is not None:
                        sample["cg_left"] = cgroup
                    self._queue.append(sample)
                    last_ctx, last_wall, last_times = ctx, wall, times
                    if last_io is not None:
                        io = _io_counters(process, self._io_kinds)
                        self._queue.append({**{key: io[key] - last_io.get(key, io[key]) for key in io}, records.KIND: records.HOSTIO, "ts": now})
                        last_io = io
            except Exception:  # a vanished /proc entry must not kill sampling or the job
                pass
            if stopping:
                self._queue.append({**speed_probe(), records.KIND: records.PROBE, "at": "end", "ts": time.time_ns()})
                return
