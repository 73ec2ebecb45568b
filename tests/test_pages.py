"""The analyses on small hand-written raw stores, where every number in the analysed files is known.

The stores are written with the agent's own ``EventWriter`` (record kinds: docs/ARCHITECTURE.md). Two
files are also compared byte for byte with gold copies in ``tests/gold/``: a change to the contract
shows up here as a diff. ``MSPROF_UPDATE_GOLD=1`` rewrites the gold copies (review the diff after).
"""
import json
import os
import time

import pytest

from conftest import ROOT, read_csv, read_json, step_trace
from msprof_agent.contract.summary import SUMMARY_VERSION, Summary
from msprof_agent.pipeline import analyse_rank
from msprof_agent.records import FORMAT
from msprof_agent.store import EventWriter, coded

pytestmark = pytest.mark.unit

GOLD = os.path.join(ROOT, "tests", "gold")
BASE = 1_700_000_000_000_000_000  # ns: an epoch time, as the integrations record
MS = 1_000_000
STEP_MS = 10
# (full name, type, start and duration in ms within each step): fetch 0-1, forward from 2, optimizer last.
STEP_OPS = [("Default/net/Conv2D-op0", "Conv2D", 2, 3), ("Default/net/MatMul-op1", "MatMul", 5, 2),
            ("Default/optimizer/ApplyMomentum-op2", "ApplyMomentum", 8, 1)]


def write_store(profiler_dir, steps, ops, meta=None, cpu=()):
    """A raw store for rank 0: meta, the step records, one coded ops batch, cpu samples, an end record."""
    writer = EventWriter(profiler_dir, 0, 0)
    writer.add(dict({"k": "meta", "format": FORMAT, "framework": "mindspore", "device_target": "CPU", "pid": 4242, "rank_id": 0, "cpus": 2,
                     "options": {"cpu_sampling_interval": 1000}}, **(meta or {})))
    for step in steps:
        writer.add(dict(step, k="step"))
    names, types, starts, durs = (list(column) for column in zip(*ops))
    record = {"k": "ops", "source": "test", "device": "cpu", "start": starts, "dur": durs, "tid": [1] * len(ops)}
    record["name_codes"], record["name_table"] = coded(names)
    record["type_codes"], record["type_table"] = coded(types)
    writer.add(record)
    for sample in cpu:
        writer.add(dict(sample, k="cpu"))
    writer.add({"k": "end", "reason": "exit", "steps": len(steps)})
    writer.close()


def step_record(n, win=True):
    start = BASE + (n - 1) * STEP_MS * MS
    return {"n": n, "start": start, "end": start + STEP_MS * MS, "wait": 1 * MS, "waits": [[start, start + MS]],
            "fp": None, "bp": None, "win": win}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """Steps 1-3 profiled, step 4 timed outside the window (its ops must count nowhere), 4 CPU samples."""
    profiler_dir = str(tmp_path_factory.mktemp("run") / "profiler")
    steps = [step_record(n, win=n <= 3) for n in range(1, 5)]
    ops = [(name, kind, s["start"] + at * MS, dur * MS) for s in steps for name, kind, at, dur in STEP_OPS]
    cpu = [{"ts": BASE + 10 * i * MS, "span": 10 * MS, "user": 40 + i, "sys": 5, "nice": 0, "iowait": 0, "steal": 0, "idle": 55 - i, "ctx": 100, "run": 2,
            "puser": 30.4 + i, "psys": 2.6, "rss": 100 * MS} for i in range(4)]
    write_store(profiler_dir, steps, ops, cpu=cpu)
    return profiler_dir, analyse_rank(profiler_dir, 0)


def check_gold(path):
    """The file at PATH equals its gold copy, byte for byte."""
    gold = os.path.join(GOLD, os.path.basename(path))
    with open(path, "rb") as handle:
        written = handle.read()
    if os.environ.get("MSPROF_UPDATE_GOLD"):
        os.makedirs(GOLD, exist_ok=True)
        with open(gold, "wb") as handle:
            handle.write(written)
    with open(gold, "rb") as handle:
        assert written.decode() == handle.read().decode(), f"{path} differs from {gold}"


