"""The Ascend profiler's SQLite database for one rank: ``ASCEND_PROFILER_OUTPUT/ascend_{framework}_profiler_{r}.db``.

The msprof DB schema (times in ns, strings as integer ids through ``STRING_IDS``), holding the same
data as the text export: host ops as TASK + COMPUTE_TASK_INFO rows whose task type is ``HOST_CPU``
(and, for PyTorch, PYTORCH_API rows), collectives as COMMUNICATION_OP, steps as STEP_TIME, CPU and host
memory samples as CPU_USAGE / HOST_MEM_USAGE. Tables for data never collected (NPU, disk, network,
MSTX) are not written. One transaction into a temporary file renamed into place; indexes are built
after the inserts, which is cheaper than keeping them up to date row by row.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..analysis import counted_op_mask
from ..contract import names
from . import ascend_comm
from .ascend_text import step_table
from .base import ascend_dir
from .layouts import layout_of

if TYPE_CHECKING:
    from ..analysis import Overlap, Run
    from ..analysis.rundata import RunData

T = TypeVar("T")

NAME = "db"

SCHEMA_VERSION = "1.0.0"
HOST_TASK = "HOST_CPU"
CHUNK = 100_000  # ops bound per executemany
ROWS_PER_INSERT = 500  # rows per INSERT statement (1500 values, within SQLite's 32766)
PAGE_SIZE = 65536  # SQLite's largest
SORT_THREADS = 2
API_TYPE_OP = 50001  # ENUM_API_TYPE's code for an op (PyTorch API level "op")
API_TYPE_COMM = 5500  # ENUM_API_TYPE's code for the communication library's level (msprof's "hccl"; the library is in algType)
# ENUM_HCCL_DATA_TYPE, as the msprof schema numbers it, by torch's dtype names (COMMUNICATION_OP.count is in these elements)
DATA_TYPES = {"INT8": 0, "INT16": 1, "INT32": 2, "FP16": 3, "FP32": 4, "INT64": 5, "UINT64": 6, "UINT8": 7, "UINT16": 8, "UINT32": 9,
              "FP64": 10, "BFP16": 11, "INT128": 12, "N/A": 65534, "INVALID_TYPE": 65535}
TORCH_DATA_TYPES = {"int8": "INT8", "int16": "INT16", "int32": "INT32", "float16": "FP16", "float32": "FP32", "int64": "INT64",
                    "uint64": "UINT64", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "float64": "FP64", "bfloat16": "BFP16"}
DATA_TYPE_BYTES = {"INT8": 1, "INT16": 2, "INT32": 4, "FP16": 2, "FP32": 4, "INT64": 8, "UINT64": 8, "UINT8": 1, "UINT16": 2, "UINT32": 4,
                   "FP64": 8, "BFP16": 2}
TABLES = {
    "META_DATA": "name TEXT, value TEXT",
    "SESSION_TIME_INFO": "startTimeNs INTEGER, endTimeNs INTEGER",
    "HOST_INFO": "hostUid TEXT, hostName TEXT",
    "RANK_DEVICE_MAP": "rankId INTEGER, deviceId INTEGER",
    "STRING_IDS": "id INTEGER PRIMARY KEY, value TEXT",
    "ENUM_API_TYPE": "id INTEGER PRIMARY KEY, name TEXT",
    "ENUM_HCCL_DATA_TYPE": "id INTEGER PRIMARY KEY, name TEXT",
    "CANN_API": "startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER, connectionId INTEGER, name INTEGER",
    "TASK": ("startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER, globalTaskId INTEGER PRIMARY KEY, "
             "globalPid INTEGER, taskType INTEGER, contextId INTEGER, streamId INTEGER, taskId INTEGER, modelId INTEGER"),
    "COMPUTE_TASK_INFO": ("name INTEGER, globalTaskId INTEGER PRIMARY KEY, blockDim INTEGER, mixBlockDim INTEGER, taskType INTEGER, "
                          "opType INTEGER, inputFormats INTEGER, inputDataTypes INTEGER, inputShapes INTEGER, outputFormats INTEGER, "
                          "outputDataTypes INTEGER, outputShapes INTEGER, attrInfo INTEGER, opState INTEGER, hf32Eligible INTEGER"),
    "PYTORCH_API": ("startNs INTEGER, endNs INTEGER, globalTid INTEGER, connectionId INTEGER, name INTEGER, sequenceNumber INTEGER, "
                    "fwdThreadId INTEGER, inputDtypes INTEGER, inputShapes INTEGER, callchainId INTEGER, type INTEGER"),
    "COMMUNICATION_OP": ("opName INTEGER, startNs INTEGER, endNs INTEGER, connectionId INTEGER, groupName INTEGER, opId INTEGER PRIMARY KEY, "
                         "relay INTEGER, retry INTEGER, dataType INTEGER, algType INTEGER, count NUMERIC, opType INTEGER"),
    "STEP_TIME": "id INTEGER PRIMARY KEY, startNs INTEGER, endNs INTEGER",
    "CPU_USAGE": "timestampNs INTEGER, cpuNo TEXT, usage NUMERIC",
    "HOST_MEM_USAGE": "timestampNs INTEGER, usage NUMERIC",
}
TEXT_COLUMNS = {"hccl_op_name", "group_name", "transport_type", "src_rank", "dst_rank", "op_name", "step", "type"}
STEP_TRACE_COLUMNS = ("step", "computing", "communication_not_overlapped", "overlapped", "communication", "free", "stage", "bubble",
                      "communication_not_overlapped_and_exclude_receive", "preparing")
INDEXES = (("TASK", "startNs"), ("PYTORCH_API", "startNs"), ("COMMUNICATION_OP", "startNs"), ("CANN_API", "startNs"), ("CPU_USAGE", "timestampNs"),
           ("HOST_MEM_USAGE", "timestampNs"))


def file_name(data: RunData) -> str:
    return names.rank_file(names.ASCEND_DB, data.rank, framework=layout_of(data).db_framework)


class _Strings:
    """STRING_IDS: the op names and types first (their codes offset), then any other text on demand."""

    def __init__(self, data: RunData) -> None:
        self.values = [""]
        self.ids = {"": 0}
        if data.op_count:
            self.name_base = self._block(data.op_names.tolist())
            self.type_base = self._block(data.op_types.tolist())
            self.shape_base = self._block([s or "" for s in data.ops.code_values["shape"]])

    def _block(self, values: Iterable[Any]) -> int:
        base = len(self.values)
        self.values += [str(v) for v in values]
        return base

    def __call__(self, value: object) -> int:
        text = str(value)
        if text not in self.ids:
            self.ids[text] = len(self.values)
            self.values.append(text)
        return self.ids[text]


def target(run: Run) -> str:
    return ascend_dir(run)


def write(run: Run, root: str) -> dict[str, Any]:
    data, overlap = run.data, run.overlap
    out = os.path.join(root, names.ASCEND_OUTPUT)
    api_tables = layout_of(data).api_tables
    indexes = [i for i in INDEXES if api_tables or i[0] != "PYTORCH_API"]
    counts = _write_db(os.path.join(out, file_name(data)), lambda db: _fill(db, data, overlap), indexes)
    # msprof-analyze's cluster communication recipes (and PyTorch's step table) read the communication analysis database
    _write_db(os.path.join(out, layout_of(data).analysis_db), lambda db: _analysis(db, data, overlap), ())
    return dict(counts, file=file_name(data))


def _analysis(db: sqlite3.Connection, data: RunData, overlap: Overlap) -> None:
    """The communication analysis database (analysis.db; MindSpore's communication_analyzer.db): StepTraceTime and the
    communication tables (``ascend_comm``), what the text export's files hold."""
    db.execute(f"CREATE TABLE StepTraceTime ({', '.join(c + ' NUMERIC' for c in STEP_TRACE_COLUMNS)})")
    db.executemany(f"INSERT INTO StepTraceTime VALUES ({', '.join('?' * len(STEP_TRACE_COLUMNS))})", step_table(overlap))
    rows = ascend_comm.calls(data)
    comm = ascend_comm.communication_json(rows)
    matrix = ((ascend_comm.CALL_MATRIX_COLUMNS, ascend_comm.call_matrix_rows(rows)) if layout_of(data).call_matrix
              else (ascend_comm.MATRIX_COLUMNS, ascend_comm.matrix_rows(ascend_comm.matrix_json(rows))))
    for table, columns, values in ((names.ASCEND_COMM_TIME_TABLE, ascend_comm.TIME_COLUMNS, ascend_comm.time_rows(comm)),
                                   (names.ASCEND_COMM_BANDWIDTH_TABLE, ascend_comm.BANDWIDTH_COLUMNS, ascend_comm.bandwidth_rows(comm)),
                                   (names.ASCEND_COMM_MATRIX_TABLE, *matrix)):
        db.execute(f"CREATE TABLE {table} ({', '.join(c + (' TEXT' if c in TEXT_COLUMNS else ' NUMERIC') for c in columns)})")
        db.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns))})", values)


