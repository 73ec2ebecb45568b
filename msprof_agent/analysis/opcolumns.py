"""Raw ``ops`` records turned into numpy columns, with text-like values kept as integer codes.

Ops arrive in records of up to tens of thousands of ops each. Parsing such a record with orjson
builds a Python int for every time stamp only for numpy to copy it again, so an ops line in the
plain form the store's writer produces (one flat object, no backslash) is split at its keys and its
integer columns (times, threads, and the name and type codes the writers give against their own
tables, ``store.coded``) read by numpy (``_integers``); everything else, and any line not in that form,
goes through orjson.

Names, types, threads, shapes, streams and devices repeat all the time: each is stored as an integer
code per op plus the value of each code (names and types numbered in order of first appearance).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from ..records import KIND, OPS

INTEGER_COLUMNS = ("start", "dur", "tid", "stream", "name_codes", "type_codes")
CODED_COLUMNS = ("name", "type", "tid", "shape", "stream", "device")
WRITER_CODED = ("name", "type")  # coded by every writer against its own table (store.coded)
_PLACES = 4  # digit places summed in uint16 before each int64 step (``_integers``)
CODE = np.int32  # half the memory of intp; two billion distinct names or shapes are not expected


class OpColumns(dict[str, np.ndarray]):
    """Op columns by name; a coded column ``c`` is ``c + "_id"`` (codes) plus ``code_values[c]`` (the value of
    each code, an object array), and ``ops[c]`` builds its object array on first use, for the analyses that need one.
    Not ``values``: that would hide the dict's own ``values()``."""

    def __init__(self, columns: dict[str, np.ndarray], code_values: dict[str, np.ndarray]) -> None:
        super().__init__(columns)
        self.code_values = code_values

    def __missing__(self, column: str) -> np.ndarray:
        if column not in self.code_values:
            raise KeyError(column)
        array: np.ndarray = self.code_values[column][self[column + "_id"]]
        self[column] = array
        return array

    @property
    def on_device(self) -> np.ndarray:
        """Which ops ran on the accelerator (CUDA) rather than the host, compared once per distinct device, not per
        op; a read-only view of one value when every op agrees (a host-only run: no pass over the ops)."""
        matches = np.array([d == "cuda" for d in self.code_values["device"]], dtype=np.bool_)
        if len(matches) and (matches.all() or not matches.any()):
            return np.broadcast_to(matches[0], self["device_id"].shape)
        per_op: np.ndarray = matches[self["device_id"]]
        return per_op

    def take(self, index: np.ndarray) -> OpColumns:
        """The ops at ``index``, as a new table sharing the code values."""
        return OpColumns({k: v[index] for k, v in self.items() if k not in self.code_values}, self.code_values)


def split_ops_line(line: bytes) -> dict[str, Any] | None:
    """An ``ops`` line in the writer's plain form as a record with int64 array columns; None for any
    other line (or one not in that form), which orjson must parse instead. Thread-safe: numpy, most of
    the work, releases the GIL, so the loader splits lines in a few threads."""
    record = _split_line(line)
    if record is None or record.get(KIND) != OPS or not isinstance(record.get("start"), np.ndarray):
        return None
    if any(isinstance(v, np.ndarray) and len(v) != len(record["start"]) for v in record.values()):
        return None  # np.fromstring stopped early (older numpy warns instead of raising), or the columns disagree
    return record


