"""The user's own marks and ranges (``mstx``): recorded as ``mstx`` records while a window records.

Framework integrations call ``mark`` / ``range_start`` / ``range_end`` from their patches of the
user-facing API (``mindspore.profiler.mstx``, ``torch.profiler.record_function``). The options'
``mstx`` switch and domain filters are the recording collection's, read at each call, so a dynamic
window's settings apply.
"""
from __future__ import annotations

import itertools
import threading
import time

from .. import records

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from ..session import Session

FIRST_OWN_ID = 1 << 40  # ids we hand out where the framework's own call returned none (0): far from native ids


class MstxRecorder:
    def __init__(self, session: Session) -> None:
        self._session = session
        self._open: dict[tuple[str, int], tuple[str, int, int]] = {}  # (domain, id) -> (name, start ns, step)
        self._ids = itertools.count(FIRST_OWN_ID)

    def _wanted(self, domain: str) -> bool:
        owner = self._session.owner
        if owner is None or not owner.options.mstx:
            return False
        options = owner.options
        if options.mstx_domain_include:
            return domain in options.mstx_domain_include
        return domain not in options.mstx_domain_exclude

    def has_open_ranges(self) -> bool:
        return bool(self._open)

    def _step(self) -> int:
        """The open step, else the next one: host work between two steps is in the next step's interval."""
        steps = self._session.steps
        return steps.current["n"] if steps.current else steps.completed + 1

    def mark(self, name: str, domain: str) -> None:
        if self._wanted(domain):
            self._session.record({records.KIND: records.MSTX, "kind": "mark", "name": name, "domain": domain, "start": time.time_ns(),
                                  "step": self._step(), "tid": threading.get_native_id()})

    def range_start(self, name: str, domain: str, native_id: int = 0) -> int:
        """Open a range; returns the id the caller hands to range_end (the framework's own, else ours)."""
        range_id = native_id or next(self._ids)
        if self._wanted(domain):
            self._open[(domain, range_id)] = (name, time.time_ns(), self._step())
        return range_id

    def range_end(self, range_id: int, domain: str) -> None:
        opened = self._open.pop((domain, range_id), None)
        if opened is not None:
            name, start, step = opened
            self._session.record({records.KIND: records.MSTX, "kind": "range", "name": name, "domain": domain, "start": start,
                                  "end": time.time_ns(), "step": step, "tid": threading.get_native_id()})
