"""PyTorch integration: real training scripts under the hook, checked through the raw data they leave."""
import collections
import csv
import glob
import json
import os
import re
import statistics
import subprocess

import pytest

from conftest import EXAMPLES, PY, SCRIPTS, hook_env, profile_into, read_records, run_script

pytestmark = pytest.mark.torch
CNN = os.path.join(EXAMPLES, "torch_cnn.py")


def load(out_dir, rank=0):
    from msprof_agent.analysis.rundata import load_rank

    return load_rank(os.path.join(out_dir, "profiler"), rank)


def raw_files(out_dir, rank=0):
    return sorted(glob.glob(os.path.join(out_dir, "profiler", "raw", f"rank_{rank}", "*.jsonl")))


def check_ok(proc, code=0):
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "failed, the job goes on" not in proc.stderr, proc.stderr


def test_steps_follow_primary_optimizer_with_accumulation_and_eval(out_dir):
    """2 epochs x 12 micro-batches, accumulate 3 -> 8 steps; eval loops add none; the exit code is kept."""
    proc = run_script([CNN, "--steps", "12", "--epochs", "2", "--accumulate", "3", "--eval-every", "2", "--exit-code", "3"],
                      profile_into(out_dir), timeout=120)
    check_ok(proc, code=3)
    data = load(out_dir)
    assert data.meta["framework"] == "torch" and data.meta["device_target"] == "CPU"
    assert [s["n"] for s in data.steps] == list(range(1, 9))
    for step in data.steps:
        assert step["start"] <= step["fp"] < step["bp"] <= step["end"]
        assert step["win"]
    assert data.steps[0]["wait"] > 0


def test_two_optimizers_count_one_step_per_batch(out_dir):
    proc = run_script([CNN, "--steps", "5", "--two-optimizers"], profile_into(out_dir), timeout=120)
    check_ok(proc)
    assert len(load(out_dir).steps) == 5


def test_dataset_sleep_is_data_wait(out_dir):
    proc = run_script([CNN, "--steps", "6", "--data-sleep-ms", "100"], profile_into(out_dir, op_time=False), timeout=120)
    check_ok(proc)
    steps = load(out_dir).steps
    assert len(steps) == 6
    waits = [s["wait"] for s in steps[1:]]  # step 1 also holds the loader's creation
    assert 90e6 <= statistics.median(waits) <= 110e6, waits
    assert min(waits) >= 100e6 and all(s["wait"] <= s["end"] - s["start"] for s in steps)  # a sleep never ends early


@pytest.mark.parametrize("workers,context", [(2, "fork"), (2, "spawn")])
def test_dataloader_workers_write_nothing_and_wait_is_seen(out_dir, workers, context):
    proc = run_script([CNN, "--steps", "6", "--workers", str(workers), "--mp-context", context, "--data-sleep-ms", "30"],
                      profile_into(out_dir), timeout=120)
    check_ok(proc)
    files = raw_files(out_dir)
    assert len(files) == 1, files  # the main process only: workers never write
    data = load(out_dir)
    assert len(data.steps) == 6 and data.op_count > 0
    assert sum(s["wait"] for s in data.steps) >= 30e6  # at least the first batch waited for a worker


