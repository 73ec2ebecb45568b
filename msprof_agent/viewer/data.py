"""Find profiled runs under a directory and read their analysed files (the output contract) into plain dicts.

Every reader returns a *section*: ``{"status": "ok"|"missing"|"error", "file", "data", "error"}``, so a
page shows "not collected" for a missing file and an error for a malformed or half-written one, and one
bad file never takes down a page or the server. Nothing here writes.
"""
import contextlib
import csv
import io
import json
import os
import re
import time

import orjson

_INFO_RE = re.compile(r"^profiler_info_(\d+)\.json$")
_RANK_DIR_RE = re.compile(r"^rank_?\d+$")
TEN_NS_PER_MS = 100_000  # step trace times are in units of 10 ns
TIMELINE_PREFIXES = ("cpu", "ascend", "gpu")
MAX_TABLE_ROWS = 5000  # per table on a page; the API still returns every row


class Run:
    """One profiled job: its id (path relative to the base, '/' separated) and the profiler dir of each rank."""

    def __init__(self, run_id, ranks):
        self.id = run_id
        self.ranks = ranks  # {rank: absolute profiler dir}

    def as_dict(self):
        return {"run": self.id, "ranks": sorted(self.ranks)}


def _inside(path, base_real):
    real = os.path.realpath(path)
    return real == base_real or real.startswith(base_real.rstrip(os.sep) + os.sep)


def _run_key(directory):
    """Group ``job/rank_N/profiler`` and ``job/profiler`` under ``job``; any other holder is its own run."""
    parent, name = os.path.split(directory)
    if name == "profiler":
        grand, parent_name = os.path.split(parent)
        return grand if _RANK_DIR_RE.match(parent_name) else parent
    return directory


def scan(base):
    """All runs under ``base`` at any depth, keyed by id. Symlinks are not followed out of ``base``."""
    base_real = os.path.realpath(base)
    groups = {}
    for directory, subdirs, files in os.walk(base_real, followlinks=False):
        subdirs[:] = sorted(d for d in subdirs if _inside(os.path.join(directory, d), base_real))
        ranks = sorted(int(m.group(1)) for m in map(_INFO_RE.match, files) if m)
        if not ranks:
            continue
        key = _run_key(directory)
        if not _inside(key, base_real):
            key = directory
        group = groups.setdefault(key, {})
        for rank in ranks:
            group.setdefault(rank, directory)
    runs = {}
    for key, ranks in groups.items():
        rel = os.path.relpath(key, base_real).replace(os.sep, "/")
        runs[rel] = Run(rel, ranks)
    return runs


class RunIndex:
    """Scan results cached for a moment; a miss rescans, so new runs appear without a restart."""

    def __init__(self, base, ttl=2.0):
        self.base = os.path.realpath(base)
        self.ttl = ttl
        self._runs, self._at = {}, 0.0

    def runs(self, fresh=False):
        if fresh or time.monotonic() - self._at > self.ttl:
            self._runs, self._at = scan(self.base), time.monotonic()
        return self._runs

    def get(self, run_id):
        run = self.runs().get(run_id)
        if run is None:
            run = self.runs(fresh=True).get(run_id)
        return run


# ---- sections ---------------------------------------------------------------------------------------

def _section(status, file=None, data=None, error=None):
    return {"status": status, "file": file, "data": data, "error": error}


_shared = None  # {(path, mtime, size, parse): section} inside shared_reads()


@contextlib.contextmanager
def shared_reads():
    """Within the block, a file several pages show (the step trace: overview and steps) is read and
    parsed once. Sections are read-only for the renderers, so sharing them is safe."""
    global _shared
    _shared = {}
    try:
        yield
    finally:
        _shared = None


def _read_file(profiler_dir, name, parse):
    """Read one contract file with ``parse(bytes)``; symlinks leading out of the profiler dir are refused."""
    path = os.path.join(profiler_dir, name)
    if not os.path.isfile(path):
        return _section("missing", name)
    if not _inside(path, os.path.realpath(profiler_dir)):
        return _section("error", name, error="refused: the file links outside the profiler directory")
    key = None
    if _shared is not None:
        stat = os.stat(path)
        key = (path, stat.st_mtime_ns, stat.st_size, parse)
        if key in _shared:
            return _shared[key]
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
        section = _section("ok", name, parse(raw))
    except Exception as exc:  # a malformed or half-written file is shown on its page
        section = _section("error", name, error=f"{type(exc).__name__}: {exc}")
    if key is not None:
        _shared[key] = section
    return section


