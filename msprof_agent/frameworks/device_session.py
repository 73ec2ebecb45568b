"""The device interface: what the session asks of a framework's profiler for an op-collection window."""
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..options import Options
    from ..session import Session


class DeviceSession(Protocol):
    """Started when the recording collection's first step opens, stopped when its last closes (or at exit)."""

    def start(self, options: "Options") -> None:
        """Start collecting with the recording collection's options (the variable's, the Profiler's or a window's)."""

    def stop(self, session: "Session") -> object:
        """Stop, and hand what was collected to ``session.record`` (ops in column batches)."""