class OpBatches:
    """Op column batches converted to arrays as they come, joined and sorted by start at the end.

    A column with one value for a whole batch (a record's single device, no flops or shapes) is kept
    as (value, count) until the join, which writes each op's value once instead of twice."""

    def __init__(self) -> None:
        self.size = 0
        self.parts: dict[str, list[np.ndarray | _Same]] = {c: [] for c in ("start", "dur", "flops") + tuple(c + "_id" for c in CODED_COLUMNS)}
        self.codes: dict[str, dict[Any, int]] = {c: {} for c in CODED_COLUMNS}  # per column: value -> its code

    def add(self, record: dict[str, Any]) -> None:
        size = len(record.get("start", ()))
        if not size:
            return
        self.size += size
        parts = self.parts
        parts["start"].append(np.asarray(record["start"], dtype=np.int64))
        parts["dur"].append(np.asarray(record["dur"], dtype=np.int64))
        flops = record.get("flops")
        parts["flops"].append(_Same(np.nan, size) if flops is None else np.array(flops, dtype=np.float64))  # None -> nan
        for column in CODED_COLUMNS:
            codes: np.ndarray | _Same
            if column in WRITER_CODED:
                codes = _encode_table(record[column + "_codes"], record[column + "_table"], self.codes[column])
            else:
                codes = _encode(record.get(column), size, self.codes[column])
            parts[column + "_id"].append(codes)

    def columns(self) -> OpColumns:
        """An OpColumns table sorted by start time."""
        columns: dict[str, np.ndarray] = {}
        while self.parts:  # each column's parts freed as soon as it is joined
            column, parts = self.parts.popitem()
            columns[column] = _join(parts, np.float64 if column == "flops" else CODE)
            del parts
        start = columns["start"]
        if len(start) > 1 and (start[1:] < start[:-1]).any():
            order = np.argsort(start, kind="stable")
            columns = {k: v if v.strides == (0,) else v[order] for k, v in columns.items()}
        values: dict[str, np.ndarray] = {}
        for column, index in self.codes.items():
            values[column] = np.empty(len(index), dtype=object)
            values[column][:] = list(index)
        return OpColumns(columns, values)


class _Same(tuple[Any, int]):
    """One value for ``count`` ops."""

    def __new__(cls, value: Any, count: int) -> _Same:
        return super().__new__(cls, (value, count))


def _join(parts: list[np.ndarray | _Same], dtype: type[np.generic]) -> np.ndarray:
    """One column from its parts; a column of a single value (no flops, no shapes, one device) is a
    read-only view of that value, taking no memory."""
    if all(isinstance(p, _Same) for p in parts):
        values, counts = zip(*parts)
        if len(set(values)) == 1 or all(v != v for v in values):  # one value (nan, the only one unequal to itself)
            return np.broadcast_to(np.array(values[0], dtype=dtype), sum(counts))
        return np.repeat(np.array(values, dtype=dtype), counts)
    return np.concatenate([np.full(p[1], p[0], dtype=dtype) if isinstance(p, _Same) else p for p in parts])


def _encode(values: Any, size: int, index: dict[Any, int]) -> np.ndarray | _Same:
    """Codes of a column given as a list, an int64 array or one value for the whole record."""
    if isinstance(values, np.ndarray):
        return _encode_integers(values, index)
    if not isinstance(values, list):
        return _Same(_code_of(values, index), size)
    try:
        return np.fromiter(map(index.__getitem__, values), dtype=CODE, count=len(values))
    except KeyError:  # new values in this batch: number them in order of first appearance
        for value in dict.fromkeys(values):
            _code_of(value, index)
        return np.fromiter(map(index.__getitem__, values), dtype=CODE, count=len(values))


def _encode_table(codes: Sequence[int] | np.ndarray, table: Sequence[Any], index: dict[Any, int]) -> np.ndarray:
    """Codes of a column the writer coded against its own table: its table mapped onto ours."""
    ours = np.array([_code_of(value, index) for value in table], dtype=CODE)
    return ours[np.asarray(codes, dtype=np.intp)]


def _encode_integers(values: np.ndarray, index: dict[Any, int]) -> np.ndarray:
    """Codes of an integer array: a lookup table over its range when that is small (thread and stream
    ids), else np.unique."""
    if not len(values):
        return np.zeros(0, dtype=CODE)
    low, high = int(values.min()), int(values.max())
    if high - low <= 4 * len(values) + 1024:
        present = np.zeros(high - low + 1, dtype=bool)
        present[values - low] = True
        distinct = np.flatnonzero(present)
        table = np.zeros(len(present), dtype=CODE)
        table[distinct] = [_code_of(v, index) for v in (distinct + low).tolist()]
        looked_up: np.ndarray = table[values - low]
        return looked_up
    distinct, inverse = np.unique(values, return_inverse=True)
    codes: np.ndarray = np.array([_code_of(v, index) for v in distinct.tolist()], dtype=CODE)[inverse.reshape(-1)]
    return codes


