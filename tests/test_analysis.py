"""The analysed files of real profiled jobs against the MindInsight contract and against each other."""
import filecmp
import os
import statistics
import subprocess

import orjson
import pytest

from conftest import EXAMPLES, PY, overlapping_slices, read_csv, read_json, run_script, step_trace

TORCH_CNN = os.path.join(EXAMPLES, "torch_cnn.py")
LENET = os.path.join(EXAMPLES, "mindspore_lenet.py")


def profiled(script, out_dir, args, **options):
    result = run_script([script] + args, options=dict({"start": True, "output_path": out_dir}, **options))
    assert result.returncode == 0, result.stderr
    assert "failed, the job goes on" not in result.stderr, result.stderr
    return os.path.join(out_dir, "profiler")


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("torch"))
    return profiled(TORCH_CNN, out, ["--steps", "8", "--data-sleep-ms", "20"], profile_memory=True, cpu_sampling_interval=50)


@pytest.fixture(scope="module")
def mindspore_run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("mindspore"))
    return profiled(LENET, out, ["--steps", "6", "--quiet"], data_process=True, cpu_sampling_interval=50)


RUNS = [pytest.param("torch_run", marks=pytest.mark.torch), pytest.param("mindspore_run", marks=pytest.mark.mindspore)]


@pytest.mark.parametrize("run", RUNS)
def test_step_trace_contract(run, request):
    profiler_dir = request.getfixturevalue(run)
    header, steps, average = step_trace(profiler_dir)
    assert header == ["step_num", "start_point", "end_point", "total", "fp_point", "bp_point", "iteration_interval", "fp_and_bp", "tail"]
    assert len(average) == 1 and steps
    for row in steps:
        start, end, total, fp, bp, interval, fp_bp, tail = (int(v) for v in row[1:])
        assert end - start == total
        assert start <= fp <= bp <= end
        assert abs(interval + fp_bp + tail - total) <= 0.01 * total
    for column in range(1, 9):
        total = sum(int(r[column]) for r in steps)
        assert 2 * abs(int(average[0][column]) * len(steps) - total) <= len(steps)  # the mean as an integer (MindInsight reads int())
    points = read_json(os.path.join(profiler_dir, "step_trace_point_info_0.json"))
    assert set(points) == {"fp_start", "bp_end"} and points["fp_start"] and points["bp_end"]


@pytest.mark.parametrize("run", RUNS)
def test_operator_tables(run, request):
    profiler_dir = request.getfixturevalue(run)
    types = read_csv(os.path.join(profiler_dir, "cpu_op_type_info_0.csv"))
    assert types[0] == ["op_type", "type_occurrences", "execution_frequency(per-step)", "total_compute_time(ms)", "avg_time(ms)", "percent"]
    assert sum(float(r[5]) for r in types[1:]) == pytest.approx(1.0, abs=1e-3)
    for row in types[1:]:
        assert float(row[4]) == pytest.approx(float(row[3]) / int(row[1]), rel=1e-3, abs=1e-6)
    detail = read_csv(os.path.join(profiler_dir, "cpu_op_detail_info_0.csv"))
    assert detail[0][:4] == ["op_side", "op_type", "op_name", "full_op_name"]
    assert sum(float(r[7]) for r in detail[1:]) == pytest.approx(1.0, abs=1e-3)
    per_type = {}
    for row in detail[1:]:
        per_type[row[1]] = per_type.get(row[1], 0) + int(row[4])
    assert per_type == {r[0]: int(r[1]) for r in types[1:]}


