"""The timeline download of a thousand ranks (``viewer.merged_timeline.download``): under its budget, every rank's
step lanes, op detail only for the ranks asked, valid Trace Event JSON whose slices nest, sorted, on one clock."""
import json
import math
import os

import pytest

from conftest import overlapping_slices
from msprof_agent.analysis import cluster
from msprof_agent.contract import names
from msprof_agent.contract.timebase import day_base, time_base_event
from msprof_agent.viewer import merged_timeline
from msprof_agent.viewer.sections import scan
from test_cluster import noisy_entries

START_NS = 1_700_000_000_000_000_000  # the job's first step, epoch ns
STEP_NS, FP_NS, BP_NS = 10_000_000, 1_000_000, 8_000_000  # a step of 10 ms: 1 ms interval, 7 ms forward+backward, 2 ms tail
SLOW_RANK = 77


def write_rank(directory, rank, ranks, steps, ops=0, clock_ns=0):
    """One rank's analysed files as the lanes read them (profiler info, step trace, hccl), and with OPS its own
    timeline: the Step Trace process and OPS host ops, each holding a nested op half its length; its host's
    clock CLOCK_NS ahead."""
    slow = 2 if rank == SLOW_RANK else 1
    skew = 137 * rank + clock_ns  # each rank starts a little later
    with open(os.path.join(directory, names.rank_file(names.PROFILER_INFO, rank)), "w") as handle:
        json.dump({"rank_id": rank, "rank_size": ranks, "framework": "torch"}, handle)
    rows = []
    for n in range(1, steps + 1):
        start = START_NS + skew + (n - 1) * STEP_NS * slow
        points = [start, start + STEP_NS * slow, start + FP_NS, start + BP_NS * slow]
        unit = [p // 10 for p in points]
        rows.append(f"{n},{unit[0]},{unit[1]},{unit[1] - unit[0]},{unit[2]},{unit[3]},{unit[2] - unit[0]},{unit[3] - unit[2]},{unit[1] - unit[3]}")
    with open(os.path.join(directory, names.rank_file(names.STEP_TRACE, rank)), "w") as handle:
        handle.write("step_num,start_point,end_point,total,fp_point,bp_point,iteration_interval,fp_and_bp,tail\n" + "\n".join(rows) + "\n-,,,1,,,1,1,1\n")
    with open(os.path.join(directory, names.rank_file(names.HCCL, rank)), "w") as handle:
        handle.write("step_num,communication_cost,wait_cost,link_info,communication_operator_cost\n")
        handle.write("".join(f"{n},{1.5 + 0.001 * rank},,{{}},{{}}\n" for n in range(1, steps + 1)) + "-,1.5,,{},{}\n")
    if not ops:
        return
    base = day_base(START_NS)
    us = lambda ns: round((ns - base) / 1000, 3)  # noqa: E731
    events = [time_base_event(base, 1), {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Step Trace"}},
              {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "Host Ops"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "Steps"}}]
    span = steps * STEP_NS * slow
    for n in range(1, steps + 1):
        start = START_NS + skew + (n - 1) * STEP_NS * slow
        events.append({"ph": "X", "name": f"Step {n}", "cat": "step", "pid": 1, "tid": 1, "ts": us(start), "dur": STEP_NS * slow / 1000})
    gap = span // ops
    for i in range(ops):
        begin, length = START_NS + skew + i * gap, max(2, (gap * (1 + i % 7)) // 8)
        events.append({"ph": "X", "name": f"aten::op{i % 13}", "pid": 2, "tid": 5, "ts": us(begin), "dur": round(length / 1000, 3)})
        events.append({"ph": "X", "name": "aten::inner", "pid": 2, "tid": 5, "ts": us(begin), "dur": round(length // 2 / 1000, 3)})
    with open(os.path.join(directory, names.rank_file(names.TIMELINE_DISPLAY, rank, device="cpu")), "w") as handle:
        json.dump(events, handle)


def make_job(base, ranks, steps, detail_ops):
    """A job of RANKS ranks (8 a node, rank 77 slow) of STEPS steps in one profiler directory, its cluster summary,
    and the timelines of the ranks in DETAIL_OPS (rank -> host ops)."""
    directory = base / "job" / "profiler"
    directory.mkdir(parents=True)
    for rank in range(ranks):
        write_rank(str(directory), rank, ranks, steps, detail_ops.get(rank, 0))
    hosts = {r: f"node{r // 8:03d}" for r in range(ranks)}
    cluster.write(str(directory), noisy_entries({r: 100.0 + (40.0 if r == SLOW_RANK else 0.0) for r in range(ranks)}, hosts, steps=steps))
    return scan(str(base))["job"]


def check_trace(body, budget):
    """The download's events, after the checks every download passes: within BUDGET, one array, the metadata
    first, the rest sorted by time, one time base, the slices of each track nested."""
    assert len(body) <= budget
    events = json.loads(body)
    assert isinstance(events, list)
    kinds = [e["ph"] == "M" for e in events]
    assert kinds == sorted(kinds, reverse=True)  # metadata, then the timed events
    times = [e["ts"] for e in events if e["ph"] != "M"]
    assert times == sorted(times)
    assert [e["args"]["epoch_ns"] for e in events if e["name"] == "time_base"] == [day_base(START_NS)]
    assert overlapping_slices(events) == []
    return events


def processes(events):
    """{rank: its process names} from the ``Rank r: name`` process names."""
    out = {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            rank, _, name = e["args"]["name"].partition(": ")
            out.setdefault(int(rank.split()[1]), set()).add(name)
    return out


@pytest.fixture(scope="module")
def job_1024(tmp_path_factory):
    """1 024 ranks of 60 steps; ranks 0 and 77 (the slow one) with 20 000 host ops each, rank 500 with 1 000."""
    return make_job(tmp_path_factory.mktemp("big"), 1024, 60, {0: 20_000, SLOW_RANK: 20_000, 500: 1_000})


@pytest.mark.unit
def test_1024_ranks_have_their_lanes_and_only_the_slow_and_lowest_rank_their_ops(job_1024):
    ranks = merged_timeline.default_ranks(job_1024, [SLOW_RANK])
    assert ranks == [0, SLOW_RANK]
    body, problems = merged_timeline.download(job_1024, ranks)
    events = check_trace(body, merged_timeline.BUDGET_BYTES)
    assert problems == []
    by_rank = processes(events)
    assert sorted(by_rank) == list(range(1024))
    assert {r: n for r, n in by_rank.items() if n != {"Step Trace"}} == {0: {"Step Trace", "Host Ops"}, SLOW_RANK: {"Step Trace", "Host Ops"}}
    pid = {e["args"]["name"]: e["pid"] for e in events if e["name"] == "process_name"}
    assert [pid[f"Rank {r}: Step Trace"] for r in (0, 1, 76, 77, 78, 1023)] == [1, 3, 78, 79, 81, 1026]  # in rank order
    info = next(e["args"] for e in events if e["name"] == merged_timeline.DOWNLOAD_INFO)
    # 1 022 ranks x 60 steps of lanes are over the quarter of 64 MB: every 3rd step stays
    assert info["lanes"]["every"] == 3 and info["lanes"]["ranks"] == 1022 and info["op_detail_ranks"] == [0, SLOW_RANK] and info["ranks"] == 1024
    lane_steps = [e for e in events if e["ph"] == "X" and e["pid"] == pid["Rank 500: Step Trace"] and e["tid"] == 1]
    assert [e["name"] for e in lane_steps] == [f"Step {n}" for n in range(1, 61, 3)]
    assert lane_steps[0]["args"] == {"step": 1, "stands_for": "steps 1-3", "mean_ms": 10.0, "max_ms": 10.0}
    assert lane_steps[0]["ts"] == round((START_NS + 137 * 500 - day_base(START_NS)) / 1000, 3) and lane_steps[0]["dur"] == 10_000.0
    stages = [e for e in events if e["ph"] == "X" and e["pid"] == pid["Rank 500: Step Trace"] and e["tid"] == 2 and e["args"]["step"] == 1]
    assert [(e["name"], e["dur"]) for e in stages] == [("Step Interval", 1000.0), ("Forward+Backward", 7000.0), ("Tail", 2000.0)]
    counter = [e["args"]["ms"] for e in events if e["ph"] == "C" and e["pid"] == pid["Rank 500: Step Trace"]]
    assert counter == [2.0] * 20  # the kept steps' time in collectives, ms
    ops = [e for e in events if e["ph"] == "X" and e["pid"] == pid["Rank 77: Host Ops"]]
    assert len(ops) == 2 * 20_000  # its whole timeline: the detail fits
    own_steps = [e for e in events if e["ph"] == "X" and e["pid"] == pid["Rank 77: Step Trace"]]
    assert len(own_steps) == 60 and own_steps[0]["dur"] == 20_000.0  # its own file's every step, not lanes


@pytest.mark.unit
def test_asked_ranks_share_what_the_lanes_leave_and_a_rank_over_its_share_keeps_its_longest_slices(job_1024):
    budget = 6_000_000
    body, problems = merged_timeline.download(job_1024, [0, 500], kind="detail", budget=budget)
    events = check_trace(body, budget)
    by_rank = processes(events)
    assert sorted(by_rank) == list(range(1024)) and {r for r, n in by_rank.items() if "Host Ops" in n} == {0, 500}
    info = next(e["args"] for e in events if e["name"] == merged_timeline.DOWNLOAD_INFO)
    pid = {e["args"]["name"]: e["pid"] for e in events if e["name"] == "process_name"}
    lanes = {pid[f"Rank {r}: Step Trace"] for r in range(1024) if r not in (0, 500)}
    lane_steps = [e for e in events if e["ph"] == "X" and e["pid"] in lanes and e["tid"] == 1]
    assert info["lanes"]["every"] > 3 and len(lane_steps) == 1022 * math.ceil(60 / info["lanes"]["every"])
    rank_0 = [e for e in events if e["ph"] == "X" and e["pid"] == pid["Rank 0: Host Ops"]]
    assert 0 < len(rank_0) < 40_000
    [note] = [p for p in problems if p.startswith("rank 0:")]
    assert f"kept the longest {len(rank_0) + 60} of 40060 slices" in note  # its steps, the longest, are all kept
    source = json.load(open(os.path.join(job_1024.ranks[0], names.rank_file(names.TIMELINE_DISPLAY, 0, device="cpu"))))
    longest = sorted((e["dur"] for e in source if e["ph"] == "X" and e["pid"] == 2), reverse=True)
    assert sorted((e["dur"] for e in rank_0), reverse=True) == longest[:len(rank_0)]
    assert len([e for e in events if e["ph"] == "X" and e["pid"] == pid["Rank 500: Host Ops"]]) == 2_000  # small: whole
    assert info["left_out"] == problems


@pytest.mark.unit
@pytest.mark.parametrize("budget", [40_000, 300_000])
def test_a_budget_too_small_for_every_rank_is_still_kept_and_names_the_ranks_left_out(job_1024, budget):
    body, problems = merged_timeline.download(job_1024, [0], budget=budget)
    events = check_trace(body, budget)
    drawn = set(processes(events))
    left_out = {int(p.split(":")[0].split()[1]) for p in problems if "lanes are past" in p}
    assert drawn and left_out and drawn | left_out == set(range(1024)) and not drawn & left_out
    info = next(e["args"] for e in events if e["name"] == merged_timeline.DOWNLOAD_INFO)
    assert info["left_out"][-1].startswith("and ") and info["lanes"]["every"] == 60  # one step a rank, the most it can thin


@pytest.mark.unit
@pytest.mark.parametrize("ranks", [8, 128])
def test_small_jobs_keep_every_step(tmp_path, ranks):
    job = make_job(tmp_path, ranks, 20, {0: 500})
    body, problems = merged_timeline.download(job, merged_timeline.default_ranks(job, [SLOW_RANK] if ranks > SLOW_RANK else []))
    events = check_trace(body, merged_timeline.BUDGET_BYTES)
    assert problems == ([] if ranks < SLOW_RANK else [f"rank {SLOW_RANK}: no timeline file"])
    assert sorted(processes(events)) == list(range(ranks))
    info = next(e["args"] for e in events if e["name"] == merged_timeline.DOWNLOAD_INFO)
    assert info["lanes"]["steps"] == "every step"
    assert sum(1 for e in events if e["ph"] == "X" and e["tid"] == 1 and e["name"].startswith("Step")) == 20 * ranks


@pytest.mark.unit
def test_ranks_on_two_hosts_whose_clocks_differ_by_3_s_end_their_steps_together(tmp_path):
    """Ranks 0, 1 on host a; 2, 3 on host b, whose clock reads 3 s ahead; every step ends in the same all-reduce. The
    download and the step timeline of the Cluster page move host a's ranks by the roll-up's clock offset: each step ends
    at one instant (within the ranks' 0.4 us of skew) on every rank, lanes and own timelines alike."""
    directory = tmp_path / "job" / "profiler"
    directory.mkdir(parents=True)
    hosts, clock = {0: "a", 1: "a", 2: "b", 3: "b"}, {"a": 0, "b": 3_000_000_000}
    for rank, host in hosts.items():
        write_rank(str(directory), rank, 4, 10, ops=50 if rank in (0, 2) else 0, clock_ns=clock[host])
    entries = noisy_entries({r: 5.0 for r in hosts}, hosts, steps=10)
    for e in entries:  # the step ends each rank's summary holds, on its own host's clock
        e["end_ns"] = [START_NS + 137 * e["rank_id"] + clock[hosts[e["rank_id"]]] + n * STEP_NS for n in e["steps"]]
    rolled = cluster.write(str(directory), entries)
    assert [(h["host"], h["clock_offset_ms"]) for h in rolled["hosts"]] == [("a", 0.0), ("b", 3000.0)]
    job = scan(str(tmp_path))["job"]
    body, problems = merged_timeline.download(job, [2])
    events = check_trace(body, merged_timeline.BUDGET_BYTES)
    assert problems == []
    info = next(e["args"] for e in events if e["name"] == merged_timeline.DOWNLOAD_INFO)
    assert info["clock"].startswith("on the clock of host b:")
    rank_of = {e["pid"]: int(e["args"]["name"].split(":")[0].split()[1]) for e in events if e["name"] == "process_name"}

    def ends(trace):
        out = {}
        for e in trace:
            if e["ph"] == "X" and e["name"].startswith("Step ") and e.get("cat") == "step":
                out.setdefault(int(e["name"].split()[1]), {})[rank_of[e["pid"]]] = e["ts"] + e["dur"]
        return out

    by_step = ends(events)
    assert sorted(by_step) == list(range(1, 11)) and all(sorted(at) == [0, 1, 2, 3] for at in by_step.values())
    assert max(max(at.values()) - min(at.values()) for at in by_step.values()) < 1.0  # us; 3 000 000 us apart unaligned
    merged, _ = merged_timeline.build(job, [0, 2])  # the Cluster page's step timeline: the ranks' own files
    rank_of = {e["pid"]: int(e["args"]["name"].split(":")[0].split()[1]) for e in merged if e.get("name") == "process_name"}
    own = ends(merged)
    assert all(sorted(at) == [0, 2] and abs(at[0] - at[2]) < 1.0 for at in own.values())
    assert own[1][2] == by_step[1][2]  # on the download's clock
