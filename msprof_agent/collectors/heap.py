"""The heap's bytes in use: glibc's own counters (``mallinfo2``: ``uordblks`` + ``hblkhd``) plus Python's
small objects, which live in the interpreter's own mmapped arenas outside the C heap.

Memory growth is judged on what the job holds, not on RSS: freed memory seldom goes back to the OS,
and a profiler's small allocations between a step's big ones leave freed holes the next step cannot
reuse (the accelerate loop under torch.profiler: RSS +4 MiB a step, all of it freed heap, while the
bytes in use grow 0.06 MiB, the profiler's events). Torch's CPU tensors, numpy arrays and Python
objects over 512 bytes live on the C heap. Objects of 512 bytes or less (pymalloc's blocks) are counted
by ``sys.getallocatedblocks()`` at ``SMALL_BLOCK_BYTES`` each: their sizes are not counted anywhere cheap
(``sys._debugmallocstats`` prints them on stderr); without them a list keeping 20 000 small tuples a step
(2.6 MiB of RSS a step) grew the C heap 0.17 MiB a step, the list's own array, and read as no growth.

``mallinfo2`` walks the free lists under the arenas' locks: microseconds on a training process's heap,
milliseconds on one with tens of thousands of free chunks; ``sys.getallocatedblocks`` walks every pool of
Python's arenas (CPython 3.9 on), 0.4 ms with 0.4 million small blocks in use and 1.4 ms with 2 million. So
callers space their reads by the cost (``HeapReader``). None where the C library has no ``mallinfo2`` (glibc before 2.33, musl, macOS).
"""
from __future__ import annotations

import ctypes
import sys
import time
from typing import NamedTuple

FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
COST_SHARE = 100  # a read costing d waits at least COST_SHARE * d before the next: at most 1 % of a core
# A small object's block, counted at pymalloc's 64-byte class (a 2-tuple's): a tuple of an int and a float is
# 3 blocks, 43 bytes each on average; after ``import torch`` the blocks average 92 bytes.
SMALL_BLOCK_BYTES = 64


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS]


_libc: ctypes.CDLL | None = None
_loaded = False


def _c_library() -> ctypes.CDLL | None:
    global _libc, _loaded
    if not _loaded:
        _loaded = True
        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallinfo2.restype = _Mallinfo2
            libc.mallinfo2.argtypes = []
            _libc = libc
        except (OSError, AttributeError):
            _libc = None
    return _libc


def in_use() -> int | None:
    """Bytes the C heap has handed out and not had back (small blocks and mmapped ones) plus Python's
    small objects (``SMALL_BLOCK_BYTES`` a block), or None without ``mallinfo2``."""
    libc = _c_library()
    if libc is None:
        return None
    return _c_heap(libc) + _small_objects()


def _c_heap(libc: ctypes.CDLL) -> int:
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def _small_objects() -> int:
    return sys.getallocatedblocks() * SMALL_BLOCK_BYTES


class HeapReading(NamedTuple):
    """The heap's bytes in use (``in_use``), and of them Python's small objects' where they were counted at this
    reading (None: the last count stands in ``bytes``)."""

    bytes: int
    small: int | None


class HeapReader:
    """``in_use()`` at most as often as its cost allows (``COST_SHARE`` times the CPU time of the last read);
    ``read()`` gives None between, and always where the C library has no ``mallinfo2``. The C heap's counters
    (tens of microseconds) and the count of Python's small blocks (a walk of every pool: 1-4 ms in a process
    that imported torch and accelerate) are each spaced by their own cost: one cap for both read an accelerate
    job's heap 2-4 times a second, too seldom to judge a leak of tensors over a window of a second or two."""

    def __init__(self) -> None:
        self._next = 0.0
        self._next_count = 0.0
        self._small = 0

    def read(self) -> HeapReading | None:
        now = time.monotonic()
        libc = _c_library()
        if now < self._next or libc is None:  # the library loads before the clock starts
            return None
        spent = time.thread_time()  # the call's own CPU time: a thread descheduled on a busy machine costs nothing
        c_heap = _c_heap(libc)
        self._next = now + COST_SHARE * (time.thread_time() - spent)
        counted = None
        if now >= self._next_count:
            spent = time.thread_time()
            self._small = counted = _small_objects()
            self._next_count = now + COST_SHARE * (time.thread_time() - spent)
        return HeapReading(c_heap + self._small, counted)


def rss() -> int:
    import psutil

    held: int = psutil.Process().memory_info().rss  # psutil is untyped
    return held


def return_freed_memory() -> None:
    """Hand freed memory back to the OS (glibc keeps freed heap pages otherwise), so that the RSS after a
    profiler's stop shows what it held; elsewhere nothing, and the drop reads smaller."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
