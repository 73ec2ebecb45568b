"""The timeline's op events as bytes, formatted by numpy a block of ops at a time.

One op event reads ``,{"ph":"X","name":N,"cat":T,"pid":P,"tid":I,"ts":TS,"dur":D,"args":{"step":S}}``
(with ``,"shape":...`` before the last braces when the op has one; the type is the category): a head
before ``TS`` and a tail after ``S`` that depend only on the op's name, type, device, thread and
shape, and three numbers in between. Ops whose heads, tails and numbers have the same lengths share
a layout; a block of them is one uint8 matrix, a row per event, filled from a template row holding
all the text its rows share, then the digits that differ, computed four at a time. Events are
written by layout, then time, not in time order: Trace Event viewers sort events themselves.
"""
from __future__ import annotations

import bisect
import errno
import fcntl
import mmap
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from .workers import Workers

if TYPE_CHECKING:
    from .rundata import RunData

Keep = np.ndarray | slice  # the ops an event file holds: their indices, or a slice (every op)
Segment = tuple[Any, ...]  # (file offset, bytes) or (file offset, layout, row width, texts, op indices): ``_blocks``

_DUR, _STEP = b',"dur":', b',"args":{"step":'
_FOUR_DIGITS = np.frombuffer("".join(f"{i:04d}" for i in range(10_000)).encode(), dtype=np.uint32)
_DIGIT_STEPS = 10 ** np.arange(1, 19, dtype=np.int64)  # a value at or past the k-th has k + 1 digits
_MICROS_DIGIT_STEPS = 10 ** np.arange(4, 19, dtype=np.int64)  # the same for its microseconds, value // 1000
_BLOCK_BYTES = 1 << 20  # a block stays in cache while its columns are filled
_WRITERS = 2  # stretches written at once: one formats while the other waits for the disk, beside the analysis's other pages
_CHUNK, _PAGE = 4 << 20, 4096  # what one pwrite writes; chunks start at multiples of the page size
_TABLE_LIMIT = 1 << 22  # combinations numbered by a presence table up to this many, by sorting beyond
_SMALL_BLOCK_ROWS = 128  # fewer rows than this are formatted one by one (~1.5 us a row) rather than vectorised (~300 us a block)