@pytest.mark.parametrize("run", RUNS)
def test_timeline_is_trace_event_json_matching_the_step_trace(run, request):
    profiler_dir = request.getfixturevalue(run)
    with open(os.path.join(profiler_dir, "cpu_timeline_display_0.json"), "rb") as handle:
        events = orjson.loads(handle.read())
    assert isinstance(events, list)
    for event in events:
        assert event["ph"] in ("X", "M", "C") and "pid" in event and "name" in event
        if event["ph"] == "X":
            assert isinstance(event["ts"], (int, float)) and event["dur"] >= 0
    steps = {e["args"]["step"]: e for e in events if e.get("cat") == "step"}
    _, rows, _ = step_trace(profiler_dir)
    assert sorted(steps) == [int(r[0]) for r in rows]
    base = [e["args"]["epoch_ns"] for e in events if e["ph"] == "M" and e["name"] == "time_base"]
    assert len(base) == 1 and base[0] % 86_400_000_000_000 == 0  # the start of a UTC day
    for row in rows:  # the step trace's 10 ns units, exactly: the times count from the base
        event = steps[int(row[0])]
        start_ns = round(event["ts"] * 1000) + base[0]
        assert start_ns // 10 == int(row[1])
        assert (start_ns + round(event["dur"] * 1000)) // 10 == int(row[2])
    assert overlapping_slices(events) == []
    assert any(e.get("pid") == 2 and e["ph"] == "X" for e in events), "no op events"
    assert any(e["ph"] == "C" for e in events), "no CPU counter events"
    summary = read_json(os.path.join(profiler_dir, "cpu_timeline_summary_0.json"))
    assert summary["num_of_ops"] == sum(1 for e in events if e.get("pid") == 2 and e["ph"] == "X")


@pytest.mark.torch
def test_summary_and_other_pages(torch_run):
    summary = read_json(os.path.join(torch_run, "summary_0.json"))
    assert summary["steps_profiled"] == 8 and summary["framework"] == "torch"
    assert sum(summary["stage_share"].values()) == pytest.approx(1.0, abs=0.01)
    assert summary["data_wait_ms"]["p50"] >= 20 * 0.9
    assert summary["verdict"] in ("data-bound", "compute-bound", "host-bound", "balanced")
    assert all("evidence" in s and s["text"] for s in summary["suggestions"])
    cpu = read_json(os.path.join(torch_run, "minddata_cpu_utilization_0.json"))
    assert len(cpu["time_stamp"]) == len(cpu["device_info"]["user_utilization"]) >= 2
    assert all(isinstance(v, int) for v in cpu["process_info"]["user_utilization"])
    memory = read_json(os.path.join(torch_run, "memory_usage_summary_0.json"))
    assert memory["peak_mem"] > 0
    flops = read_json(os.path.join(torch_run, "flops_summary_0.json"))
    assert flops["FLOPs"] > 0
    mfu = summary["flops"]["mfu"]
    assert mfu["peak_source"].startswith("calibrated: float32") and mfu["peak_gflops"] > 0
    assert mfu["steps"] == summary["steady_steps"]
    assert 0 < mfu["ratio"] < 1 and flops["FLOPS_Utilization"] == pytest.approx(100 * mfu["ratio"], rel=1e-3)
    assert mfu["ratio"] == pytest.approx(summary["flops"]["gflops_per_s"] / mfu["peak_gflops"], rel=1e-3)  # one ratio of totals
    iterator = open(os.path.join(torch_run, "data_wait_profiling_0.txt")).read().split("\n")
    gets = [line.split() for line in iterator if line.startswith("0 0 ")]
    assert len(gets) == 8 and all(float(g[3]) >= 18 for g in gets)


@pytest.mark.mindspore
def test_graph_compile_step_is_warmup_left_out_of_the_steady_figures(mindspore_run):
    """LeNet's first step compiles the graph: it is named as warm-up with why, stays in the step trace,
    and the summary's stage means and percentiles are those of the other steps."""
    summary = read_json(os.path.join(mindspore_run, "summary_0.json"))
    _, rows, _ = step_trace(mindspore_run)
    warm = summary["warmup_steps"]
    assert warm and warm[0]["step"] == int(rows[0][0]) and "steady median" in warm[0]["why"]
    steady = [r for r in rows if int(r[0]) not in {w["step"] for w in warm}]
    assert len(rows) == 6 and summary["steady_steps"] == len(steady)
    for key, column in (("iteration_interval", 6), ("fp_and_bp", 7), ("tail", 8)):
        assert summary["stages_ms"][key] == pytest.approx(sum(int(r[column]) for r in steady) / len(steady) / 1e5, abs=1e-3)
    assert summary["step_time_ms"]["max"] == pytest.approx(max(int(r[3]) for r in steady) / 1e5, abs=1e-3)
    steady_totals = sorted(int(r[3]) for r in steady)  # the advisor reads the same steady steps
    assert summary["step_breakdown_ms"]["total"] == pytest.approx(statistics.median(steady_totals) / 1e5, abs=1e-3)