def test_step_trace_splits_each_step_at_the_fetch_and_the_optimizer(analysed):
    """FP: the first op after the data fetch (Conv2D at 2 ms); BP: the end of the op before the first
    optimizer op (MatMul, ending at 7 ms). In 10 ns units: interval 2 ms, fp_and_bp 5 ms, tail 3 ms."""
    profiler_dir, _ = analysed
    header, rows, average = step_trace(profiler_dir)
    assert header == ["step_num", "start_point", "end_point", "total", "fp_point", "bp_point", "iteration_interval", "fp_and_bp", "tail"]
    expected = []
    for n in (1, 2, 3):
        start = (BASE + (n - 1) * STEP_MS * MS) // 10
        expected.append([str(v) for v in (n, start, start + 1_000_000, 1_000_000, start + 200_000, start + 700_000, 200_000, 500_000, 300_000)])
    assert rows == expected
    mean_start = sum(int(r[1]) for r in expected) / 3
    assert average == [["-"] + [str(round(v)) for v in (mean_start, mean_start + 1_000_000, 1_000_000, mean_start + 200_000,
                                                         mean_start + 700_000, 200_000, 500_000, 300_000)]]  # integers, as MindInsight reads them
    assert read_json(os.path.join(profiler_dir, "step_trace_point_info_0.json")) == {
        "fp_start": "Default/net/Conv2D-op0", "bp_end": "Default/net/MatMul-op1"}
    check_gold(os.path.join(profiler_dir, "step_trace_raw_0_detail_time.csv"))


def test_operator_tables_count_the_window_steps_only(analysed):
    profiler_dir, _ = analysed
    types = read_csv(os.path.join(profiler_dir, "cpu_op_type_info_0.csv"))
    assert types[1:] == [["Conv2D", "3", "1", "9.0", "3.0", "0.5"], ["MatMul", "3", "1", "6.0", "2.0", "0.333333"],
                         ["ApplyMomentum", "3", "1", "3.0", "1.0", "0.166667"]]
    detail = read_csv(os.path.join(profiler_dir, "cpu_op_detail_info_0.csv"))
    assert detail[1:] == [["Host", "Conv2D", "Conv2D-op0", "Default/net/Conv2D-op0", "3", "9.0", "3.0", "0.5", "Default", "4242"],
                          ["Host", "MatMul", "MatMul-op1", "Default/net/MatMul-op1", "3", "6.0", "2.0", "0.333333", "Default", "4242"],
                          ["Host", "ApplyMomentum", "ApplyMomentum-op2", "Default/optimizer/ApplyMomentum-op2", "3", "3.0", "1.0",
                           "0.166667", "Default", "4242"]]
    check_gold(os.path.join(profiler_dir, "cpu_op_type_info_0.csv"))


def test_summary_counts_and_stages(analysed):
    profiler_dir, summary = analysed
    assert summary == read_json(os.path.join(profiler_dir, "summary_0.json"))
    assert list(summary) == list(Summary.__annotations__) and summary["summary_version"] == SUMMARY_VERSION  # the schema is the file
    assert (summary["steps_profiled"], summary["steps_total"], summary["ops_recorded"]) == (3, 4, 12)
    assert summary["end_reason"] == "exit" and summary["framework"] == "mindspore"
    assert summary["step_time_ms"] == {"mean": 10.0, "p50": 10.0, "p90": 10.0, "max": 10.0}
    assert summary["stages_ms"] == pytest.approx({"iteration_interval": 2.0, "fp_and_bp": 5.0, "tail": 3.0})
    assert summary["stage_share"] == pytest.approx({"iteration_interval": 0.2, "fp_and_bp": 0.5, "tail": 0.3})
    assert summary["data_wait_ms"]["p50"] == 1.0
    assert [t["op_type"] for t in summary["top_op_types"]] == ["Conv2D", "MatMul", "ApplyMomentum"]
    timeline = read_json(os.path.join(profiler_dir, "cpu_timeline_summary_0.json"))
    assert timeline["num_of_ops"] == 12  # the timeline shows every recorded op, step 4's too