def _code_of(value: Any, index: dict[Any, int]) -> int:
    code = index.get(value)
    if code is None:
        code = index[value] = len(index)
    return code


def _split_line(line: bytes) -> dict[str, Any] | None:
    """The fields of a line holding one flat JSON object without backslashes, integer columns as int64
    arrays; None for any other line."""
    end = len(line) - 1
    while end > 0 and line[end] in b" \t\r\n":
        end -= 1
    if line[:2] != b'{"' or line[end] != ord("}") or b"\\" in line or line.find(b"{", 1) >= 0:
        return None
    view = memoryview(line)
    record: dict[str, Any] = {}
    key_start = 2
    try:
        while True:
            key_end = line.index(b'"', key_start)
            if line[key_end + 1] != ord(":"):
                return None
            key = line[key_start:key_end].decode()
            record[key], value_end = _value(line, view, key, key_end + 2, end)
            if value_end == end:
                return record
            if line[value_end:value_end + 2] != b',"':
                return None
            key_start = value_end + 2
    except (ValueError, IndexError):  # orjson's decode error and UnicodeDecodeError are ValueErrors
        return None


def _integers(text: bytes) -> np.ndarray:
    """The int64 values of a comma-separated list of integers, as orjson writes one (no spaces).

    np.fromstring pays some 30 ns a value, whatever its digits. A list whose values all have the same
    number of digits (epoch times always; threads, and codes of fewer than ten names, often) is a matrix
    of digits instead: transposed, each digit place is a contiguous row, and the values are summed a
    few places at a time, most of it in small integers. Any other list is left to np.fromstring, which
    raises ValueError on a value that is not an integer."""
    width = text.find(b",")
    if 0 < width <= 19 and (len(text) + 1) % (width + 1) == 0:
        places = np.frombuffer(text + b",", dtype=np.uint8).reshape(-1, width + 1).T.copy()
        digits = places[:width]
        digits -= np.uint8(ord("0"))
        if (places[width] == ord(",")).all() and digits.max() <= 9 and (width < 19 or digits[0].max() <= 8):  # 19 digits under 9e18 fit int64
            value = np.zeros(places.shape[1], dtype=np.int64)
            for first in range(0, width, _PLACES):
                group = digits[first].astype(np.uint16)  # up to four places: under 10,000
                for place in range(first + 1, min(first + _PLACES, width)):
                    group *= np.uint16(10)
                    group += digits[place]
                value *= 10 ** (min(first + _PLACES, width) - first)
                value += group
            return value
    return np.fromstring(text, dtype=np.int64, sep=",")


def _value(line: bytes, view: memoryview, key: str, start: int, end: int) -> tuple[Any, int]:
    """(value, index just past it) of the value at ``start``.

    Without backslashes a string holds no quote, so a "]" after an even number of quotes is outside
    every string, an array of numbers ends at the first "]" and any other array where orjson accepts
    it: a prefix cut inside a string or a nested array is not valid JSON. Only when that fails
    (strings holding "]", as shapes do) is its end found from the next key, the next '":'.
    """
    first = line[start]
    if first == ord("["):
        stop = line.index(b"]", start) + 1
        if key in INTEGER_COLUMNS:
            try:
                return _integers(line[start + 1:stop - 1]), stop
            except ValueError:  # not all integers
                pass
        try:
            return orjson.loads(view[start:stop]), stop
        except orjson.JSONDecodeError:
            next_key = line.find(b'":', start)
            stop = end if next_key < 0 else line.rindex(b'"', start, next_key) - 1
            return orjson.loads(view[start:stop]), stop
    if first == ord('"'):
        stop = line.index(b'"', start + 1) + 1
    else:
        comma = line.find(b",", start, end)
        stop = end if comma < 0 else comma
    return orjson.loads(view[start:stop]), stop