def _first(profiler_dir, names, parse):
    """The first of several alternative files that exists (e.g. cpu/gpu variants)."""
    for name in names:
        if os.path.isfile(os.path.join(profiler_dir, name)):
            return _read_file(profiler_dir, name, parse)
    return _section("missing", " or ".join(names))


def _json(raw):
    return orjson.loads(raw)


def _csv_rows(raw):
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8"))))
    if not rows:
        raise ValueError("empty file")
    return rows[0], [r for r in rows[1:] if r]


def _num(text):
    """A number from a CSV cell; empty or non-numeric cells (e.g. an absent fp point) become None."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value else None


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _need(row, width, what):
    if len(row) < width:
        raise ValueError(f"{what}: row {row[:3]!r}... has {len(row)} columns, expected at least {width}")


def _parse_step_trace(raw):
    _, rows = _csv_rows(raw)
    steps, average, raw_points = [], None, []
    for row in rows:
        _need(row, 9, "step trace")
        ms = [None if value is None else value / TEN_NS_PER_MS for value in map(_num, row[1:9])]
        item = dict(zip(("start", "end", "total", "fp", "bp", "iteration_interval", "fp_and_bp", "tail"), ms))
        if row[0].strip() == "-":
            average = item
        else:
            item["step"] = int(float(row[0]))
            steps.append(item)
            raw_points.append(row[1:6])
    # Offsets from exact integers: epoch times in 10 ns lose their last digits as float milliseconds.
    first = _int(raw_points[0][0]) if raw_points else None
    for item, (start, end, _, fp, bp) in zip(steps, raw_points):
        start, end, fp, bp = _int(start), _int(end), _int(fp), _int(bp)
        item["start_offset"] = None if None in (start, first) else (start - first) / TEN_NS_PER_MS
        item["end_offset"] = None if None in (end, first) else (end - first) / TEN_NS_PER_MS
        item["fp_offset"] = None if None in (fp, start) else (fp - start) / TEN_NS_PER_MS
        item["bp_offset"] = None if None in (bp, start) else (bp - start) / TEN_NS_PER_MS
    if average is None and steps:
        raise ValueError("step trace: the average row (step_num '-') is missing; the file may be half-written")
    return {"steps": steps, "average": average}


def _parse_op_types(raw):
    header, rows = _csv_rows(raw)
    out = []
    for row in rows:
        _need(row, 6, "operator types")
        out.append({"op_type": row[0], "occurrences": _num(row[1]), "per_step": _num(row[2]),
                    "total_ms": _num(row[3]), "avg_ms": _num(row[4]), "percent": _num(row[5])})
    out.sort(key=lambda r: -(r["total_ms"] or 0))
    return out


def _parse_op_detail(raw):
    _, rows = _csv_rows(raw)
    out = []
    for row in rows:
        _need(row, 8, "operator detail")
        out.append({"op_side": row[0], "op_type": row[1], "op_name": row[2], "full_op_name": row[3],
                    "occurrences": _num(row[4]), "total_ms": _num(row[5]), "avg_ms": _num(row[6]),
                    "proportion": _num(row[7]), "subgraph": row[8] if len(row) > 8 else "",
                    "pid": row[9] if len(row) > 9 else ""})
    out.sort(key=lambda r: -(r["total_ms"] or 0))
    return out


def _parse_flops(raw):
    """``flops_{r}.txt``: a header line, then ``name, MFLOPs(cube), GFLOPS(cube), MFLOPs(vec), GFLOPS(vec)``."""
    _, rows = _csv_rows(raw)
    out = {}
    for row in rows:
        _need(row, 5, "flops")
        out[row[0].strip()] = [_num(v) for v in row[1:5]]
    return out


def _parse_queue(raw):
    """Iterator / device-queue profiling lines: ``0 kind step cost_ms ts`` (fetch) and ``1 cap step size ts`` (queue)."""
    fetch, queue = [], []
    for number, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 5:
            raise ValueError(f"line {number}: expected 5 fields, got {len(parts)}")
        kind, a, step, value, ts = parts[0], int(parts[1]), int(parts[2]), float(parts[3]), float(parts[4])
        if kind == "0":
            fetch.append({"kind": a, "step": step, "cost_ms": value, "ts": ts})
        elif kind == "1":
            queue.append({"capacity": a, "step": step, "size": value, "ts": ts})
        else:
            raise ValueError(f"line {number}: unknown record type {kind!r}")
    sizes = [q["size"] for q in queue]
    gets = [f["cost_ms"] for f in fetch if f["kind"] == 0]  # 0 get, 1 push, 2 total
    stats = {
        "queue_samples": len(sizes),
        "empty_count": sum(1 for s in sizes if s <= 0),
        "empty_ratio": (sum(1 for s in sizes if s <= 0) / len(sizes)) if sizes else None,
        "queue_size_mean": (sum(sizes) / len(sizes)) if sizes else None,
        "capacity": max((q["capacity"] for q in queue), default=None),
        "fetch_count": len(gets),
        "fetch_ms_mean": (sum(gets) / len(gets)) if gets else None,
        "fetch_ms_max": max(gets) if gets else None,
    }
    return {"fetch": fetch, "queue": queue, "stats": stats}


def _parse_pipeline(raw):
    _, rows = _csv_rows(raw)
    ops = []
    for row in rows:
        _need(row, 10, "pipeline")
        sizes = json.loads(row[3]) if row[3].strip() else []
        children = json.loads(row[9]) if row[9].strip() else []
        ops.append({"op_id": int(float(row[0])), "op_type": row[1], "num_workers": _num(row[2]),
                    "queue_sizes": [s for s in sizes if isinstance(s, (int, float))],
                    "queue_average": _num(row[4]), "queue_length": _num(row[5]), "queue_usage": _num(row[6]),
                    "sample_interval": _num(row[7]), "parent_id": int(float(row[8])) if _num(row[8]) is not None else -1,
                    "children": [int(c) for c in children]})
    return {"ops": ops, "bottlenecks": pipeline_bottlenecks(ops)}


def pipeline_bottlenecks(ops, high=0.8, low=0.6):
    """The seed's reading of queue usage: an op whose input queues are full and output queue empty-ish is slow;
    a source op whose output is low, or the last op whose inputs are all high, likewise."""
    by_id = {op["op_id"]: op for op in ops}
    marked = []
    for op in ops:
        inputs = [by_id[c]["queue_usage"] for c in op["children"] if c in by_id and by_id[c]["queue_usage"] is not None]
        out = op["queue_usage"]
        is_root = op["parent_id"] not in by_id
        if not op["children"] and out is not None and out < low:
            marked.append({"op_id": op["op_id"], "why": f"source op; its output queue usage {out:.0%} < {low:.0%}"})
        elif inputs and min(inputs) > high and (is_root or (out is not None and out < low)):
            where = "last op" if is_root else f"output queue usage {out:.0%} < {low:.0%}"
            marked.append({"op_id": op["op_id"], "why": f"input queue usage {min(inputs):.0%} > {high:.0%}; {where}"})
    return marked


def _parse_cpu(raw):
    data = orjson.loads(raw)
    if not isinstance(data, dict) or "time_stamp" not in data:
        raise ValueError("no time_stamp list")
    return data


def _parse_hccl(raw):
    _, rows = _csv_rows(raw)
    steps, average = [], None
    for row in rows:
        _need(row, 3, "hccl")
        item = {"communication_ms": _num(row[1]), "wait_ms": _num(row[2])}
        if row[0].strip() == "-":
            average = item
        else:
            item["step"] = int(float(row[0]))
            steps.append(item)
    return {"steps": steps, "average": average}


def timeline_file(profiler_dir, rank):
    """Name of the rank's Trace Event file (cpu/ascend/gpu variant), or None."""
    for prefix in TIMELINE_PREFIXES:
        name = f"{prefix}_timeline_display_{rank}.json"
        if os.path.isfile(os.path.join(profiler_dir, name)):
            return name
    return None


