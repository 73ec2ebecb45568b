"""The MindSpore device session drives ``mindspore._c_expression.Profiler.get_instance("CPU")`` (what the public
CPU profiler uses, without its ~1 s analysis), falling back to ``mindspore.profiler.Profiler``, into a
scratch directory that is parsed into ``ops`` / ``mem`` records and deleted at the window's end.
With ``data_process`` the dataset profiler must run before the pipeline is built, so it starts at
install time and is saved and parsed at the window's end.
"""
from __future__ import annotations

import os
import shutil

from ... import log
from ...contract import names
from ...store import rank_raw_dir
from . import profiler_files

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from typing import Any, Literal

    from ...options import Options
    from ...session import Session


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

    def start(self, options: Options) -> None:
        """Start the CPU profiler for a window with the window's OPTIONS."""
        self.options = options
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

    def stop(self, session: Session) -> None:
        try:
            if self._native is not None:
                self._native.stop()
            elif self._public is not None:
                self._public.stop()
            self._stop_dataset_profiler()
            self._read_back(session)
        finally:
            self._native = self._public = None
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _read_back(self, session: Session) -> None:
        path = profiler_files.find(self.scratch, names.MS_OP_EXECUTIONS)
        if path is not None:
            ops = profiler_files.read_op_executions(path)
            shapes = profiler_files.find(self.scratch, names.MS_FRAMEWORK)
            if shapes is not None and self.options is not None and self.options.record_shapes:
                profiler_files.attach_shapes(ops, profiler_files.read_shapes(shapes))
            for batch in profiler_files.op_batches(ops, "mindspore-cpu"):
                session.record(batch)
        memory = profiler_files.find(self.scratch, names.MS_MEMORY_RECORD)
        if memory is not None:
            for record in profiler_files.memory_records(memory):
                session.record(record)
        queues: tuple[tuple[str, Literal["iterator", "device_queue"]], ...] = (
            (names.MS_ITERATOR_QUEUE, "iterator"), (names.MS_DEVICE_QUEUE, "device_queue"))
        for pattern, kind in queues:
            queue = profiler_files.find(self.scratch, pattern)
            if queue is not None:
                for sample in profiler_files.queue_records(queue, kind):
                    session.record(sample)
        pipeline = profiler_files.find(self.scratch, names.MS_PIPELINE)
        if pipeline is not None:
            cpu = profiler_files.find(self.scratch, names.MS_CPU_UTILIZATION)
            for snapshot in profiler_files.pipeline_records(pipeline, cpu):
                session.record(snapshot)

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
