"""The GPU's own view of a CUDA training, always on and cheap: step ends on the device's clock, and the device sampled.

- ``DeviceClock``: a CUDA event recorded on the current stream as each step closes (~2 us, no synchronisation),
  read once it has completed (``query``), so each step's device time is the time between two step ends on the GPU.
  The host runs ahead of the device and waits at its syncs: a ``loss.item()`` every 10th step makes that step's host
  time long and the others short, while the device's steps stay even.
- ``GpuSampler``: the caching allocator's bytes in use and reserved, and through NVML (``nvidia-ml-py``, where
  installed) utilisation, memory used, power, SM clock and throttle reasons, every ``SAMPLE_MS`` on a thread of its
  own, as psutil samples the host; ``peak`` gives the allocator's peaks since the process started.
"""
from __future__ import annotations

import collections
import os
import time
from typing import TYPE_CHECKING, Any

from ... import log, records
from ...collectors import SamplerThread

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...store import Record

SAMPLE_MS = 100.0
FLUSH_STEPS = 64  # device step times go to the store in batches of this many
MEMORY_EVERY = 10  # the allocator's bytes in use read at every 10th step end (~11 us a read: ~1 us a step)
MAX_PENDING = 64  # events not yet completed; more means the device is far behind (or stopped): the oldest are dropped


class DeviceClock:
    """Each step's time on the device, from CUDA events at the step ends, written as ``dsteps`` records."""

    def __init__(self, record: Callable[[Record], None], on_step: Callable[[int, int], object] | None = None) -> None:
        import torch

        self._record = record
        self._on_step = on_step  # told each step's device time as it is read (the live record)
        self._event = torch.cuda.Event
        self._stats = getattr(torch._C, "_cuda_memoryStats", None)  # the allocator's nested counters, without memory_stats()'s flattening (85 us)
        self._device = torch.cuda.current_device()
        self._allocated: list[list[int]] | None = [] if self._stats else None  # [step n, bytes in use] every MEMORY_EVERY steps; None: unreadable
        self._pending: collections.deque[tuple[int, Any]] = collections.deque()
        self._last: tuple[int, Any] | None = None  # the newest completed step end
        self._spare: list[Any] = []
        self._done: list[list[int]] = []

    def step_ended(self, n: int) -> None:
        event = self._spare.pop() if self._spare else self._event(enable_timing=True)
        event.record()
        self._pending.append((n, event))
        if len(self._pending) > MAX_PENDING:
            self._pending.popleft()
        if n % MEMORY_EVERY == 0:
            self._read_memory(n)
        self._read(wait=False)

    def _read_memory(self, n: int) -> None:
        """The allocator's bytes in use now (the device's leak shows here, as the heap's does on the host)."""
        allocated, stats = self._allocated, self._stats
        if allocated is None or stats is None:
            return
        try:
            allocated.append([n, int(stats(self._device)["allocated_bytes"]["all"]["current"])])
        except (KeyError, TypeError, RuntimeError, AttributeError) as exc:  # another torch's counters: no memory series
            log.warn_once(f"the GPU allocator's counters are not readable here ({exc!r}); no GPU memory series")
            self._allocated = None

    def finish(self, wait: bool) -> None:
        """Write what completed; with WAIT (the job is ending) the last step ends are waited for first."""
        self._read(wait)
        self.flush()

    def flush(self) -> None:
        if self._done or self._allocated:
            record: dict[str, Any] = {records.KIND: records.DEVICE_STEPS, "steps": self._done}
            if self._allocated:
                record["allocated"] = self._allocated
                self._allocated = []
            self._record(record)
            self._done = []

    def _read(self, wait: bool) -> None:
        pending = self._pending
        while pending:
            n, event = pending[0]
            if wait:
                event.synchronize()
            elif not event.query():
                return
            pending.popleft()
            last = self._last
            if last is not None:
                ns = round(last[1].elapsed_time(event) * 1e6)
                self._done.append([n, ns])
                self._spare.append(last[1])
                if self._on_step is not None:
                    self._on_step(n, ns)
            self._last = (n, event)
        if len(self._done) >= FLUSH_STEPS:
            self.flush()


class GpuSampler(SamplerThread):
    """The device's memory and load every ``SAMPLE_MS``; its allocator's peaks as a ``gpupeak`` record at stop."""

    thread_name = "msprof-agent-gpu"

    def __init__(self, queue: collections.deque[Record]) -> None:
        super().__init__(queue, SAMPLE_MS)
        self._nvml: Any = None
        self._handle: Any = None

    def _run(self) -> None:
        import torch

        try:
            self._open_nvml(torch)
            while not self._stop.wait(self._interval):
                if torch.cuda.is_initialized():
                    self._queue.append(self._sample(torch))
        except Exception as exc:
            log.report_error("sampling the GPU", exc)

    def _after_stop(self) -> None:
        try:
            peak = peak_record()
            if peak is not None:
                self._queue.append(peak)
        except Exception as exc:
            log.report_error("reading the GPU's memory peak", exc)
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # NVML at exit: nothing of the job's depends on it
                pass

    def _open_nvml(self, torch: Any) -> None:
        try:
            import pynvml  # nvidia-ml-py: optional
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(_nvml_index(torch.cuda.current_device()))
            self._nvml = pynvml
        except Exception as exc:  # no driver library, a container without the device: allocator bytes only
            log.warn_once(f"NVML is not usable ({exc}); GPU samples hold the allocator's bytes only")

    def _sample(self, torch: Any) -> Record:
        device = torch.cuda.current_device()
        stats = torch.cuda.memory_stats(device)
        sample: dict[str, Any] = {records.KIND: records.GPU, "ts": time.time_ns(), "device": device,
                                  "allocated": stats.get("allocated_bytes.all.current", 0),
                                  "reserved": stats.get("reserved_bytes.all.current", 0)}
        nvml, handle = self._nvml, self._handle
        if nvml is not None:
            try:
                sample.update(util=nvml.nvmlDeviceGetUtilizationRates(handle).gpu, used=nvml.nvmlDeviceGetMemoryInfo(handle).used,
                              power=nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                              sm_mhz=nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
                              throttle=nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))
            except Exception as exc:
                log.warn_once(f"an NVML reading failed ({exc}); GPU samples go on without it")
                self._nvml = None
        return sample


def peak_record() -> Record | None:
    """The caching allocator's peaks since the process started, or None before the job used CUDA."""
    import torch

    if not torch.cuda.is_initialized():
        return None
    device = torch.cuda.current_device()
    return {records.KIND: records.GPU_PEAK, "ts": time.time_ns(), "device": device,
            "peak_allocated": torch.cuda.max_memory_allocated(device), "peak_reserved": torch.cuda.max_memory_reserved(device),
            "total": torch.cuda.get_device_properties(device).total_memory}


def _nvml_index(cuda_index: int) -> int:
    """NVML numbers every device of the machine; CUDA only the visible ones, in CUDA_VISIBLE_DEVICES's order."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if cuda_index < len(visible) and visible[cuda_index].isdigit():
        return int(visible[cuda_index])
    return cuda_index
