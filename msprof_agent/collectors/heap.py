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
milliseconds on one with tens of thousands of free chunks, so callers space their reads by the cost
(``HeapReader``). None where the C library has no ``mallinfo2`` (glibc before 2.33, musl, macOS).
"""
from __future__ import annotations

import ctypes
import sys
import time

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
    info = libc.mallinfo2()
    return int(info.uordblks + info.hblkhd) + sys.getallocatedblocks() * SMALL_BLOCK_BYTES


class HeapReader:
    """``in_use()`` at most as often as its cost allows (``COST_SHARE`` times the CPU time of the last read);
    ``read()`` gives None between, and always where the C library has no ``mallinfo2``."""

    def __init__(self) -> None:
        self._next = 0.0

    def read(self) -> int | None:
        now = time.monotonic()
        if now < self._next or _c_library() is None:  # the library loads before the clock starts
            return None
        spent = time.thread_time()  # the call's own CPU time: a thread descheduled on a busy machine costs nothing
        value = in_use()
        self._next = now + COST_SHARE * (time.thread_time() - spent)
        return value


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