def memory_lines(details):
    """The per-graph memory curves (MB) of ``memory_usage_details``: a dict keyed by graph, a list, or one graph.
    With ``time_stamp_ns`` / ``time_stamp`` (ms) beside ``lines`` the curve is over time, else over execution order."""
    if isinstance(details, dict) and "lines" in details:
        graphs = [details]
    elif isinstance(details, dict):
        graphs = [g for g in details.values() if isinstance(g, dict)]
    elif isinstance(details, list):
        graphs = [g for g in details if isinstance(g, dict)]
    else:
        raise ValueError("unexpected memory details layout")
    out = []
    for index, graph in enumerate(graphs):
        lines = [v for v in graph.get("lines") or [] if isinstance(v, (int, float))]
        x = None
        for key, per_second in (("time_stamp_ns", 1e9), ("time_stamp", 1e3)):  # seconds from the first sample
            stamps = graph.get(key)
            if isinstance(stamps, list) and len(stamps) == len(lines) and lines:
                x = [(t - stamps[0]) / per_second for t in stamps]
                break
        out.append({"graph_id": graph.get("graph_id", index), "lines": lines, "x": x,
                    "peak": max(lines) if lines else None, "static_mem": graph.get("static_mem")})
    return out


# which sections each page needs: a page reads only these files
PAGE_SECTIONS = {
    "overview": ("info", "summary", "step_trace", "op_types", "queue", "timeline"),
    "steps": ("info", "summary", "step_trace", "point_info"),
    "operators": ("info", "op_types", "op_detail", "flops", "flops_summary"),
    "data": ("info", "summary", "queue", "pipeline"),
    "resources": ("info", "summary", "cpu", "memory_summary", "memory_details"),
    "cluster": (),
}
PAGES = ("overview", "steps", "operators", "data", "resources", "cluster")