def test_op_counts_match_torch_profiler(out_dir, tmp_path):
    """Also across profiler hand-overs: the first torch.profiler session holds 1 step (a probe of the
    events per step), the second, with shapes, 1/32 of a full one's steps, the next, sized to ~50k
    events and without shapes, the rest (their ops' shapes and FLOPs filled from the second's)."""
    steps = 10
    reference = str(tmp_path / "reference.json")
    proc = run_script([CNN, "--steps", str(steps), "--torch-profiler", reference], hook=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with open(reference) as handle:
        expected = json.load(handle)
    proc = run_script([CNN, "--steps", str(steps)], profile_into(out_dir, profile_memory=True), timeout=120)
    check_ok(proc)
    data = load(out_dir)
    in_steps = data.ops["step"] > 0
    types = data.ops["type"][in_steps].tolist()
    for op in ("aten::conv2d", "aten::addmm", "aten::convolution_backward", "aten::max_pool2d", "aten::mm"):
        assert expected["counts"][op] % steps == 0
        assert types.count(op) == expected["counts"][op], op
    conv = data.ops["type"] == "aten::conv2d"
    assert (data.ops["flops"][conv] > 0).all()
    assert all(s.startswith("[[8,") for s in data.ops["shape"][conv])
    window = data.steps[0]["start"], data.steps[-1]["end"]
    assert window[0] <= data.ops["start"][in_steps].min() and data.ops["start"][in_steps].max() <= window[1]
    assert data.mem and all(window[0] - 10**9 < m["ts"] < window[1] + 10**9 for m in data.mem)

    pauses = [r for r in read_records(os.path.join(out_dir, "profiler"), 0) if r["k"] == "pause"]
    assert [p["what"] for p in pauses] == ["profiler start-up", "torch.profiler hand-over", "torch.profiler hand-over"]
    before, after = data.steps[0], data.steps[1]  # handed over between steps 1 and 2, in no step's time
    assert before["end"] <= pauses[1]["start"] <= pauses[1]["end"] <= after["start"]
    assert before["start"] <= pauses[0]["start"] <= pauses[0]["end"] <= before["end"]  # the start-up: ours, in step 1
    for pause in pauses[1:]:  # torch.profiler's own stop() and start(), inside the hand-over
        assert 0 < pause["profiler_ns"] < pause["end"] - pause["start"]
    summary = json.load(open(os.path.join(out_dir, "profiler", "summary_0.json")))
    handed = next(note for note in summary["notes"] if note.startswith("torch.profiler hand-over x2:"))
    spans, own = sum(p["end"] - p["start"] for p in pauses[1:]), sum(p["profiler_ns"] for p in pauses[1:])
    assert f"{spans / 1e9:.2f} s in all ({own / 1e9:.2f} s in the profiler's own stop and start, {(spans - own) / 1e9:.2f} s reading" in handed, handed
    assert summary["shapes"]["steps_filled"] > 0 and summary["shapes"]["steps_not_filled"] == []


@pytest.mark.parametrize("ddp", [False, True], ids=["all_reduce", "ddp"])
def test_torchrun_two_ranks_with_gloo(out_dir, ddp):
    """Explicit all_reduce is timed by the Python wrappers; DDP's C++ all-reduce comes from the profiler, its
    entry from the agent's communication hook."""
    env = hook_env(profile_into(out_dir))
    proc = subprocess.run([PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", CNN, "--steps", "5",
                           "--sleep-rank", "1", "--sleep-ms", "200"] + (["--ddp"] if ddp else []),
                          env=env, capture_output=True, text=True, timeout=180)
    check_ok(proc)
    assert "no step trace" not in proc.stderr  # the launcher imports torch too, but steps nothing: the agent stays off there
    ranks = [load(out_dir, rank) for rank in (0, 1)]
    for rank in (0, 1):
        assert len(raw_files(out_dir, rank)) == 1
    assert [len(r.steps) for r in ranks] == [5, 5]
    assert [r.meta["rank_id"] for r in ranks] == [0, 1] and ranks[1].meta["rank_size"] == 2
    for data in ranks:
        reduces = [c for c in data.comm if c["name"] == "all_reduce"]
        assert {c["step"] for c in reduces} == set(range(1, 6))
        assert len(reduces) == 5 * (1 if ddp else 6)  # DDP: one bucket; explicit: one call per parameter, none twice
        assert all(c["bytes"] > 0 and (c.get("source") == "profiler") == ddp for c in reduces)
        if not ddp:  # each call's entry, in the group's order, before the call; the group's ranks with the first
            assert [(e["group"], e["seq"], e["step"]) for e in data.entered] == [("world", i + 1, c["step"]) for i, c in enumerate(reduces)]
            assert data.entered[0]["ranks"] == [0, 1] and [c["seq"] for c in reduces] == list(range(1, 31))
        else:  # SmallCNN has no buffers to broadcast: one bucket's all-reduce a step
            assert [(e["name"], e["group"], e["seq"], e["step"]) for e in data.entered] == [("DDP all_reduce", "world", n, n) for n in range(1, 6)]
    slow = [s["end"] - s["start"] for s in ranks[1].steps[1:]]
    assert min(slow) >= 200e6
    wait_in_comm = statistics.median(sum(c["dur"] for c in ranks[0].comm if c["step"] == n) for n in range(2, 6))
    assert wait_in_comm >= 150e6  # rank 0 waits for the delayed rank inside all_reduce


def test_ddp_trains_the_same_under_the_agent_with_the_users_hook(out_dir):
    """The agent's DDP communication hook runs the one the job registers after it (here the built-in FP16
    compression, run as torch's Python equivalent; a Python hook takes the same path), and the buffers'
    broadcast is entered: the trained parameters are bit for bit those of the job alone."""
    script = [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", os.path.join(SCRIPTS, "ddp_checksum.py"), "fp16"]
    alone = subprocess.run(script, env=hook_env(hook=False), capture_output=True, text=True, timeout=180)
    profiled = subprocess.run(script, env=hook_env(profile_into(out_dir)), capture_output=True, text=True, timeout=180)
    check_ok(alone)
    check_ok(profiled)
    trained = [line for line in profiled.stdout.splitlines() if line.startswith("parameters ")]
    assert len(trained) == 1 and trained == [line for line in alone.stdout.splitlines() if line.startswith("parameters ")]
    names = [e["name"] for e in load(out_dir, 0).entered]
    assert names == ["DDP broadcast_buffers", "DDP all_reduce"] * 6


def test_install_is_idempotent_guarded_and_uninstalls(tmp_path, capsys):
    import torch
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    from msprof_agent.frameworks.torch import patch as integration
    from msprof_agent.online_analysis import analyse
    from msprof_agent.options import Options
    from msprof_agent.session import Session

    original_backward, original_next = torch.autograd.backward, _BaseDataLoaderIter.__dict__["__next__"]
    session = Session(Options(output_path=str(tmp_path)), origin="test", analyse=analyse)
    try:
        first = integration.install(session)
        assert integration.install(session) is first
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        def broken(*_args):
            raise RuntimeError("agent bug")
        session.steps.data_wait = broken
        for x in DataLoader(torch.randn(6, 4), batch_size=2):  # the agent's error must not reach the loop
            model(x).sum().backward()
            optimizer.step()
        assert session.steps.completed == 3
        assert "timing the data loader failed, the job goes on: RuntimeError: agent bug" in capsys.readouterr().err
    finally:
        integration.uninstall()
        session.writer.abandon()
    assert torch.autograd.backward is original_backward
    assert _BaseDataLoaderIter.__dict__["__next__"] is original_next


def test_record_function_is_patched_only_while_a_window_records_with_mstx(tmp_path):
    """Torch opens three record_function ranges a step: step timing alone leaves them unpatched; a range
    open when its window stops is still recorded, and the patch goes with it."""
    from torch.autograd.profiler import record_function

    from msprof_agent.frameworks.torch import patch as integration
    from msprof_agent.online_analysis import analyse
    from msprof_agent.options import Options
    from msprof_agent.session import Session

    def patched():
        return vars(record_function)["__enter__"] is not original[0] or vars(record_function)["__exit__"] is not original[1]

    original = vars(record_function)["__enter__"], vars(record_function)["__exit__"]
    session = Session(Options(output_path=str(tmp_path), op_time=False, mstx=True), origin="test", analyse=analyse)
    try:
        integration.install(session)
        assert not patched()
        assert session.start_recording()
        with record_function("mine"):
            assert patched()
            session.stop_recording()
            assert patched()
        assert not patched()
        session.writer.flush()
        with open(session.writer.path, "rb") as handle:
            ranges = [r for r in map(json.loads, handle) if r["k"] == "mstx"]
        assert [(r["name"], r["kind"]) for r in ranges] == [("mine", "range")]
    finally:
        integration.uninstall()
        session.writer.abandon()
    assert not patched()


def test_device_session_reads_events_defensively_and_finds_unwrapped_collectives():
    """An undecodable name loses one event, not the window; a collective no wrapper timed becomes a comm record."""
    from msprof_agent.frameworks.torch.device import TorchDeviceSession
    from msprof_agent.options import Options

    class Event:
        def __init__(self, name, start):
            self._name, self._start = name, start

        def name(self):
            if self._name is None:
                raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
            return self._name

        def start_ns(self):
            return self._start

        def duration_ns(self):
            return 10

        def start_thread_id(self):
            return 1

        def flops(self):
            return 0

        def shapes(self):
            return [[2, 3]]

        def dtypes(self):
            return ["float"]

        def is_hidden_event(self):
            return False

    class Sink(list):
        def record(self, record):
            self.append(record)

    sink = Sink()
    device = TorchDeviceSession(steps=None)
    device.options = Options()  # what start() would hand it
    device._shapes_because = "the window's first session"  # what its first profiler session records with
    device.step_ends, device.wrapped_comm = [250], [(450, 600, "all_reduce")]  # step 1 ends at 250; a wrapped call at 450..600
    events = [Event("aten::mm", 100), Event(None, 200), Event("gloo:all_reduce", 300), Event("gloo:all_reduce", 500)]
    device._emit(sink, events, offset=0)
    ops = [r for r in sink if r["k"] == "ops"]
    assert len(ops) == 1 and [ops[0]["type_table"][c] for c in ops[0]["type_codes"]] == ["aten::mm", "gloo:all_reduce", "gloo:all_reduce"]
    assert ops[0]["name_table"] == ["aten::mm", "gloo:all_reduce"] and ops[0]["name_codes"] == [0, 1, 1]
    assert ops[0]["start"] == [100, 300, 500] and ops[0]["shape"] == ["[[2,3]]"] * 3 and ops[0]["flops"] == [None] * 3
    comm = [r for r in sink if r["k"] == "comm"]
    assert comm == [{"k": "comm", "step": 2, "name": "all_reduce", "start": 300, "dur": 10, "bytes": 24, "source": "profiler"}]
    assert any(r["k"] == "note" and "1 unreadable" in r["text"] for r in sink)



def test_a_wrapped_collective_the_profilers_clock_moved_out_of_its_call_is_still_the_call():
    """The profiler's clock drifts from time.time_ns by tens to hundreds of us within a session (250 us seen): a
    wrapped call's own event may start before the call or after it returned. It is the call's (one event a call,
    of its name, the nearest within CLOCK_SLACK_NS), and a C++ collective beside a call with its event inside stays."""
    from msprof_agent.frameworks.torch.device import CLOCK_SLACK_NS, _timed_by_wrappers

    us = 1_000
    wrapped = [(1_000 * us, 1_300 * us, "all_reduce"), (2_000 * us, 2_400 * us, "all_reduce"), (3_000 * us, 3_100 * us, "broadcast"),
               (5_000 * us, 5_200 * us, "all_reduce")]
    events = [(1_100 * us, "all_reduce"),  # inside the first call
              (1_760 * us, "all_reduce"), (1_750 * us, "all_reduce"),  # 250 and 240 us before the second, which has none inside
              (3_150 * us, "all_gather"),  # after the broadcast, another name: a collective of its own
              (4_000 * us, "all_reduce"),  # 1 ms before the last call, which has its own event inside: a collective of its own
              (5_050 * us, "all_reduce"), (4_990 * us, "all_reduce")]  # the last call has one inside: the one beside it is DDP's
    assert _timed_by_wrappers(wrapped, events) == {0, 1, 5}
    assert _timed_by_wrappers(wrapped[:1], [(1_300 * us + CLOCK_SLACK_NS + 1, "all_reduce")]) == set()


DYNAMIC_BATCH = """
import torch
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    model(torch.randn(4 if step % 2 else 6, 8)).sum().backward()  # the batch size changes every step
    optimizer.step()
    optimizer.zero_grad()
"""


def test_changing_shapes_give_the_dynamic_shape_page(out_dir, tmp_path):
    script = tmp_path / "dynamic_batch.py"
    script.write_text(DYNAMIC_BATCH)
    check_ok(run_script([str(script)], profile_into(out_dir), timeout=120))
    info = json.load(open(os.path.join(out_dir, "profiler", "dynamic_shape_info_0.json")))
    assert "aten::linear" in info["ops_with_changing_shapes"] and "aten::relu" in info["ops_with_changing_shapes"]
    assert sorted(int(s) for s in info["op_type_time_ms_by_step"]) == [1, 2, 3, 4, 5, 6]
    assert info["shapes_by_step"]["1"]["aten::linear"].startswith("[[6,8]")
    assert info["shapes_by_step"]["2"]["aten::linear"].startswith("[[4,8]")
    assert all(ms > 0 for ms in info["op_type_time_ms_by_step"]["3"].values())


def test_record_function_ranges_are_the_mstx_table(out_dir):
    """The script's own record_function ranges, and only those (not torch's Optimizer.step#... ones)."""
    proc = run_script([os.path.join(os.path.dirname(__file__), "scripts", "torch_marks.py")],
                      profile_into(out_dir, mstx=True, activities=["CPU"]))
    check_ok(proc)
    expected = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("ranges ")).split(" ", 1)[1])
    with open(os.path.join(out_dir, "profiler", "mstx_ranges_0.json")) as handle:
        table = json.load(handle)
    assert [[r["name"], r["count"]] for r in table["ranges"]] == expected