def test_cpu_samples_become_integer_percent_series(analysed):
    profiler_dir, summary = analysed
    cpu = read_json(os.path.join(profiler_dir, "minddata_cpu_utilization_0.json"))
    assert cpu["cpu_processor_num"] == 2 and cpu["sampling_interval"] == 10  # the typical gap: the default interval adapts
    assert cpu["time_stamp"] == [BASE // MS + 10 * i for i in range(4)]
    assert cpu["device_info"]["user_utilization"] == [40, 41, 42, 43]
    assert cpu["device_info"]["idle_utilization"] == [55, 54, 53, 52]
    assert cpu["process_info"] == {"user_utilization": [30, 31, 32, 33], "sys_utilization": [3, 3, 3, 3]}
    # contract.readers.cpu_means of the written (integer percent) series, time-weighted: the figures report and viewer show
    assert summary["cpu"] == {"machine_busy_mean": 46.5, "machine_user_mean": 41.5, "machine_sys_mean": 5.0, "machine_iowait_mean": 0.0,
                              "machine_nice_mean": 0.0, "machine_steal_mean": 0.0, "machine_irq_mean": 0.0,
                              "process_user_mean": 31.5, "process_sys_mean": 3.0, "agent_mean": 0.0, "samples": 4}


def test_every_busy_state_is_written_and_they_add_up_to_busy(tmp_path):
    """user + sys + nice + iowait + steal = 100 - idle, sample by sample and in the means the pages show."""
    profiler_dir = str(tmp_path / "profiler")
    cpu = [{"ts": BASE + 10 * i * MS, "span": 10 * MS, "user": 5.6, "sys": 1.8, "nice": 90.0 - i, "iowait": 1.0, "steal": 1.0 + i, "idle": 0.6,
            "ctx": 100, "run": 2, "puser": 3.0, "psys": 1.0, "rss": 100 * MS} for i in range(4)]
    steps = [step_record(n) for n in range(1, 4)]
    write_store(profiler_dir, steps, [(name, kind, s["start"] + at * MS, dur * MS) for s in steps for name, kind, at, dur in STEP_OPS], cpu=cpu)
    means = analyse_rank(profiler_dir, 0)["cpu"]
    device = read_json(os.path.join(profiler_dir, "minddata_cpu_utilization_0.json"))["device_info"]
    assert device["nice_utilization"] == [90, 89, 88, 87] and device["steal_utilization"] == [1, 2, 3, 4] and device["io_utilization"] == [1] * 4
    states = ("user", "sys", "nice", "io", "steal")
    assert [sum(device[f"{state}_utilization"][i] for state in states) for i in range(4)] == [100 - v for v in device["idle_utilization"]]
    assert sum(means[f"machine_{state}_mean"] for state in ("user", "sys", "nice", "iowait", "steal")) == means["machine_busy_mean"] == 99.0


def test_nested_ops_count_self_times(tmp_path):
    """Sources that record nested calls (torch) set meta ``nested_ops``: an outer op's time in the tables
    is its own, without its children's, so the percentages add up to the time spent."""
    profiler_dir = str(tmp_path / "profiler")
    step = step_record(1)
    at = step["start"]
    ops = [("aten::linear", "aten::linear", at + 2 * MS, 6 * MS), ("aten::addmm", "aten::addmm", at + 3 * MS, 4 * MS),
           ("aten::relu", "aten::relu", at + 8 * MS, 1 * MS)]
    write_store(profiler_dir, [step], ops, meta={"framework": "torch", "nested_ops": True})
    analyse_rank(profiler_dir, 0)
    types = {row[0]: row[1:] for row in read_csv(os.path.join(profiler_dir, "cpu_op_type_info_0.csv"))[1:]}
    assert types == {"aten::addmm": ["1", "1", "4.0", "4.0", "0.571429"], "aten::linear": ["1", "1", "2.0", "2.0", "0.285714"],
                     "aten::relu": ["1", "1", "1.0", "1.0", "0.142857"]}
    info = read_json(os.path.join(profiler_dir, "profiler_info_0.json"))
    assert (info["framework"], info["context_mode"], info["rank_size"], info["pid"]) == ("torch", "pynative", 1, 4242)


def test_analysing_twice_gives_the_same_files(analysed, tmp_path):
    """The raw store is never modified: a second analysis of a copy writes identical step and op files."""
    import shutil

    profiler_dir, _ = analysed
    copy = str(tmp_path / "profiler")
    shutil.copytree(os.path.join(profiler_dir, "raw"), os.path.join(copy, "raw"))
    analyse_rank(copy, 0)
    for name in ("step_trace_raw_0_detail_time.csv", "cpu_op_type_info_0.csv", "cpu_op_detail_info_0.csv",
                 "step_trace_point_info_0.json", "minddata_cpu_utilization_0.json"):
        with open(os.path.join(profiler_dir, name), "rb") as a, open(os.path.join(copy, name), "rb") as b:
            assert a.read() == b.read(), name
    assert json.loads(open(os.path.join(copy, "summary_0.json")).read())["steps_profiled"] == 3


def test_the_report_drawn_at_analysis_is_the_one_drawn_from_the_files(analysed, tmp_path):
    """At analysis the report's step timeline comes from the timeline file's text without its ops, handed over
    in memory (not read back: 1.7 s of a 100k-op report): the same bytes as the report the files alone give."""
    import shutil

    from msprof_agent.viewer import write_report

    profiler_dir, _ = analysed
    copy = str(tmp_path / "profiler")
    shutil.copytree(profiler_dir, copy)
    with open(os.path.join(copy, "report_0.html"), "rb") as handle:
        at_analysis = handle.read()
    os.remove(os.path.join(copy, "report_0.html"))
    with open(write_report(copy, 0), "rb") as handle:
        assert handle.read() == at_analysis
    assert b"Step 3" in at_analysis and b"data wait" in at_analysis  # the step timeline was drawn, not left out


def test_machine_percents_of_a_short_span_add_up_to_100():
    """Between two cpu_times() readings 30 ms of CPU time apart (2 cores, 15 ms): the shares of that span, not of a second."""
    import psutil

    from msprof_agent.collectors.cpu import machine_percents

    kind = type(psutil.cpu_times())
    before = kind(*[10.0] * len(kind._fields))
    after = kind(**{name: 10.0 + {"user": 0.012, "nice": 0.009, "system": 0.003, "idle": 0.006}.get(name, 0.0) for name in kind._fields})
    shares = machine_percents(before, after)
    assert {name: round(shares[name], 6) for name in ("user", "nice", "system", "idle")} == {"user": 40.0, "nice": 30.0, "system": 10.0, "idle": 20.0}
    assert round(sum(shares.values()), 6) == 100.0


@pytest.mark.unit
def test_the_jobs_cpu_is_its_process_tree_and_the_agents_own_processes_are_apart():
    """A worker the job forks (as a DataLoader does) counts as the job; a child running the agent's
    background analysis counts as ours. Both spin between two readings."""
    import subprocess
    import sys

    import psutil

    from msprof_agent.collectors.cpu import _JobTree

    spin = "import time\nend = time.process_time() + 2\nwhile time.process_time() < end: pass"
    tree = _JobTree(psutil.Process())
    children = [subprocess.Popen([sys.executable, "-c", spin]), subprocess.Popen([sys.executable, "-c", spin, "msprof_agent.background_analysis"])]
    try:
        time.sleep(0.1)
        tree.read()  # both children seen: counted from here on
        time.sleep(0.8)
        job_user, job_sys, ours, descendants = tree.read()
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=30)
    assert job_user + job_sys >= 0.02 and ours >= 0.02, (job_user, job_sys, ours)  # each child spun on a shared machine
    assert descendants >= 0.02 and descendants >= 0.8 * (job_user + job_sys), (descendants, job_user, job_sys)  # the job's child, not this sleeper


