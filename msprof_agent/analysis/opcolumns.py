"""Raw ``ops`` records turned into numpy columns, with text-like values kept as integer codes.

Ops arrive in records of up to tens of thousands of ops each. Parsing such a record with orjson
builds a Python int for every time stamp only for numpy to copy it again, so an ops line in the
plain form the store's writer produces (one flat object, no backslash) is split at its keys, its
integer columns read by ``np.fromstring`` and its type column compared with the text the types seen
before with its names give; everything else, and any line not in that form, goes through orjson as
before.

Names, types, threads, shapes, streams and devices repeat all the time: each is stored as an integer
code per op plus the value of each code (names and types numbered in order of first appearance).
"""
import numpy as np
import orjson

INTEGER_COLUMNS = ("start", "dur", "tid", "stream")
CODED_COLUMNS = ("name", "type", "tid", "shape", "stream", "device")
_TYPES_OF_NAMES = object()  # a type column found to hold the types seen before with its names


class OpColumns(dict):
    """Op columns by name; a coded column ``c`` is ``c + "_id"`` (codes) plus ``values[c]`` (the value of
    each code), and ``ops[c]`` builds its object array on first use, for the analyses that need one."""

    def __init__(self, columns, values):
        super().__init__(columns)
        self.values = values

    def __missing__(self, column):
        if column not in self.values:
            raise KeyError(column)
        values = self.values[column]
        if column == "device" and all(isinstance(v, str) for v in values):
            values = values.astype(str)  # compared with "cuda" by several analyses: a string array does that in C
        array = self[column] = values[self[column + "_id"]]
        return array

    def take(self, index):
        """The ops at ``index``, as a new table sharing the code values."""
        return OpColumns({k: v[index] for k, v in self.items() if k not in self.values}, self.values)


class OpBatches:
    """Op column batches converted to arrays as they come, joined and sorted by start at the end."""

    def __init__(self):
        self.size = 0
        self.parts = {c: [] for c in ("start", "dur", "flops") + tuple(c + "_id" for c in CODED_COLUMNS)}
        self.codes = {c: {} for c in CODED_COLUMNS}
        self.type_texts = {}  # op name -> JSON text of the type last seen with it
        self.type_of_name = np.zeros(0, dtype=np.intp)  # name code -> code of that type
        self.types_follow_names = True

    def add_line(self, line):
        """Add an ``ops`` line in the writer's plain form; False when the line is not one (or not in that
        form) and must be parsed by orjson instead."""
        record = _split_line(line)
        if record is None or record.get("k") != "ops" or not isinstance(record.get("name"), list):
            return False
        if any(isinstance(v, np.ndarray) and len(v) != len(record["name"]) for v in record.values()):
            return False  # np.fromstring stopped early (older numpy warns instead of raising), or the columns disagree
        types = record.get("type")
        if isinstance(types, memoryview):
            try:
                record["type"] = _TYPES_OF_NAMES if self._types_known(record["name"], types) else orjson.loads(types)
            except orjson.JSONDecodeError:
                return False
        self.add(record)
        return True

    def _types_known(self, names, text):
        """Whether the type column's text is what the types seen before with these names give. Every
        source makes an op's type a function of its name (torch: the name itself; MindSpore: its last
        scope segment), so after the first batch the type columns need not be parsed."""
        if not self.types_follow_names:
            return False
        try:
            expected = ",".join(map(self.type_texts.__getitem__, names))
        except (KeyError, TypeError):  # a name not seen before (or not a name at all)
            return False
        self.types_follow_names = bytes(text[1:-1]) == expected.encode()
        return self.types_follow_names

    def add(self, record):
        size = len(record.get("start", ()))
        if not size:
            return
        self.size += size
        parts = self.parts
        parts["start"].append(np.asarray(record["start"], dtype=np.int64))
        parts["dur"].append(np.asarray(record["dur"], dtype=np.int64))
        flops = record.get("flops")
        parts["flops"].append(np.full(size, np.nan) if flops is None else np.array(flops, dtype=np.float64))  # None -> nan
        names, types = record.get("name"), record.get("type")
        for column in CODED_COLUMNS:
            if column == "type" and types is _TYPES_OF_NAMES:
                codes = self.type_of_name[parts["name_id"][-1]]
            else:
                codes = _encode(record.get(column), size, self.codes[column])
            parts[column + "_id"].append(codes)
        if self.types_follow_names and isinstance(names, list) and isinstance(types, list):
            self._learn_types(names, types)

    def _learn_types(self, names, types):
        """Remember the type of each name of a parsed batch, for ``_types_known``."""
        name_codes, type_codes = self.codes["name"], self.codes["type"]
        type_of_name = np.zeros(len(name_codes), dtype=np.intp)
        type_of_name[:len(self.type_of_name)] = self.type_of_name
        for name, kind in dict(zip(names, types)).items():
            self.type_texts[name] = orjson.dumps(kind).decode()
            type_of_name[name_codes[name]] = type_codes[kind]
        self.type_of_name = type_of_name

    def columns(self):
        """An OpColumns table sorted by start time."""
        columns = {c: np.concatenate(v) for c, v in self.parts.items()}
        start = columns["start"]
        if len(start) > 1 and (start[1:] < start[:-1]).any():
            order = np.argsort(start, kind="stable")
            columns = {k: v[order] for k, v in columns.items()}
        values = {}
        for column, index in self.codes.items():
            values[column] = np.empty(len(index), dtype=object)
            values[column][:] = list(index)
        return OpColumns(columns, values)