@pytest.mark.mindspore
def test_mindspore_pipeline_files(mindspore_run):
    rows = read_csv(os.path.join(mindspore_run, "minddata_pipeline_raw_0.csv"))
    assert rows[0][:3] == ["op_id", "op_type", "num_workers"]
    assert {"GeneratorOp", "BatchOp"} <= {r[1] for r in rows[1:]}
    pipeline = read_json(os.path.join(mindspore_run, "pipeline_profiling_0.json"))
    assert pipeline["op_info"] and "sampling_interval" in pipeline
    assert read_json(os.path.join(mindspore_run, "profiler_info_0.json"))["rank_id"] == 0


def analyse(*args):
    return subprocess.run([PY, "-m", "msprof_agent", "analyse", *args], capture_output=True, text=True, timeout=300)


def contents(directory):
    """Every file under ``directory`` (raw data included) and its bytes."""
    found = {}
    for folder, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(folder, name), "rb") as handle:
                found[os.path.relpath(os.path.join(folder, name), directory)] = handle.read()
    return found


def analysed_files(profiler_dir):
    return sorted(f for f in os.listdir(profiler_dir) if f != "raw" and not f.startswith("report_") and not f.startswith("summary_"))


@pytest.mark.torch
def test_offline_analysis_is_rerunnable_and_equals_the_exit_analysis(torch_run, tmp_path):
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", os.path.dirname(torch_run), str(copy)], check=True)
    for _ in range(2):
        result = analyse(str(copy))
        assert result.returncode == 0, result.stderr
        files = analysed_files(str(copy / "profiler"))
        assert files == analysed_files(torch_run)
        _, mismatch, errors = filecmp.cmpfiles(torch_run, str(copy / "profiler"), files, shallow=False)
        assert mismatch == [] and errors == []


@pytest.mark.torch
def test_step_list_restricts_every_step_based_file_of_a_new_analysis(torch_run, tmp_path):
    """--step-list writes beside the run (PATH/steps_3-5/profiler) or to --output; the run's files stay byte-identical."""
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", os.path.dirname(torch_run), str(copy)], check=True)
    original = str(copy / "profiler")
    before = contents(original)
    result = analyse(str(copy), "--step-list", "3,4,5")
    assert result.returncode == 0, result.stderr
    assert contents(original) == before
    profiler_dir = str(copy / "steps_3-5" / "profiler")
    assert profiler_dir in result.stderr
    assert [r[0] for r in step_trace(profiler_dir)[1]] == ["3", "4", "5"]
    gets = [line.split()[2] for line in open(os.path.join(profiler_dir, "data_wait_profiling_0.txt")) if line.startswith("0 0 ")]
    assert gets == ["3", "4", "5"]
    with open(os.path.join(profiler_dir, "cpu_timeline_display_0.json"), "rb") as handle:
        steps = {e["args"]["step"] for e in orjson.loads(handle.read()) if e["ph"] == "X" and "step" in e.get("args", {})}
    assert steps <= {3, 4, 5}
    types = read_csv(os.path.join(profiler_dir, "cpu_op_type_info_0.csv"))
    full = read_csv(os.path.join(torch_run, "cpu_op_type_info_0.csv"))
    conv = lambda rows: next(int(r[1]) for r in rows[1:] if r[0] == "aten::conv2d")  # noqa: E731
    assert conv(types) * 8 == conv(full) * 3
    elsewhere = tmp_path / "four_to_five"
    result = analyse(original, "--step-list", "4,5", "--output", str(elsewhere))
    assert result.returncode == 0, result.stderr
    assert [r[0] for r in step_trace(str(elsewhere))[1]] == ["4", "5"]
    over = analyse(str(copy), "--step-list", "4,5", "--output", str(copy))
    assert over.returncode == 2 and "would overwrite the run's analysis" in over.stderr
    bad = analyse(str(copy), "--step-list", "3,5")
    assert bad.returncode != 0 and "consecutive" in bad.stderr
    assert contents(original) == before


@pytest.mark.torch
def test_timeline_limit_drops_the_shortest_ops_and_says_so(tmp_path):
    profiler_dir = profiled(TORCH_CNN, str(tmp_path), ["--steps", "40"], timeline_limit=1)
    size = os.path.getsize(os.path.join(profiler_dir, "cpu_timeline_display_0.json"))
    assert size <= 1_000_000
    summary = read_json(os.path.join(profiler_dir, "summary_0.json"))
    assert summary["timeline"]["truncated"] is True
    assert any("timeline_limit 1 MB: dropped the" in note for note in summary["notes"])
    detail = read_csv(os.path.join(profiler_dir, "cpu_op_type_info_0.csv"))
    assert next(int(r[1]) for r in detail[1:] if r[0] == "aten::conv2d") == 2 * 40  # the tables keep every op