@pytest.mark.unit
def test_a_child_that_ended_between_readings_is_the_jobs_to_its_end():
    """DataLoader workers end with each epoch: the CPU a child spent after the last reading, or all of it
    for a child that started and ended between two readings, is the job's, not other processes'."""
    import subprocess
    import sys

    import psutil

    from msprof_agent.collectors.cpu import _JobTree

    spin = "import sys, time\nend = time.process_time() + float(sys.argv[1])\nwhile time.process_time() < end: pass"
    tree = _JobTree(psutil.Process())
    seen_once = subprocess.Popen([sys.executable, "-c", spin, "0.6"])
    time.sleep(0.05)
    tree.read()  # the first child seen here, early in its spin
    subprocess.run([sys.executable, "-c", spin, "0.3"], check=True)  # started and ended between two readings
    seen_once.wait(timeout=60)
    job_user, job_sys, ours, descendants = tree.read()
    assert descendants >= 0.3 + 0.6 * 0.5, descendants  # reaped workers are the descendants' too
    assert job_user + job_sys >= 0.3 + 0.6 * 0.5, (job_user, job_sys)  # the second child whole, most of the first
    assert job_user + job_sys <= 0.3 + 0.6 + 0.5, (job_user, job_sys)  # each counted once (interpreter starts: ~0.1 s)
    assert ours == 0.0