PRINTING = os.path.join(SCRIPTS, "printing_torch.py")


@pytest.fixture(scope="module")
def printing_alone():
    """The printing job's output without the agent, once for the runs compared with it."""
    alone = run_script([PRINTING], hook=False)
    check_ok(alone)
    return alone


@pytest.mark.parametrize("options", [{}, {"capture": {"every": 4, "steps": 2, "first": 2}, "with_stack": True}], ids=["one window", "windows with_stack"])
def test_the_job_output_is_its_own(printing_alone, tmp_path, options):
    """Over several torch.profiler sessions (a hand-over after the first step; one window per capture),
    stdout is byte-identical to the job's without the agent, and stderr differs only by our lines."""
    alone = printing_alone
    profiled = run_script([PRINTING], profile_into(str(tmp_path / "p"), **options))
    check_ok(profiled)
    assert profiled.stdout == alone.stdout
    ours = [line for line in profiled.stderr.splitlines() if line.startswith("msprof-agent:")]
    assert ours, profiled.stderr
    assert [line for line in profiled.stderr.splitlines() if not line.startswith("msprof-agent:")] == alone.stderr.splitlines()


def test_with_stack_names_carry_no_memory_address(out_dir):
    """Python stacks come from the agent's sampler, op names lose addresses: both match between runs."""
    proc = run_script([os.path.join(SCRIPTS, "stack_torch.py")], profile_into(out_dir, with_stack=True))
    check_ok(proc)
    data = load(out_dir)
    names = list(data.op_names) + [frame for sample in data.stacks for frame in sample["frames"]]
    assert "metric <object object>" in names and any(name.startswith("<module> (stack_torch.py:") for name in names)
    with open(os.path.join(out_dir, "profiler", "cpu_timeline_display_0.json"), "rb") as handle:
        names += [event.get("name", "") for event in json.load(handle)]
    assert not [name for name in names if re.search("0x[0-9a-f]+", name)]