class OpEvents:
    """Every op's event length, known before formatting (``lengths``, the comma included), and the
    events of any subset of ops laid out (``layout``) and written into a file (``write_file``)."""

    def __init__(self, data: RunData, host_pid: int, device_pid: int, base: int, category: str | None = None) -> None:
        """``base``: the epoch ns ``ts`` count from; ``category``: one ``cat`` for every event (the exports' "cpu_op"); by default
        each op's type. A device op's track (``tid``) is its stream, where it has one."""
        ops = self.ops = data.ops
        self.base = base  # ts count ns from it: small enough for a double to hold exactly; taken off a block at a time
        values = ops.code_values
        cuda = ops.on_device
        columns = (ops["name_id"], ops["type_id"], cuda, ops["tid_id"], ops["shape_id"], ops["stream_id"])
        self.texts, first = groups(columns)  # the code of each op's head and tail
        samples = list(zip(*(column[first].tolist() for column in columns)))
        self.heads = _Texts([_head(values["name"][n], category or values["type"][t], device_pid if c else host_pid,
                                   values["stream"][k] if c and values["stream"][k] is not None else values["tid"][i])
                             for n, t, c, i, _, k in samples])
        self.tails = _Texts([_tail(values["shape"][s]) for *_, s, _ in samples])
        self.widths = (_micros_width(ops["start"] - base), _micros_width(ops["dur"]), _integer_width(ops["step"]))
        self.lengths = ((self.heads.lengths + self.tails.lengths + len(_DUR) + len(_STEP)).astype(np.int32)[self.texts]
                        + self.widths[0] + self.widths[1] + self.widths[2])

    def size(self, keep: Keep) -> int:
        """Bytes of the events of the ops at ``keep``."""
        return int(self.lengths[keep].sum())

    def layout(self, keep: Keep, head: bytes) -> list[Segment]:
        """Where the events of the ops at ``keep`` go in a file that starts with ``head``: its sorts, done before
        ``write_file`` (which may then run beside other work, holding little more than these segments)."""
        return list(self._blocks(keep, len(head)))

    def write_file(self, fd: int, head: bytes, blocks: list[Segment], tail: bytes, size: int) -> None:
        """Write ``head``, the events laid out as ``blocks`` (``layout``) and ``tail`` as the whole of ``fd``'s file,
        ``size`` bytes (``len(head) + self.size(keep) + len(tail)``, which the caller reserved).

        Every block's place in the file is known before it is formatted, so a few threads each format
        and write one stretch of the file (numpy and pwrite release the GIL). They write in page-aligned
        chunks, with O_DIRECT where the file system takes it: hundreds of megabytes of timeline then
        go to disk without filling the page cache, where they would evict the job's own data files.
        """
        direct = _direct(fd)
        threads = max(1, min(_WRITERS, size // _CHUNK))
        bounds = [size * i // threads // _PAGE * _PAGE for i in range(threads)] + [size]
        segments: list[Segment] = [(0, head)] + blocks + [(size - len(tail), tail)]
        starts = [segment[0] for segment in segments]
        stretches = [(fd, segments[max(0, bisect.bisect_right(starts, lo) - 1):bisect.bisect_left(starts, hi)], lo, hi, direct)
                     for lo, hi in zip(bounds, bounds[1:])]
        if threads == 1:
            self._write_stretch(*stretches[0])
        else:
            with Workers(threads, "msprof-agent-timeline") as pool:
                for job in [pool.submit(self._write_stretch, *stretch) for stretch in stretches]:
                    job.result()  # re-raises
        os.ftruncate(fd, size)  # the last chunk went out padded to a whole page

    def _blocks(self, keep: Keep, offset: int) -> Iterator[Segment]:
        """(file offset, layout, row width, head-and-tail codes, op indices) of each block of about a megabyte."""
        every = isinstance(keep, slice)  # every op: no gathers
        texts, *widths = (a if every else a[keep] for a in (self.texts,) + self.widths)
        by_length = np.lexsort((np.arange(len(self.heads.lengths)), self.tails.lengths, self.heads.lengths))
        rank = np.empty(len(by_length), dtype=np.int32)
        rank[by_length] = np.arange(len(by_length))
        number_widths = widths[0] * np.uint16(1024) + widths[1] * np.uint16(32) + widths[2]  # each is under 32
        key, first = groups([number_widths, rank[texts]])  # numbered in that order: a layout's keys are consecutive
        order = np.argsort(key.astype(np.uint16) if len(first) <= 1 << 16 else key, kind="stable")
        order = order.astype(np.int32)  # the blocks' index views hold it while the file is written
        index = order if isinstance(keep, slice) else keep[order]
        run_ends = np.cumsum(np.bincount(key, minlength=len(first))).tolist()  # where each key's ops end in that order
        layouts = np.stack([self.heads.lengths[texts[first]], self.tails.lengths[texts[first]]] + [w[first] for w in widths], axis=1)
        layout_starts = np.flatnonzero(np.append(True, (layouts[1:] != layouts[:-1]).any(axis=1)))
        for first_key, end_key in zip(layout_starts.tolist(), layout_starts[1:].tolist() + [len(first)]):
            layout = layouts[first_key].tolist()
            width = sum(layout) + len(_DUR) + len(_STEP)
            per_block = max(1, _BLOCK_BYTES // width)
            start, stop = run_ends[first_key - 1] if first_key else 0, run_ends[end_key - 1]
            for begin in range(start, stop, per_block):
                end = min(begin + per_block, stop)
                key_first, key_last = bisect.bisect_right(run_ends, begin), bisect.bisect_right(run_ends, end - 1)
                block_texts = texts[first[key_first]] if key_first == key_last else texts[order[begin:end]]
                yield offset, layout, width, block_texts, index[begin:end]
                offset += (end - begin) * width

    def _write_stretch(self, fd: int, segments: list[Segment], lo: int, hi: int, direct: bool) -> None:
        """Write bytes [lo, hi) of the file: the part of each segment (bytes, or a block to format) that
        falls there, staged into page-aligned chunks. A block across two stretches is formatted by both."""
        chunk = _aligned(_CHUNK)
        rows = np.empty(_BLOCK_BYTES + int(self.lengths.max()), dtype=np.uint8)  # reused: fresh megabytes cost page faults
        starts, durations, steps = self.ops["start"], self.ops["dur"], self.ops["step"]
        at = lo  # the file offset of chunk[0]
        for begin, *what in segments:
            if len(what) == 1:
                data = np.frombuffer(what[0], dtype=np.uint8)
            else:
                layout, width, texts, index = what
                length = len(index) * width
                whole = lo <= begin and begin + length <= min(hi, at + _CHUNK)  # formatted in place, not copied
                data = chunk[begin - at:begin - at + length] if whole else rows[:length]
                self._fill(data.reshape(len(index), width), layout, texts, starts[index] - self.base, durations[index], steps[index])
                if whole:
                    if begin + length == at + _CHUNK:
                        _pwrite(fd, chunk, at)
                        at += _CHUNK
                    continue
            data = data[max(0, lo - begin):hi - begin]
            begin = max(begin, lo)
            while len(data):
                taken = min(len(data), at + _CHUNK - begin)
                chunk[begin - at:begin - at + taken] = data[:taken]
                data, begin = data[taken:], begin + taken
                if begin == at + _CHUNK:
                    _pwrite(fd, chunk, at)
                    at += _CHUNK
        if hi > at:
            length = hi - at
            if direct:  # O_DIRECT writes whole pages; the file is cut back to its size afterwards
                length = -(-length // _PAGE) * _PAGE
            _pwrite(fd, chunk[:length], at)

    def _fill(self, block: np.ndarray, layout: list[int], texts: np.ndarray, start: np.ndarray, dur: np.ndarray,
              step: np.ndarray) -> np.ndarray:
        """Fill the block with its rows' events. ``texts``: each row's head-and-tail code, or the one code (a
        numpy scalar) every row has. A block of a few rows (torch's many op names make many small layouts)
        is formatted row by row: the vectorised fill costs a fixed third of a millisecond whatever the rows."""
        if len(block) >= _SMALL_BLOCK_ROWS:
            return self._fill_columns(block, layout, texts, start, dur, step)
        codes = texts.tolist() if np.ndim(texts) > 0 else [int(texts)] * len(block)
        block.reshape(-1)[:] = np.frombuffer(self._rows(codes, start, dur, step), dtype=np.uint8)
        return block

    def _fill_columns(self, block: np.ndarray, layout: list[int], texts: np.ndarray, start: np.ndarray, dur: np.ndarray,
                      step: np.ndarray) -> np.ndarray:
        """``_fill`` vectorised: one template row holding all the text its rows share, then what differs."""
        mixed = np.ndim(texts) > 0
        sample = texts[0] if mixed else texts
        parts, patches, signs, column = [self.heads.texts[sample]], [], [], layout[0]
        for values, width, decimals, after in ((start, layout[2], True, _DUR), (dur, layout[3], True, _STEP), (step, layout[4], False, b"")):
            text, digits = _number(values, width, decimals)
            parts += [text, after]
            patches += [(column + offset, part) for offset, part in digits]
            if values.min() < 0:  # never expected, but a skewed clock could: their first digit is a padding zero
                signs.append((column, values < 0))
            column += width + len(after)
        parts.append(self.tails.texts[sample])
        _put(block, 0, np.frombuffer(b"".join(parts), dtype=np.uint8)[np.newaxis])
        if mixed:
            self.heads.put(block, 0, texts)
            self.tails.put(block, column, texts)
        for at, part in patches:
            _put(block, at, part)
        for at, negative in signs:
            block[negative, at] = ord("-")
        return block

    def _rows(self, texts: list[int], start: np.ndarray, dur: np.ndarray, step: np.ndarray) -> bytes:
        """The events of a few ops, each formatted as the vectorised fill would."""
        heads, tails = self.heads.texts, self.tails.texts
        return b"".join(heads[t] + _micros(s) + _DUR + _micros(d) + _STEP + b"%d" % n + tails[t]
                        for t, s, d, n in zip(texts, start.tolist(), dur.tolist(), step.tolist()))


def _micros(ns: int) -> bytes:
    """ns as microseconds with three decimals, exactly ("-12.345")."""
    return b"%s%d.%03d" % (b"-" if ns < 0 else b"", *divmod(abs(ns), 1000))


def _aligned(size: int) -> np.ndarray:
    """A page-aligned buffer, as O_DIRECT needs: anonymous mmap memory always is."""
    return np.frombuffer(mmap.mmap(-1, size), dtype=np.uint8)


def _direct(fd: int) -> bool:
    """Switch ``fd`` to O_DIRECT where the platform and file system allow it; whether it did."""
    if not hasattr(os, "O_DIRECT"):
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
    except OSError:  # tmpfs and some network file systems refuse it
        return False
    return True


def _pwrite(fd: int, data: np.ndarray, offset: int) -> None:
    view, written = data.data, 0  # the array's buffer (numpy's stubs give ndarray no __buffer__ before Python 3.12)
    while written < len(view):  # pwrite may write less than asked
        try:
            written += os.pwrite(fd, view[written:], offset + written)
        except OSError as exc:  # a file system that took O_DIRECT but not these writes: go buffered
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            if exc.errno != errno.EINVAL or not flags & getattr(os, "O_DIRECT", 0):
                raise
            fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)


def _head(name: str, kind: str, pid: int, tid: Any) -> bytes:
    dumps = orjson.dumps
    return b',{"ph":"X","name":%s,"cat":%s,"pid":%d,"tid":%s,"ts":' % (dumps(name), dumps(kind), pid, dumps(tid if tid is not None else 0))


def _tail(shape: str | None) -> bytes:
    return b"}}" if shape is None else b',"shape":%s}}' % orjson.dumps(shape)


def groups(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(dense code per op of each distinct combination of the integer columns, numbered in the order of
    the columns' values; one op of each code)."""
    codes, count = None, 1
    for column in columns:
        low, high = int(column.min()), int(column.max())
        if low == high:
            continue
        if codes is None:  # the first column that varies: its values are the codes so far
            codes = column.astype(np.int64)
        else:
            if count * (high - low + 1) > _TABLE_LIMIT:
                codes, count = _renumbered(codes, count)
            codes *= high - low + 1
            codes += column
        if low:
            codes -= low
        count *= high - low + 1
    if codes is None:  # one combination
        codes = np.zeros(len(columns[0]), dtype=np.int64)
    codes, count = _renumbered(codes, count)
    first = np.zeros(count, dtype=np.intp)
    first[codes] = np.arange(len(codes))  # any op of a code will do: they agree on every column
    return codes, first


def _renumbered(codes: np.ndarray, count: int) -> tuple[np.ndarray, int]:
    """The distinct codes numbered 0, 1, ... in order: by a presence table while ``count`` is small, else by sorting."""
    if count > _TABLE_LIMIT:
        distinct, codes = np.unique(codes, return_inverse=True)
        return codes.reshape(-1), len(distinct)
    present = np.zeros(count, dtype=bool)
    present[codes] = True
    return (np.cumsum(present) - 1).astype(np.int32)[codes], int(present.sum())


class _Texts:
    """Texts stacked into one uint8 matrix per length, so that the texts of a block of ops (all of one
    length) are one gather."""

    def __init__(self, texts: list[bytes]) -> None:
        rows: list[int] = []
        stacks: dict[int, list[bytes]] = {}  # texts by length
        for text in texts:
            stack = stacks.setdefault(len(text), [])
            rows.append(len(stack))
            stack.append(text)
        self.texts = texts
        self.tables = {n: np.frombuffer(b"".join(s), dtype=np.uint8).reshape(len(s), n) for n, s in stacks.items()}
        self.rows = np.array(rows, dtype=np.intp)
        self.lengths = np.array([len(t) for t in texts], dtype=np.int64)

    def put(self, block: np.ndarray, column: int, codes: np.ndarray) -> None:
        """Write the texts of ``codes`` into the block from ``column`` on."""
        table = self.tables[int(self.lengths[codes[0]])]
        _put(block, column, table[self.rows[codes]])


def _put(block: np.ndarray, column: int, part: np.ndarray) -> None:
    """Copy ``part`` (rows x k bytes, or one row for all) into the block's columns from ``column`` on, each
    row's k bytes as one k-byte item: numpy copies a strided column of a few uint8s a row a byte at a
    time, and one item a row (a word for 2, 4 or 8 bytes) about twice as fast, up to five times."""
    kind = np.dtype((np.void, part.shape[1]))
    block[:, column:column + part.shape[1]].view(kind)[:] = part.view(kind)


def _micros_width(ns: np.ndarray) -> np.ndarray:
    """Characters of each ns value written as microseconds with three decimals ("-12.345")."""
    return _width(ns, _MICROS_DIGIT_STEPS) + 4


def _integer_width(values: np.ndarray) -> np.ndarray:
    return _width(values, _DIGIT_STEPS)


def _width(values: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Digits of each value's magnitude (at least one) past the given steps, plus one for a sign."""
    low, high = values.min(), values.max()
    negative = low < 0
    if not negative and np.searchsorted(steps, low, side="right") == np.searchsorted(steps, high, side="right"):
        return np.broadcast_to(np.uint8(np.searchsorted(steps, low, side="right") + 1), values.shape)  # epoch times: all one width
    width = np.searchsorted(steps, np.abs(values) if negative else values, side="right").astype(np.uint8) + 1
    if negative:
        width += values < 0
    return width


def _number(values: np.ndarray, width: int, decimals: bool) -> tuple[bytes, list[tuple[int, np.ndarray]]]:
    """A block's column of numbers (ns as microseconds with three decimals, exactly: a float would round
    epoch times) as the text all rows share, "0" where they differ, and (offset, rows x digits) patches."""
    magnitude = np.abs(values) if values.min() < 0 else values
    pieces = (np.divmod(magnitude, 1000), (width - 4, 3)) if decimals else ((magnitude,), (width,))
    texts, patches, offset = [], [], 0
    for part, count in zip(*pieces):
        shared, varying = _digits(part, count)
        if varying is not None:
            patches.append((offset + len(shared), varying))
        texts.append(shared.ljust(count, b"0"))
        offset += count + 1
    return b".".join(texts), patches


def _digits(values: np.ndarray, count: int) -> tuple[bytes, np.ndarray | None]:
    """(the leading digits all the non-negative values share, as bytes; the rest of each value's
    zero-padded ``count`` digits as a rows x digits uint8 matrix, or None). Within a block the epoch
    times share their first ten or so digits; the rest are computed four at a time."""
    low, high = str(int(values.min())).zfill(count), str(int(values.max())).zfill(count)
    shared = os.path.commonprefix([low, high])
    varying = count - len(shared)
    if not varying:
        return shared.encode(), None
    groups = -(-varying // 4)
    digits = np.empty((len(values), groups), dtype=np.uint32)
    rest = values - int(shared) * 10 ** varying if shared else values
    for column in range(groups - 1, 0, -1):
        rest, four = np.divmod(rest, 10_000)
        digits[:, column] = _FOUR_DIGITS[four]
    digits[:, 0] = _FOUR_DIGITS[rest]  # under 10,000 by now: no division
    return shared.encode(), digits.view(np.uint8)[:, 4 * groups - varying:]