def test_the_heaps_bytes_in_use_count_what_is_held_not_what_rss_keeps():
    """64 MiB of small blocks held: in use rises by them; freed (while one later block pins the heap's top,
    as a profiler's events do between a step's tensors), in use falls back though RSS need not."""
    import ctypes

    from msprof_agent.collectors import heap

    if heap.in_use() is None:
        pytest.skip("no mallinfo2 in this C library: the advisor reads RSS")
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    before = heap.in_use()
    blocks = [libc.malloc(64 << 10) for _ in range(1024)]  # 64 KiB each: heap blocks, under the mmap threshold
    pin = libc.malloc(1024)
    held = heap.in_use()
    for block in blocks:
        libc.free(block)
    freed = heap.in_use()
    libc.free(pin)
    assert abs(held - before - (64 << 20)) < (4 << 20), (before, held)
    assert abs(freed - before) < (4 << 20), (before, freed)
    reader = heap.HeapReader()
    assert reader.read() is not None and reader.read() is None  # the second, at once, waits for 100x the first's cost


def test_the_heaps_bytes_in_use_count_pythons_small_objects():
    """300 000 small tuples held (900 000 of pymalloc's blocks, outside the C heap): in use rises by their
    blocks at SMALL_BLOCK_BYTES (and the list's array). What a read costs is ``HeapReader``'s to bound, by
    spacing the reads (the test above), not a timed assertion here."""
    from msprof_agent.collectors import heap

    if heap.in_use() is None:
        pytest.skip("no mallinfo2 in this C library: the advisor reads RSS")
    before = heap.in_use()
    kept = [(n + 1000, float(n)) for n in range(300_000)]  # a tuple, an int past the cached ones and a float: 3 blocks
    held = heap.in_use()
    expected = len(kept) * (3 * heap.SMALL_BLOCK_BYTES + 8)  # + the list's 8-byte slots, on the C heap
    assert abs(held - before - expected) < 0.05 * expected, (held - before, expected)
    reader = heap.HeapReader()
    first = reader.read()
    assert first is not None and first.small is not None and abs(first.bytes - held) < 0.05 * expected
    reader._next = 0.0  # the C heap's next read due, the count's not: it waits 100x its walk of ~1 M blocks
    between = reader.read()
    assert between is not None and between.small is None and abs(between.bytes - first.bytes) < (1 << 20)  # the last count stands


def test_the_heap_series_interpolates_the_small_objects_between_their_counts():
    """Python's small objects counted at ts 0 and 100 (0 and 100 bytes), the C heap flat at 1 000: the samples between
    read the line between the counts, not the first count held; the sample after the last count is left out."""
    from msprof_agent.analysis.diagnosis.memory_growth import _heap_series

    cpu = [{"ts": 0, "heap": 1000, "small": 0}, {"ts": 25, "heap": 1000}, {"ts": 50, "heap": 1000}, {"ts": 100, "heap": 1100, "small": 100},
           {"ts": 125, "heap": 1100}, {"ts": 60, "rss": 1}]
    assert _heap_series(cpu) == [(0, 1000.0), (25, 1025.0), (50, 1050.0), (100, 1100.0)]