BATCH_CHANGES = """
import sys
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
steps, change = int(sys.argv[1]), int(sys.argv[2])
for step in range(1, steps + 1):
    model(torch.randn(8 if step < change else 4, 3, 8, 8)).sum().backward()  # the batch shrinks from step CHANGE on
    optimizer.step()
    optimizer.zero_grad()
"""


def test_shapes_sampled_in_some_sessions_fill_the_rest(out_dir, tmp_path):
    """Short profiler sessions (~20 steps, many hand-overs): shapes in a sample of them; the others' ops
    take shapes and FLOPs from a step like theirs, within 2 % of a run with shapes in every session; the
    batch shrinking in a session without shapes makes the next one record them."""
    script = tmp_path / "batch_changes.py"
    script.write_text(BATCH_CHANGES)
    steps, change = 200, 121
    every = str(tmp_path / "every")
    for into, shapes_every in ((out_dir, None), (every, "1")):
        extra = {"MSPROF_TORCH_SESSION_EVENTS": "1000"}
        if shapes_every:
            extra["MSPROF_TORCH_SHAPES_EVERY"] = shapes_every
        check_ok(run_script([str(script), str(steps), str(change)], profile_into(into), extra_env=extra, timeout=300))
    sampled, reference = (json.load(open(os.path.join(d, "profiler", "summary_0.json"))) for d in (out_dir, every))
    assert reference["shapes"] is None  # every session had shapes: nothing filled
    shapes = sampled["shapes"]
    sessions = [r for r in read_records(os.path.join(out_dir, "profiler"), 0) if r["k"] == "buffer"]
    assert shapes["sessions"] == len(sessions) >= 10
    with_shapes = [s for s in sessions if s["record_shapes"]]
    assert 3 <= len(with_shapes) <= len(sessions) // 2, sessions
    assert shapes["steps_filled"] + sum(s["steps"] for s in with_shapes) == steps and shapes["steps_not_filled"] == []
    holder = next(i for i, s in enumerate(sessions) if s["first_step"] <= change < s["first_step"] + s["steps"])
    assert not sessions[holder]["record_shapes"], sessions  # the change falls in a session without shapes ...
    after = sessions[holder + 1]  # ... so the next records them, saying why
    assert after["record_shapes"] and after["shapes_because"].startswith(f"step {change}'s"), after
    assert sampled["flops"]["mflops_per_step"] == pytest.approx(reference["flops"]["mflops_per_step"], rel=0.02)
    mfu_flops = []  # MFU with each run's own step time taken out: MFU x mean steady step time = FLOPs per step / peak
    for summary in (sampled, reference):
        warm, per_step = {w["step"] for w in summary["warmup_steps"]}, summary["per_step_ms"]
        steady = [t for n, t in zip(per_step["step"], per_step["total"]) if n not in warm]
        mfu_flops.append(summary["flops"]["mfu"]["ratio"] * sum(steady) / len(steady))
    assert mfu_flops[0] == pytest.approx(mfu_flops[1], rel=0.02)

    def by_shape(directory):
        with open(os.path.join(directory, "profiler", "cpu_op_shape_info_0.csv")) as handle:
            return {(r["op_name"], r["input_shape"]): int(r["op_occurrences"]) for r in csv.DictReader(handle)}
    got, expected = by_shape(out_dir), by_shape(every)
    assert set(got) == set(expected)
    calls = collections.Counter()
    for (op, _), count in expected.items():
        calls[op] += count
    assert all(abs(got[key] - count) <= 0.02 * calls[key[0]] for key, count in expected.items())
    linear = {r["input_shape"] for r in csv.DictReader(open(os.path.join(out_dir, "profiler", "cpu_op_shape_info_0.csv")))
              if r["op_name"] == "aten::linear"}
    assert {shape.split("]")[0] for shape in linear} == {"[[8,144", "[[4,144"}  # both batch sizes, the later one filled too


def test_a_compiled_model_trains_the_same_and_torch_warns_of_no_hook_of_ours(out_dir):
    """``torch.compile(model)``'s wrapper warns whenever a global module hook is armed (and fires it an extra time): the
    agent marks the forward start in the wrapper's own call instead, so the job's stderr holds no warning of ours, each
    step still has its forward start, and the loss is the same to the last bit as without the agent."""
    script = os.path.join(SCRIPTS, "compiled_torch.py")
    plain = run_script([script], hook=False, extra_env={"OMP_NUM_THREADS": "1"})
    profiled = run_script([script], profile_into(out_dir), extra_env={"OMP_NUM_THREADS": "1"})
    check_ok(plain)
    check_ok(profiled)
    assert profiled.stdout == plain.stdout and "final loss" in plain.stdout
    assert "global hooks" not in profiled.stderr and "Warning" not in profiled.stderr, profiled.stderr
    steps = [r for r in read_records(os.path.join(out_dir, "profiler"), 0) if r.get("k") == "step"]
    assert len(steps) == 6 and all(s.get("fp") for s in steps), steps
