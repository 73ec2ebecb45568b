"""The MindSpore device session drives ``mindspore._c_expression.Profiler.get_instance("CPU")`` (what the public
CPU profiler uses, without its ~1 s analysis), falling back to ``mindspore.profiler.Profiler``, into a
scratch directory that is parsed into ``ops`` / ``mem`` records and deleted at the window's end. Its collective
ops (AllReduce, AllGather, ...: run inside compiled graphs, ``DistributedGradReducer``'s and Model.train's, so no
Python call of them can be timed) are also ``comm`` records, numbered by the window's step ends (as the torch
device does DDP's all-reduce): on no named group (the exports' default, every rank), and with no payload size,
which MindSpore's CPU profiler does not give.
With ``data_process`` the dataset profiler must run before the pipeline is built, so it starts at
install time and is saved and parsed at the window's end.
"""
from __future__ import annotations

import bisect
import os
import shutil
import time

from ... import log, records
from ...collectors import heap
from ...contract import names
from ...store import rank_raw_dir
from . import profiler_files

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from typing import Any, Literal

    from ...options import Options
    from ...session import Recorder, Session


class MindSporeDevice:
    """MindSpore's own CPU profiler for the window, read back into raw records and then removed."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.options: Options | None = None  # the recording window's, from start()
        raw = rank_raw_dir(session.profiler_dir, session.options.rank_id)
        self.scratch = os.path.join(raw, names.NATIVE_SCRATCH.format(pid=os.getpid()))
        self._native: Any = None  # MindSpore's profiler objects
        self._public: Any = None
        self._dataset_profiler: Any = None
        self._first_step = 1  # the window's first step and the ends of its steps (``step_closed``), to number its collectives
        self._step_ends: list[int] = []
        self._started = 0  # when the op profiler started (epoch ns), for the window's ``buffer`` record

    def start(self, options: Options) -> None:
        """Start the CPU profiler for a window with the window's OPTIONS."""
        self.options = options
        self._first_step, self._step_ends, self._started = self.session.steps.completed + 1, [], time.time_ns()
        if self not in self.session.listeners:
            self.session.listeners.append(self)  # told of the window's step ends; removed at its end
        shutil.rmtree(self.scratch, ignore_errors=True)
        os.makedirs(self.scratch, exist_ok=True)
        if not options.op_time:
            return  # data_process only: the dataset profiler already runs since install
        try:
            self._start_native(options)
        except Exception as exc:
            log.report_error("MindSpore's native CPU profiler (using the public Profiler instead)", exc)
            self._native = None
            self._start_public(options)

    def _start_native(self, options: Options) -> None:
        from mindspore._c_expression import Profiler

        profiler = Profiler.get_instance("CPU")
        profiler.init(self.scratch)
        profiler.step_profiling_enable(True)
        profiler.enable_op_time()
        if options.profile_memory:
            profiler.enable_profile_memory()
        self._native = profiler

    def _start_public(self, options: Options) -> None:
        from mindspore.profiler import Profiler

        self._public = Profiler(output_path=self.scratch, profile_memory=options.profile_memory)

    def stop(self, recorder: Recorder) -> None:
        """Stop the profilers and read their files back. A ``buffer`` record says what the op profiler held in
        this process (its op records, ~3.5 KB an op, kept until its stop), as the torch session's does, so that
        the advisor judges the job's memory net of it."""
        try:
            stopped, rss_held, heap_held = time.time_ns(), heap.rss(), heap.in_use()
            if self._native is not None:
                self._native.stop()
            elif self._public is not None:
                self._public.stop()
            self._stop_dataset_profiler()
            events = self._read_back(recorder)
            if events and self.options is not None:
                recorder.flush()  # the read-back batches leave memory before the heap is read again
                heap.return_freed_memory()
                buffer: dict[str, Any] = {records.KIND: records.BUFFER, "start": self._started, "stop": stopped, "events": events,
                                          "rss_before": rss_held, "rss_after": heap.rss(), "record_shapes": self.options.record_shapes,
                                          "profile_memory": bool(self.options.profile_memory), "first_step": self._first_step,
                                          "steps": len(self._step_ends)}
                heap_freed = heap.in_use()
                if heap_held is not None and heap_freed is not None:
                    buffer.update(heap_before=heap_held, heap_after=heap_freed)
                recorder.record(buffer)
        finally:
            self._native = self._public = None
            shutil.rmtree(self.scratch, ignore_errors=True)
            if self in self.session.listeners:
                self.session.listeners.remove(self)

    def step_opened(self, n: int, start_ns: int) -> None:
        """A session listener's: nothing to do at a step's start."""

    def step_closed(self, step: dict[str, Any]) -> None:
        self._step_ends.append(step["end"])

    def _read_back(self, recorder: Recorder) -> int:
        """Emit the profilers' files as raw records; returns how many ops they held."""
        count = 0
        path = profiler_files.find(self.scratch, names.MS_OP_EXECUTIONS)
        if path is not None:
            ops = profiler_files.read_op_executions(path)
            shapes = profiler_files.find(self.scratch, names.MS_FRAMEWORK)
            if shapes is not None and self.options is not None and self.options.record_shapes:
                profiler_files.attach_shapes(ops, profiler_files.read_shapes(shapes))
            for batch in profiler_files.op_batches(ops, "mindspore-cpu"):
                recorder.record(batch)
            self._emit_collectives(recorder, ops)
            count = len(ops["start"])
        memory = profiler_files.find(self.scratch, names.MS_MEMORY_RECORD)
        if memory is not None:
            for record in profiler_files.memory_records(memory):
                recorder.record(record)
        queues: tuple[tuple[str, Literal["iterator", "device_queue"]], ...] = (
            (names.MS_ITERATOR_QUEUE, "iterator"), (names.MS_DEVICE_QUEUE, "device_queue"))
        for pattern, kind in queues:
            queue = profiler_files.find(self.scratch, pattern)
            if queue is not None:
                for sample in profiler_files.queue_records(queue, kind):
                    recorder.record(sample)
        pipeline = profiler_files.find(self.scratch, names.MS_PIPELINE)
        if pipeline is not None:
            cpu = profiler_files.find(self.scratch, names.MS_CPU_UTILIZATION)
            for snapshot in profiler_files.pipeline_records(pipeline, cpu):
                recorder.record(snapshot)
        return count

    def _emit_collectives(self, recorder: Recorder, ops: profiler_files.OpColumns) -> None:
        """A ``comm`` record for each collective op execution, numbered by the step it starts in."""
        ends = sorted(self._step_ends)
        for op_type, start, dur in zip(ops["type"], ops["start"], ops["dur"]):
            if op_type in COLLECTIVES:
                recorder.record({records.KIND: records.COMM, "step": self._first_step + bisect.bisect_right(ends, start), "name": op_type,
                                "start": start, "dur": dur, "bytes": None, "source": records.COMM_FROM_PROFILER})

    # The dataset profiler only sees pipelines built after it started, hence install time.
    def start_dataset_profiler(self) -> None:
        try:
            import mindspore._c_dataengine as cde

            manager = cde.GlobalContext.profiling_manager()
            manager.init()
            manager.start()
            self._dataset_profiler = manager
        except Exception as exc:
            log.report_error("starting MindSpore's dataset profiler", exc)

    def _stop_dataset_profiler(self) -> None:
        manager, self._dataset_profiler = self._dataset_profiler, None
        if manager is None:
            return
        try:
            manager.stop()
            manager.save(self.scratch)
        except Exception as exc:
            log.report_error("saving MindSpore's dataset profiler", exc)


COLLECTIVES = frozenset(("AllReduce", "AllGather", "AllGatherV", "ReduceScatter", "ReduceScatterV", "Broadcast", "AlltoAll", "AlltoAllV",
                         "NeighborExchange", "NeighborExchangeV2", "Reduce", "CollectiveGather", "CollectiveScatter", "Barrier",
                         "Send", "Receive"))  # MindSpore's communication primitives (ops.operations.comm_ops), by op type
