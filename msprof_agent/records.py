"""The raw store's records: one kind constant and one TypedDict per kind, read by every writer and the reader.

A record is one JSON object, its kind under ``KIND``. Every time is epoch nanoseconds
(``time.time_ns``, the clock MindSpore's and torch's profilers use) and every duration nanoseconds.
The first ``meta`` record of a store carries ``FORMAT``; the analysis reads stores of this format
only (a store another version wrote is refused with what to do), so it keeps no reader for older ones.
A kind's fields grow by adding them here, optional (``NotRequired``) where a writer may leave them out.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    from typing import Any, Final, Literal, NotRequired, TypedDict

FORMAT: Final = 2  # raises when a field changes meaning or unit, or a kind goes away (2: cpu's iowait, the job's process tree)
KIND: Final = "k"

META: Final = "meta"
STEP: Final = "step"
OPS: Final = "ops"
CPU: Final = "cpu"
HOSTIO: Final = "hostio"
PROBE: Final = "probe"
MEM: Final = "mem"
QUEUE: Final = "queue"
PIPELINE: Final = "pipeline"
COMM: Final = "comm"
ENTER: Final = "enter"
STACK: Final = "stack"
MSTX: Final = "mstx"
WINDOW: Final = "window"
NOTE: Final = "note"
PAUSE: Final = "pause"
BUFFER: Final = "buffer"
LAUNCH: Final = "launch"
DEVICE_STEPS: Final = "dsteps"
GPU: Final = "gpu"
GPU_PEAK: Final = "gpupeak"
END: Final = "end"

COMM_FROM_PROFILER: Final = "profiler"  # a comm record's ``source``: seen in the profiler's events, not timed by a wrapper


if TYPE_CHECKING:
    class Meta(TypedDict, total=False):
        """Merged over the store's meta records: who recorded what, and the options it ran with."""
        k: Literal["meta"]
        format: int
        pid: int
        rank_id: int
        device_id: int
        rank_size: int
        started_ns: int
        host: str
        python: str
        argv: list[str]
        framework: str
        device_target: str
        cpus: int  # the profiled machine's, for the CPU and memory pages
        memory_bytes: int
        origin: str
        options: dict[str, Any]  # Options.to_dict() of the window (read back with Options.from_record)
        nested_ops: bool  # sources recording nested calls (torch): the op tables use self times
        context_mode: str  # MindSpore: GRAPH / PYNATIVE
        jit_level: str | None
        amp_level: str
        data_settings: dict[str, Any]  # the training data loader's settings (torch: DataLoader's; MindSpore: the dataset's)
        device_capability: list[int]  # CUDA: the device's compute capability (major, minor)


    class Step(TypedDict):
        k: Literal["step"]
        n: int
        start: int
        end: int
        wait: int  # ns spent fetching data in the step
        waits: list[tuple[int, int]]  # the fetches (start, end), the first MAX_WAITS_KEPT
        wait_cpu: NotRequired[int]  # ns of CPU the fetches used in the fetching thread (a loader without workers)
        fp: int | None  # forward start, backward end, when the integration sees them
        bp: int | None
        win: bool  # recorded while op collection was on
        epoch: NotRequired[int]
        sink_steps: NotRequired[int]
        compiled_call: NotRequired[bool]  # the step ends at the return of its compiled call, begun at fp (MindSpore GRAPH loops)


    class Ops(TypedDict):
        """A column batch: one entry per op in each list; names and types as codes into the record's own
        tables (``store.coded``)."""
        k: Literal["ops"]
        source: str
        device: Literal["cpu", "cuda"]
        name_codes: list[int]
        name_table: list[str]
        type_codes: list[int]
        type_table: list[str]
        start: list[int]
        dur: list[int]
        tid: list[int]
        shape: NotRequired[list[str | None]]  # JSON text of the input-shape list, "[[32,1,32,32],[6,1,5,5]]"
        flops: NotRequired[list[float | None]]
        stream: NotRequired[list[int]]


    class Cpu(TypedDict):
        """One sample of the machine and the process (percentages), over the ``span`` before ``ts``."""
        k: Literal["cpu"]
        ts: int
        span: int  # ns the sample covers
        user: float  # the machine's CPU states, percent
        sys: float
        nice: float  # other jobs under nice, and the agent's own niced background analysis
        iowait: float
        steal: float  # taken by the hypervisor
        idle: float
        ctx: int  # context switches in the span
        run: int  # runnable processes
        puser: float  # the job: this process and its descendants (DataLoader, dataset, compile workers), percent of the machine
        psys: float
        agent: float  # the agent's own processes (its background analysis), neither the job's nor others'
        pchildren: NotRequired[float]  # of the job's, its descendants' (user + system): DataLoader workers, dataset and compile workers
        rss: int  # bytes, this process
        heap: NotRequired[int]  # bytes in use: the C heap's (glibc's mallinfo2) and Python's small objects', on the samples its cost allows
        small: NotRequired[int]  # of ``heap``, Python's small objects', where counted at this sample (their own, slower cadence)
        avail: NotRequired[int]  # the machine's available memory, bytes
        cg_left: NotRequired[int]  # the tightest memory limit of the process's cgroups less their usage, bytes (where one is set)


    class HostIo(TypedDict, total=False):
        """Disk and network counters' growth since the sample before (``host_sys`` "disk" / "network")."""
        k: Literal["hostio"]
        ts: int
        disk_read: int
        disk_write: int
        disk_reads: int
        disk_writes: int
        proc_read: int
        proc_write: int
        net_sent: int
        net_recv: int
        net_psent: int
        net_precv: int


    class Probe(TypedDict):
        """The machine-speed probe (``collectors.cpu.speed_probe``), as the window starts and as it ends."""
        k: Literal["probe"]
        at: Literal["start", "end"]
        ts: int
        mips: float
        run_ns: NotRequired[int]
        wait_ns: NotRequired[int]


    class Mem(TypedDict):
        """The framework allocator, bytes (torch on CPU: allocated since the window started; may go negative)."""
        k: Literal["mem"]
        ts: int
        allocated: int
        reserved: NotRequired[int]
        active: NotRequired[int]
        device: NotRequired[str]


    class Queue(TypedDict):
        k: Literal["queue"]
        ts: int
        step: int
        size: int
        capacity: int
        kind: Literal["iterator", "device_queue"]


    class PipelineOp(TypedDict):
        op_id: int
        op_type: str
        num_workers: int | None
        queue_size: int | None
        queue_capacity: int | None
        parent_id: int
        children_id: list[int]
        cpu_user: float | None
        cpu_sys: float | None


    class Pipeline(TypedDict):
        k: Literal["pipeline"]
        ts: int
        ops: list[PipelineOp]


    # "async" is a keyword: the functional form names it
    Comm = TypedDict("Comm", {
        "k": Literal["comm"],
        "step": int,
        "name": str,
        "start": int,
        "dur": int,
        "bytes": int | None,
        "dtype": NotRequired[str],  # the payload's element type ("float32"), where the call's tensors share one
        "group": NotRequired[str | None],
        "seq": NotRequired[int | None],  # the call's number among its group's calls in this process (ENTER's seq)
        "source": NotRequired[str],  # COMM_FROM_PROFILER
        "async": NotRequired[bool],  # the time is the launch only; the wait happens in Work.wait()
    })


    class Enter(TypedDict):
        """A collective entered, on disk before the call can block (``EventWriter.write_now``)."""
        k: Literal["enter"]
        group: str  # the process group's name ("world": the default group)
        seq: int  # this call's number among the group's calls in this process: the same call on every member
        name: str
        step: int
        ts: int
        ranks: NotRequired[list[int]]  # the group's global ranks, with its first entry in each store


    class Stack(TypedDict):
        """The training thread's Python stack, outermost first, recorded when it changed."""
        k: Literal["stack"]
        ts: int
        frames: list[str]  # "func (file:line)"


    class Mstx(TypedDict):
        k: Literal["mstx"]
        kind: Literal["mark", "range"]
        name: str
        domain: str
        start: int
        end: NotRequired[int]  # ranges
        step: int
        tid: int


    class Window(TypedDict, total=False):
        """A window's start and stop (``event``), or in the run's store a window analysed elsewhere (``collected``)."""
        k: Literal["window"]
        event: Literal["start", "stop", "collected"]
        ts: int
        step: int


    class Note(TypedDict):
        k: Literal["note"]
        text: str  # shown in the summary
        ts: NotRequired[int]


    class Pause(TypedDict):
        """Time the agent spent on itself: between two steps (a torch.profiler hand-over, in no step) or
        inside a window's first step (the profiler's start-up)."""
        k: Literal["pause"]
        start: int
        end: int
        what: str
        profiler_ns: NotRequired[int]  # of the span, the framework profiler's own stop() and start(): the rest is the agent's reading


    class Buffer(TypedDict):
        """What one torch.profiler session held in this process: RSS before its stop and after its events
        were freed and the heap trimmed, and the settings that sized them."""
        k: Literal["buffer"]
        start: int
        stop: int
        events: int
        rss_before: int
        rss_after: int
        heap_before: NotRequired[int]  # the heap's bytes in use (as ``Cpu.heap``) before the stop and after the events were freed
        heap_after: NotRequired[int]
        record_shapes: bool  # this session's setting: shapes and FLOPs are sampled (frameworks/torch/device.py)
        profile_memory: bool
        first_step: NotRequired[int]  # the session's steps: first_step .. first_step + steps - 1
        steps: NotRequired[int]
        inputs: NotRequired[list[tuple[int, str]]]  # [step, the model's input shapes] where they changed in the session
        shapes_because: NotRequired[str]  # why the session recorded shapes


    class Launch(TypedDict):
        """What launched each device activity of one profiler session (CUDA): aligned with that session's ``cuda``
        ops by ``start``; ``launched`` is the start of the runtime call that queued it (0: not seen), ``op_codes``
        name its launching host op against ``op_table`` (-1: not seen)."""
        k: Literal["launch"]
        start: list[int]
        launched: list[int]
        op_codes: list[int]
        op_table: list[str]


    class DeviceSteps(TypedDict):
        """Steps timed on the device's own clock: [step n, ns between the CUDA events recorded at the ends of steps
        n - 1 and n] (read once both had completed, never by synchronising)."""
        k: Literal["dsteps"]
        steps: list[list[int]]
        allocated: NotRequired[list[list[int]]]  # [step n, the caching allocator's bytes in use at its end], every 10th step


    class Gpu(TypedDict, total=False):
        """One sample of the device: the caching allocator's bytes (allocated, reserved) and, with NVML, its
        utilisation (%), memory used (bytes), power (W), SM clock (MHz) and throttle-reason bits."""
        k: Literal["gpu"]
        ts: int
        device: int
        allocated: int
        reserved: int
        util: int
        used: int
        power: float
        sm_mhz: int
        throttle: int


    class GpuPeak(TypedDict):
        """The caching allocator's peaks since the process started (``torch.cuda.max_memory_allocated``/``reserved``)
        and the device's total memory, read when a window stops and at exit."""
        k: Literal["gpupeak"]
        ts: int
        device: int
        peak_allocated: int
        peak_reserved: int
        total: int


    class End(TypedDict, total=False):
        k: Literal["end"]
        reason: str
        ts: int
        steps: int
        lost_steps: int  # step records a failed write (a full disk) lost, with their ops and samples
        lost_because: str