def stage_medians(profiler_dir):
    """Median of each stage over the steps after the first (step 1 compiles the graph)."""
    _, steps, _ = step_trace(profiler_dir)
    later = [r for r in steps if r[0] != "1"]
    median = lambda column: sorted(int(r[column]) for r in later)[len(later) // 2]  # noqa: E731
    return {"interval": median(6), "fp_and_bp": median(7), "tail": median(8)}


@pytest.mark.mindspore
def test_fp_bp_variables_change_the_split(mindspore_run, tmp_path):
    """FP start on fc1's MatMul moves both convolutions' forward into the interval, BP end on fc3's
    gradient MatMul moves their backward into the tail; compared within each run, since two runs on a
    shared machine differ in speed. A name that never occurs is reported, automatic points kept."""
    automatic = stage_medians(mindspore_run)
    # A steady LeNet step here is 1.5-7 ms, of which the loop's own Python between steps (interval and
    # tail) takes 0.2-0.4 ms: forward+backward is 4-12x the rest (5x failed in 1 of 3 runs at either end
    # of this stop, on a quiet machine), while the moved points below flip it to under a half.
    assert automatic["fp_and_bp"] > 2 * (automatic["interval"] + automatic["tail"])
    assert read_json(os.path.join(mindspore_run, "step_trace_point_info_0.json"))["bp_end"].endswith("Conv2DBackpropFilter-op0")
    result = run_script([LENET, "--steps", "6", "--quiet"], options={"start": True, "output_path": str(tmp_path / "a")},
                        extra_env={"PROFILING_BP_END": "Grad_MatMul/MatMul-op3", "PROFILING_FP_START": "fc1-Dense/MatMul-op0"})
    assert result.returncode == 0, result.stderr
    moved = stage_medians(str(tmp_path / "a" / "profiler"))
    points = read_json(os.path.join(str(tmp_path / "a" / "profiler"), "step_trace_point_info_0.json"))
    assert points == {"fp_start": "fc1-Dense/MatMul-op0", "bp_end": "Grad_MatMul/MatMul-op3"}
    assert moved["tail"] > 2 * moved["fp_and_bp"]  # the convolutions' backward is now after the BP end
    assert moved["interval"] > 2 * moved["fp_and_bp"]  # and their forward before the FP start
    result = run_script([LENET, "--steps", "4", "--quiet"], options={"start": True, "output_path": str(tmp_path / "b")},
                        extra_env={"PROFILING_BP_END": "NoSuchOp-op9"})
    summary = read_json(os.path.join(str(tmp_path / "b" / "profiler"), "summary_0.json"))
    assert any("PROFILING_BP_END='NoSuchOp-op9' matched no op" in note for note in summary["notes"])
    assert "PROFILING_BP_END='NoSuchOp-op9' matched no op" in result.stderr


@pytest.mark.torch
def test_with_stack_puts_sampled_python_stacks_in_the_timeline(tmp_path):
    """tiny_torch.py sleeps 60 ms inside each step: its module frame must cover that time on the Python
    track, and the track must be a flame chart (each frame inside another or outermost)."""
    script = os.path.join(os.path.dirname(__file__), "scripts", "tiny_torch.py")
    profiler_dir = profiled(script, str(tmp_path), ["--steps", "5", "--sleep-ms", "60"], with_stack=True)
    with open(os.path.join(profiler_dir, "cpu_timeline_display_0.json"), "rb") as handle:
        events = orjson.loads(handle.read())
    python = [e for e in events if e.get("cat") == "python"]
    assert python, "no Python stack events"
    outer = [e for e in python if e["name"].startswith("<module> (tiny_torch.py:")]
    assert outer and sum(e["dur"] for e in outer) >= 5 * 60_000 * 0.9
    assert overlapping_slices(events) == []  # every track, the Python flame chart included: nested or disjoint, exactly
    assert not any("msprof_agent" in e["name"] for e in python)


@pytest.mark.unit
def test_accelerator_peaks_come_from_the_table():
    from msprof_agent.analysis.device_peak import peak_gflops

    assert peak_gflops("GPU", "NVIDIA H100 80GB HBM3") == (989_000.0, "table: H100, 989 TFLOPS dense FP16/BF16")
    assert peak_gflops("GPU", "NVIDIA H100 PCIe")[0] == 756_000.0
    assert peak_gflops("GPU", "Some Future GPU") == (None, "no peak known for Some Future GPU")


@pytest.mark.unit
def test_small_and_large_op_records_load_alike(tmp_path):
    """Ops records with names and types coded per record (what the integrations write), small (parsed
    by orjson) and large (split at its keys by the fast line parser), load into the same columns."""
    from msprof_agent.analysis.rundata import load_rank
    from msprof_agent.records import FORMAT
    from msprof_agent.store import EventWriter, coded

    names = [f"Default/net/{kind}-op{i % 7}" for i, kind in zip(range(30_000), ["Conv2D", "MatMul", "ReLU"] * 10_000)]
    types = [n.rsplit("/", 1)[1].split("-")[0] for n in names]
    starts = list(range(1_000, 1_000 + 30_000 * 10, 10))
    writer = EventWriter(str(tmp_path), 0, 0)
    writer.add({"k": "meta", "format": FORMAT, "framework": "mindspore"})
    writer.add({"k": "step", "n": 1, "start": 0, "end": 10**9, "win": True})
    for lo, hi in ((0, 100), (100, 30_000)):
        record = {"k": "ops", "source": "test", "device": "cpu", "start": starts[lo:hi], "dur": [5] * (hi - lo), "tid": [1] * (hi - lo)}
        record["name_codes"], record["name_table"] = coded(names[lo:hi])
        record["type_codes"], record["type_table"] = coded(types[lo:hi])
        writer.add(record)
    writer.close()
    data = load_rank(str(tmp_path), 0)
    assert data.ops["name"].tolist() == names and data.ops["type"].tolist() == types
    assert data.ops["start"].tolist() == starts and set(data.ops["step"].tolist()) == {1}


@pytest.mark.unit
def test_integer_lists_read_as_digit_matrices_equal_orjsons_values():
    """Lists whose values share one width (epoch times, one-digit codes, 19 digits up to int64's limit) read
    as digit matrices, and the rest (mixed widths, negatives, beyond 9e18) by np.fromstring, give orjson's values."""
    import orjson

    from msprof_agent.analysis.opcolumns import _integers

    cases = [[1_700_000_000_123_456_789 + i * 1_237 for i in range(1000)], [i % 10 for i in range(99)], [7], [10_000] * 5,
             [8_999_999_999_999_999_999, 1_000_000_000_000_000_000], [9_100_000_000_000_000_000, 9_223_372_036_854_775_807],
             [3, 40, 512, 0], [-5, 12], [12, -5], [0]]
    for values in cases:
        parsed = _integers(orjson.dumps(values)[1:-1])
        assert parsed.dtype.name == "int64" and parsed.tolist() == values, values
    with pytest.raises(ValueError):
        _integers(b"1,2.5")


@pytest.mark.unit
def test_a_store_of_another_format_is_refused_with_what_to_do(tmp_path):
    from msprof_agent.analysis.rundata import StoreFormatError, load_rank
    from msprof_agent.store import EventWriter

    writer = EventWriter(str(tmp_path), 0, 0)
    writer.add({"k": "meta", "framework": "mindspore"})  # a pre-release store: no format
    writer.add({"k": "cpu", "ts": 1_700_000_000_000, "span_ms": 10.0, "user": 1, "sys": 1, "io": 0, "idle": 98})
    writer.close()
    with pytest.raises(StoreFormatError, match="format None, written by another msprof-agent version; this one reads format 2"):
        load_rank(str(tmp_path), 0)


@pytest.mark.unit
@pytest.mark.parametrize("limit_mb", [500, 9])
def test_timeline_written_by_stretches_holds_each_kept_op_exactly(tmp_path, limit_mb):
    """A timeline of several 4 MB chunks, written by threads each formatting one stretch of the file,
    holds every kept op once with its exact name, thread, shape, step and ns times (read back as
    decimals, from the file's time base); under a limit, the longest ops stay."""
    import decimal
    import json

    from msprof_agent.pipeline import offline_analyse
    from msprof_agent.records import FORMAT
    from msprof_agent.store import EventWriter, coded

    count, base = 120_000, 1_700_000_000_123_456_789
    names = [f"Default/net/{kind}-op{i % 11}" for i, kind in zip(range(count), ["Conv2D", "MatMul", "ReLU"] * count)]
    starts = [base + i * 1_237 for i in range(count)]  # ns, not whole microseconds
    durs = [(i * 7919) % 100_000 + 1 for i in range(count)]  # one to six digits
    shapes = [None if i % 5 else f"[[{i % 3 + 1}, 8]]" for i in range(count)]
    steps = [(n, base + (n - 1) * count * 1_237 // 12, base + n * count * 1_237 // 12) for n in range(1, 13)]  # steps 1..12: one and two digits
    writer = EventWriter(str(tmp_path / "profiler"), 0, 0)
    writer.add({"k": "meta", "format": FORMAT, "framework": "mindspore", "device_target": "CPU", "options": {"timeline_limit": limit_mb}})
    for n, begin, end in steps:
        writer.add({"k": "step", "n": n, "start": begin, "end": end, "win": True})
    for lo in range(0, count, 40_000):
        hi = lo + 40_000
        record = {"k": "ops", "source": "test", "device": "cpu", "start": starts[lo:hi], "dur": durs[lo:hi],
                  "tid": [i % 3 for i in range(lo, hi)], "shape": shapes[lo:hi]}
        record["name_codes"], record["name_table"] = coded(names[lo:hi])
        record["type_codes"], record["type_table"] = coded([n.rsplit("/", 1)[1].split("-")[0] for n in names[lo:hi]])
        writer.add(record)
    writer.close()
    offline_analyse(str(tmp_path))

    path = tmp_path / "profiler" / "cpu_timeline_display_0.json"
    assert path.stat().st_size > 8 << 20 or limit_mb < 10  # several stretches
    events = json.loads(path.read_bytes(), parse_float=decimal.Decimal)
    ops = [e for e in events if e["ph"] == "X" and e["pid"] == 2]
    step_of = lambda start: next(n for n, begin, end in steps if begin <= start < end)  # noqa: E731
    expected = {(names[i], i % 3, shapes[i], step_of(starts[i]), starts[i], durs[i]) for i in range(count)}
    time_base = next(e["args"]["epoch_ns"] for e in events if e["ph"] == "M" and e["name"] == "time_base")
    got = [(e["name"], e["tid"], e["args"].get("shape"), e["args"]["step"], int(e["ts"] * 1000) + time_base, int(e["dur"] * 1000)) for e in ops]
    assert len(set(got)) == len(got) and set(got) <= expected
    summary = read_json(str(tmp_path / "profiler" / "summary_0.json"))
    assert summary["timeline"]["bytes"] == path.stat().st_size
    if limit_mb == 500:
        assert len(got) == count and not summary["timeline"]["truncated"]
    else:
        assert path.stat().st_size <= limit_mb * 1_000_000 and summary["timeline"]["truncated"]
        dropped = expected - set(got)
        assert dropped and min(d for *_, d in got) >= max(d for *_, d in dropped)


@pytest.mark.unit
def test_a_timeline_that_cannot_be_written_costs_the_timeline_alone(tmp_path, capfd):
    """The timeline file is written on a thread of its own beside the other pages: its failure (here its
    path is a directory, so the finished file cannot replace it) is said once on stderr and in the
    summary's notes, the summary's timeline entry is empty, and every other page is written."""
    from msprof_agent.pipeline import offline_analyse
    from msprof_agent.records import FORMAT
    from msprof_agent.store import EventWriter, coded

    profiler = tmp_path / "profiler"
    writer = EventWriter(str(profiler), 0, 0)
    writer.add({"k": "meta", "format": FORMAT, "framework": "mindspore", "device_target": "CPU", "options": {}})
    base, count = 1_700_000_000_000_000_000, 30_000
    for n in range(1, 4):
        writer.add({"k": "step", "n": n, "start": base + (n - 1) * count * 1000 // 3, "end": base + n * count * 1000 // 3, "win": True})
    names = [f"Default/net/MatMul-op{i % 7}" for i in range(count)]
    record = {"k": "ops", "source": "test", "device": "cpu", "start": [base + i * 1000 for i in range(count)], "dur": [500] * count,
              "tid": [0] * count}
    record["name_codes"], record["name_table"] = coded(names)
    record["type_codes"], record["type_table"] = coded(["MatMul"] * count)
    writer.add(record)
    writer.close()
    (profiler / "cpu_timeline_display_0.json").mkdir()
    (profiler / "cpu_timeline_display_0.json" / "taken").write_text("")
    offline_analyse(str(tmp_path))

    errors = [line for line in capfd.readouterr().err.splitlines() if "timeline" in line and "failed" in line]
    assert len(errors) == 1 and errors[0].startswith("msprof-agent:"), errors
    summary = read_json(str(profiler / "summary_0.json"))
    assert summary["timeline"] is None
    assert sum(note.startswith("timeline analysis failed:") for note in summary["notes"]) == 1, summary["notes"]
    assert summary["steps_profiled"] == 3 and summary["top_op_types"][0]["op_type"] == "MatMul"
    for page in ("cpu_op_type_info_0.csv", "step_trace_raw_0_detail_time.csv", "cpu_timeline_summary_0.json", "report_0.html"):
        assert (profiler / page).is_file(), page
    assert not [name for name in os.listdir(profiler) if name.endswith(".tmp")]  # the unfinished file was removed


@pytest.mark.unit
def test_small_blocks_formatted_row_by_row_match_the_vectorised_fill():
    """A block of a few rows is formatted in Python; its bytes are the vectorised fill's, negative
    times (a skewed clock) and mixed heads included."""
    import numpy as np

    from msprof_agent.analysis import opevents

    events = opevents.OpEvents.__new__(opevents.OpEvents)
    events.heads = opevents._Texts([b',{"ph":"X","name":"a","ts":', b',{"ph":"X","name":"b","ts":'])
    events.tails = opevents._Texts([b"}}", b',"shape":"[1]"}}'])
    cases = [(0, [-12_345], [7], [1]), (1, [-500], [1_000], [2]), (np.array([0, 0]), [3_001_234, 3_009_999], [99_999, 10_000], [30, 31])]
    for texts, *numbers in cases:
        start, dur, step = (np.array(values, dtype=np.int64) for values in numbers)
        code = texts if np.ndim(texts) == 0 else texts[0]
        layout = [len(events.heads.texts[code]), len(events.tails.texts[code]), int(opevents._micros_width(start).max()),
                  int(opevents._micros_width(dur).max()), int(opevents._integer_width(step).max())]
        width = sum(layout) + len(opevents._DUR) + len(opevents._STEP)
        rows = events._fill(np.zeros((len(start), width), dtype=np.uint8), layout, np.int64(texts) if np.ndim(texts) == 0 else texts, start, dur, step)
        columns = events._fill_columns(np.zeros_like(rows), layout, np.int64(texts) if np.ndim(texts) == 0 else texts, start, dur, step)
        assert rows.tobytes() == columns.tobytes(), rows.tobytes()


@pytest.mark.unit
def test_self_durations_match_a_stack_of_open_ops():
    """Vectorised self times equal the stack walk they replace, on nested, overlapping, touching and
    equal-start ops over several threads."""
    import random

    import numpy as np

    from msprof_agent.analysis.opcolumns import OpColumns
    from msprof_agent.analysis.rundata import _self_durations, parents

    def by_stack(tids, starts, durs):
        own, stacks = list(durs), {}
        for i, (tid, start, dur) in enumerate(zip(tids, starts, durs)):
            stack = stacks.setdefault(tid, [])
            while stack and stack[-1][0] <= start:
                stack.pop()
            if stack:
                own[stack[-1][1]] -= dur
            stack.append((start + dur, i))
        return [max(o, 0) for o in own]

    chance = random.Random(7)
    for _ in range(50):
        count = chance.randint(1, 400)
        starts = sorted(chance.randint(0, 2_000) for _ in range(count))
        durs = [chance.choice([0, 1, 5, 50, 300, 1_500]) + chance.randint(0, 3) for _ in range(count)]
        tids = [chance.randint(0, 2) for _ in range(count)]
        ops = OpColumns({"start": np.array(starts, dtype=np.int64), "dur": np.array(durs, dtype=np.int64),
                         "tid_id": np.array(tids, dtype=np.int32)}, {})
        assert _self_durations(ops["dur"], parents(ops)).tolist() == by_stack(tids, starts, durs)