# Each section: the contract files that may hold it (first present wins) and its parser.
SECTIONS = {
    "info": (("profiler_info_{r}.json",), _json),
    "summary": (("summary_{r}.json",), _json),
    "step_trace": (("step_trace_raw_{r}_detail_time.csv",), _parse_step_trace),
    "point_info": (("step_trace_point_info_{r}.json",), _json),
    "op_types": (("cpu_op_type_info_{r}.csv",), _parse_op_types),
    "op_detail": (("cpu_op_detail_info_{r}.csv",), _parse_op_detail),
    "flops": (("flops_{r}.txt",), _parse_flops),
    "flops_summary": (("flops_summary_{r}.json",), _json),
    "queue": (("dataset_iterator_profiling_{r}.txt", "device_queue_profiling_{r}.txt"), _parse_queue),
    "pipeline": (("minddata_pipeline_raw_{r}.csv",), _parse_pipeline),
    "cpu": (("minddata_cpu_utilization_{r}.json",), _parse_cpu),
    "memory_summary": (("memory_usage_summary_{r}.json",), _json),
    "memory_details": (("memory_usage_details_{r}.json",), lambda raw: memory_lines(orjson.loads(raw))),
    "hccl": (("hccl_raw_{r}.csv",), _parse_hccl),
    "timeline": (tuple(f"{p}_timeline_summary_{{r}}.json" for p in TIMELINE_PREFIXES), _json),
}


def load_section(profiler_dir, rank, name):
    patterns, parse = SECTIONS[name]
    return _first(profiler_dir, [p.format(r=rank) for p in patterns], parse)


def load_page(run, rank, page):
    """The sections one page of one rank shows; the cluster page reads every rank's step trace and hccl."""
    if page == "cluster":
        ranks = {}
        for r, directory in sorted(run.ranks.items()):
            ranks[r] = {"step_trace": load_section(directory, r, "step_trace"), "hccl": load_section(directory, r, "hccl")}
        return {"ranks": ranks, "slowest": slowest_rank(ranks)}
    directory = run.ranks[rank]
    out = {name: load_section(directory, rank, name) for name in PAGE_SECTIONS[page]}
    if page == "overview":
        out["timeline_file"] = timeline_file(directory, rank)
    return out


def slowest_rank(ranks):
    """The rank with the most work of its own per step (interval + forward/backward, before the tail where it
    waits for its peers), or None. Total step time cannot tell: synchronised ranks all wait for the slowest."""
    own = {}
    for r, sections in ranks.items():
        st = sections["step_trace"]
        average = st["data"]["average"] if st["status"] == "ok" else None
        if average and average["iteration_interval"] is not None and average["fp_and_bp"] is not None:
            own[r] = average["iteration_interval"] + average["fp_and_bp"]
    return max(own, key=own.get) if len(own) > 1 else None