def test_points_covered_by_overlapping_intervals_match_checking_each_interval():
    """``intervals.covered`` (the memory rule's samples inside the agent's pauses) against a check of every interval, on
    overlapping, nested, touching and zero-length intervals, with points on their edges."""
    import numpy as np

    from msprof_agent.analysis.intervals import covered

    rng = np.random.default_rng(11)
    starts = np.sort(rng.integers(0, 1000, 60))
    ends = starts + rng.integers(0, 40, 60)
    points = np.concatenate([rng.integers(-10, 1100, 300), starts, ends])
    expected = [bool(((starts <= t) & (t <= ends)).any()) for t in points]
    assert covered(starts, ends, points).tolist() == expected
    assert not covered(starts[:0], ends[:0], points).any()


def test_interval_union_length_within_windows_matches_counting_each_ns():
    """``intervals.merge`` + ``length_within`` (the advisor's compute time, the exports' Computing) against
    a per-nanosecond count, on overlapping, nested, touching and zero-length intervals and windows
    that start or end inside, between, before and after them."""
    import numpy as np

    from msprof_agent.analysis.intervals import length_within, merge

    rng = np.random.default_rng(7)
    starts = np.sort(rng.integers(0, 1000, 80))
    ends = starts + rng.integers(0, 40, 80)
    covered = np.zeros(1100, dtype=bool)
    for s, e in zip(starts, ends):
        covered[s:e] = True
    lo = rng.integers(-20, 1080, 200)
    hi = lo + rng.integers(0, 150, 200)
    union = merge(starts, ends)
    assert (union[0][1:] > union[1][:-1]).all()  # disjoint and sorted
    expected = [int(covered[max(a, 0):max(b, 0)].sum()) for a, b in zip(lo, hi)]
    assert length_within(*union, lo, hi).tolist() == expected


def test_median_and_percentiles_equal_numpys_to_the_last_bit():
    """``analysis.stats`` stands in for np.median / np.percentile (which import numpy.ma at exit): the
    summary's p50 / p90 and the advisor's medians must not move."""
    import random

    import numpy as np

    from msprof_agent.analysis.stats import median, percentile

    rng = random.Random(3)
    for _ in range(500):
        values = [rng.choice([rng.random() * 100, rng.randint(0, 50), rng.random() * 1e-3]) for _ in range(rng.randint(1, 40))]
        assert median(values) == float(np.median(values))
        for q in (0, 0.5, 10, 50, 90, 99.5, 100):
            assert percentile(values, q) == float(np.percentile(np.asarray(values, dtype=np.float64), q)), (values, q)


@pytest.mark.unit
def test_a_child_another_thread_forked_is_found_late_with_all_its_cpu_and_counted_once():
    """Between its every-thread readings the tree reads only main threads' children (a thread's children file
    each costs the GIL ~15 us): a child a side thread forked is found at the next full reading with all its
    CPU time, and then read at every reading, never taken for ended."""
    import subprocess
    import sys
    import threading

    import psutil

    from msprof_agent.collectors.cpu import _JobTree

    spin = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    tree = _JobTree(psutil.Process())
    children: list[subprocess.Popen] = []
    side = threading.Thread(target=lambda: children.append(subprocess.Popen([sys.executable, "-c", spin])))
    side.start()
    side.join()
    try:
        totals = []
        while len(totals) < 2 * _JobTree.EVERY_THREAD_EVERY:
            time.sleep(0.1)
            totals.append(tree.read()[3])
        found_at = next(i for i, total in enumerate(totals) if total > 0)
    finally:
        children[0].kill()
        children[0].wait(timeout=30)
    assert found_at < _JobTree.EVERY_THREAD_EVERY, totals
    assert 0.6 * 0.8 <= sum(totals) <= 0.6 + 0.5, totals  # all its spin, counted once (interpreter start: ~0.1 s)