def _encode(values, size, index):
    """Codes of a column given as a list, an int64 array or one value for the whole record."""
    if isinstance(values, np.ndarray):
        return _encode_integers(values, index)
    if not isinstance(values, list):
        return np.full(size, _code_of(values, index), dtype=np.intp)
    try:
        return np.fromiter(map(index.__getitem__, values), dtype=np.intp, count=len(values))
    except KeyError:  # new values in this batch: number them in order of first appearance
        for value in dict.fromkeys(values):
            _code_of(value, index)
        return np.fromiter(map(index.__getitem__, values), dtype=np.intp, count=len(values))


def _encode_integers(values, index):
    """Codes of an integer array: a lookup table over its range when that is small (thread and stream
    ids), else np.unique."""
    if not len(values):
        return np.zeros(0, dtype=np.intp)
    low, high = int(values.min()), int(values.max())
    if high - low <= 4 * len(values) + 1024:
        present = np.zeros(high - low + 1, dtype=bool)
        present[values - low] = True
        distinct = np.flatnonzero(present)
        table = np.zeros(len(present), dtype=np.intp)
        table[distinct] = [_code_of(v, index) for v in (distinct + low).tolist()]
        return table[values - low]
    distinct, inverse = np.unique(values, return_inverse=True)
    return np.array([_code_of(v, index) for v in distinct.tolist()], dtype=np.intp)[inverse.reshape(-1)]


def _code_of(value, index):
    code = index.get(value)
    if code is None:
        code = index[value] = len(index)
    return code


def _split_line(line):
    """The fields of a line holding one flat JSON object without backslashes, integer columns as int64
    arrays and the type column, when it surely ends at its first "]", as unparsed text; None for any
    other line."""
    end = len(line) - 1
    while end > 0 and line[end] in b" \t\r\n":
        end -= 1
    if line[:2] != b'{"' or line[end] != ord("}") or b"\\" in line or line.find(b"{", 1) >= 0:
        return None
    view = memoryview(line)
    record = {}
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


def _value(line, view, key, start, end):
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
                return np.fromstring(line[start + 1:stop - 1], dtype=np.int64, sep=","), stop
            except ValueError:  # not all integers
                pass
        if key == "type" and line.count(b'"', start, stop) % 2 == 0:
            return view[start:stop], stop
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