def _write_db(path: str, fill: Callable[[sqlite3.Connection], T], indexes: Iterable[tuple[str, str]]) -> T:
    """A database built by ``fill`` in one transaction into a temporary file renamed into place."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=os.path.dirname(path))
    os.close(fd)
    try:
        with contextlib.closing(sqlite3.connect(tmp, isolation_level=None)) as db:
            db.execute("PRAGMA journal_mode=OFF")
            db.execute("PRAGMA synchronous=OFF")
            db.execute("PRAGMA temp_store=MEMORY")
            db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # fewer, larger pages: a fifth less time for millions of rows
            db.execute(f"PRAGMA threads={SORT_THREADS}")  # the index builds sort with helper threads
            db.execute("BEGIN")
            result = fill(db)
            for table, column in indexes:
                db.execute(f"CREATE INDEX {table}_{column} ON {table} ({column})")
            db.execute("COMMIT")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    return result


def _fill(db: sqlite3.Connection, data: RunData, overlap: Overlap) -> dict[str, int]:
    meta = data.meta
    api_tables = layout_of(data).api_tables
    for table, columns in TABLES.items():
        if table != "PYTORCH_API" or api_tables:
            db.execute(f"CREATE TABLE {table} ({columns})")
    strings = _Strings(data)
    pid = int(meta.get("pid") or 0)
    db.executemany("INSERT INTO META_DATA VALUES (?, ?)", [("SCHEMA_VERSION", SCHEMA_VERSION), ("producer", "msprof-agent"),
                                                             ("framework", str(meta.get("framework"))),
                                                             ("parallel_group_info", json.dumps(ascend_comm.parallel_group_info(data)))])
    steps = data.window_steps or data.steps
    start = steps[0]["start"] if steps else int(meta.get("started_ns") or 0)
    end = steps[-1]["end"] if steps else start
    db.execute("INSERT INTO SESSION_TIME_INFO VALUES (?, ?)", (start, end))
    db.execute("INSERT INTO HOST_INFO VALUES (?, ?)", (str(meta.get("host", "")), str(meta.get("host", ""))))
    db.execute("INSERT INTO RANK_DEVICE_MAP VALUES (?, ?)", (data.rank, int(meta.get("device_id") or 0)))
    db.executemany("INSERT INTO ENUM_API_TYPE VALUES (?, ?)", [(API_TYPE_COMM, "hccl"), (API_TYPE_OP, "op")])
    db.executemany("INSERT INTO ENUM_HCCL_DATA_TYPE VALUES (?, ?)", [(code, name) for name, code in DATA_TYPES.items()])
    db.executemany("INSERT INTO STEP_TIME VALUES (?, ?, ?)", [(r["n"], r["start"], r["end"]) for r in overlap.stages])
    tasks = _ops(db, data, strings, pid, api_tables)
    calls = _collectives(db, data, strings, pid, tasks)
    db.executemany("INSERT INTO CPU_USAGE VALUES (?, ?, ?)", [(c["ts"], "Avg", round(100 - c["idle"], 2)) for c in data.cpu])
    capacity = meta.get("memory_bytes") or 0
    if capacity:
        db.executemany("INSERT INTO HOST_MEM_USAGE VALUES (?, ?)",
                       [(c["ts"], round(100 * c["rss"] / capacity, 4)) for c in data.cpu])
    db.executemany("INSERT INTO STRING_IDS VALUES (?, ?)", enumerate(strings.values))
    return {"tasks": tasks, "collectives": calls}


def _collectives(db: sqlite3.Connection, data: Any, strings: _Strings, pid: int, tasks: int) -> int:
    """COMMUNICATION_OP, and the call of each on the communication library's level as CANN_API (the row
    msprof-analyze's slow-rank recipe joins it to by ``connectionId``, numbered after the ops'). ``count``
    is in elements of ``dataType`` where the call's tensors had one type, else its bytes with type N/A.
    The calling thread is not recorded: ``globalTid`` holds the process alone."""
    rows = ascend_comm.calls(data)
    backend = strings(str(data.meta.get("backend") or "gloo"))
    op_rows, api_rows = [], []
    for i, call in enumerate(rows):
        dtype = TORCH_DATA_TYPES.get(call["dtype"] or "", "N/A")
        count = call["bytes"] // DATA_TYPE_BYTES[dtype] if dtype in DATA_TYPE_BYTES else call["bytes"]
        connection = tasks + 1 + i
        op_rows.append((strings(call["op"]), call["start_ns"], call["end_ns"], connection, strings(call["key"]), i, 0, 0, DATA_TYPES[dtype],
                        backend, count, strings(call["name"])))
        api_rows.append((call["start_ns"], call["end_ns"], API_TYPE_COMM, pid << 32, connection, strings(call["name"])))
    db.executemany("INSERT INTO COMMUNICATION_OP VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", op_rows)
    db.executemany("INSERT INTO CANN_API VALUES (?, ?, ?, ?, ?, ?)", api_rows)
    return len(rows)


def _insert_rows(db: sqlite3.Connection, table: str, row: str, values: np.ndarray) -> None:
    """Insert a row per line of the int64 matrix ``values`` into ``table``, ``ROWS_PER_INSERT`` rows per statement:
    SQLite's cost is per statement run far more than per value bound. ``row`` is the SQL of one row, ``{0}``,
    ``{1}``... standing for the line's values and ``{id}`` for its line number counted from 1 (one parameter
    per statement rather than one per row)."""
    width = values.shape[1]
    numbered = "{id}" in row  # a statement's parameters are exactly those it names

    def statement(rows: int) -> str:
        marks = [row.format(*(f"?{r * width + c + 1}" for c in range(width)), id=f"?{rows * width + 1} + {r}") for r in range(rows)]
        return f"INSERT INTO {table} VALUES {', '.join(marks)}"

    whole = len(values) // ROWS_PER_INSERT * ROWS_PER_INSERT
    many = statement(ROWS_PER_INSERT)
    for lo in range(0, whole, CHUNK):  # Python lists of a chunk at a time, not of every op at once
        block = values[lo:min(lo + CHUNK, whole)].reshape(-1, width * ROWS_PER_INSERT)
        if numbered:
            block = np.column_stack((block, np.arange(lo + 1, lo + 1 + len(block) * ROWS_PER_INSERT, ROWS_PER_INSERT)))
        db.executemany(many, block.tolist())
    if whole < len(values):
        db.execute(statement(len(values) - whole), values[whole:].reshape(-1).tolist() + [whole + 1] * numbered)


def _ops(db: sqlite3.Connection, data: RunData, strings: _Strings, pid: int, api_tables: bool) -> int:
    """TASK + COMPUTE_TASK_INFO (and PYTORCH_API) rows of the host ops in the profiled steps, as the op tables count them.

    Rows go straight into the tables, many per statement (``_insert_rows``), each binding only the values
    that differ between ops: the values every op shares are written into the statement, and an op's id
    (globalTaskId) is left to SQLite, which numbers a new table's rows 1, 2, ... as given (an explicit
    INTEGER PRIMARY KEY costs a uniqueness check per row: a quarter of the time)."""
    if not data.op_count:
        return 0
    ops = data.ops
    index = np.flatnonzero(counted_op_mask(data))
    if not len(index):
        return 0
    start = ops["start"][index].astype(np.int64)
    end = start + ops["dur"][index]
    name = ops["name_id"][index].astype(np.int64) + strings.name_base
    op_type = ops["type_id"][index].astype(np.int64) + strings.type_base
    shape = ops["shape_id"][index].astype(np.int64) + strings.shape_base
    tids = np.array([int(t) if str(t).isdigit() else 0 for t in ops.code_values["tid"]], dtype=np.int64)
    tid = tids[ops["tid_id"][index]]
    host = strings(HOST_TASK)
    device = int(data.meta.get("device_id") or 0)
    _insert_rows(db, "TASK (startNs, endNs, deviceId, connectionId, globalTaskId, globalPid, taskType, streamId, taskId)",
                 f"({{0}}, {{1}}, {device}, {{id}}, NULL, {pid}, {host}, {{2}}, {{id}})", np.stack((start, end, tid), axis=1))
    _insert_rows(db, "COMPUTE_TASK_INFO (name, globalTaskId, taskType, opType, inputShapes)",
                 f"({{0}}, NULL, {host}, {{1}}, {{2}})", np.stack((name, op_type, shape), axis=1))
    if api_tables:
        _insert_rows(db, "PYTORCH_API (startNs, endNs, globalTid, connectionId, name, inputShapes, type)",
                     f"({{0}}, {{1}}, {pid << 32} | {{2}}, {{id}}, {{3}}, {{4}}, {API_TYPE_OP})",
                     np.stack((start, end, tid, name, shape), axis=1))
    return len(index)
