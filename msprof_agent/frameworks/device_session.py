"""The device interface: what the session asks of a framework's profiler for an op-collection window, and
what a device session may ask of the session in return (``Recorder``: store records, write them out)."""
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..options import Options
    from ..store import Record


class Recorder(Protocol):
    """Where a device session hands what it read back: the recording collection's raw store."""

    def record(self, record: "Record") -> None:
        """Store one raw record (an ops batch, a collective, a memory sample) in the recording collection."""

    def flush(self) -> None:
        """Write the records stored so far, so their memory is freed before the process's memory is read again."""


class DeviceSession(Protocol):
    """Started when the recording collection's first step opens, stopped when its last closes (or at exit)."""

    def start(self, options: "Options") -> None:
        """Start collecting with the recording collection's options (the variable's, the Profiler's or a window's)."""

    def stop(self, recorder: Recorder) -> object:
        """Stop, and hand what was collected to ``recorder.record`` (ops in column batches)."""
