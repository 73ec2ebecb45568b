"""The cluster step and the fan-out: many ranks' raw stores analysed in parallel, one roll-up from their summaries.

The stores are written with the agent's own ``EventWriter``: each rank works its own time per step and
then waits in one all-reduce for the slowest, as synchronised data-parallel ranks do.
"""
import glob
import json
import os
import random
import re
import sqlite3
import subprocess
import sys

import pytest

from conftest import ROOT, read_json
from msprof_agent.analysis import cluster
from msprof_agent.contract import names
from msprof_agent.contract.summary import summaries
from msprof_agent.export import ascend_comm
from msprof_agent.pipeline import analyse_rank, cluster_roll_up, offline_analyse
from msprof_agent.records import FORMAT
from msprof_agent.store import EventWriter, coded
from test_viewer import EVIL, charts_of

pytestmark = pytest.mark.unit

BASE = 1_700_000_000_000_000_000
MS = 1_000_000
STEPS = 6


def write_job(profiler_dir, own_ms, hosts=None, group=None, rank_dirs=False, framework="torch"):
    """One raw store per rank: OWN_MS[r] ms of ops per step, then an all-reduce until the slowest rank is done
    (on process group GROUP = (name, ranks), entered before it, where given). ``rank_dirs``: PROFILER_DIR is the
    job's folder, each rank's store in its own ``rank_{r}/profiler`` (each rank its own output path)."""
    step_ms = max(own_ms) + 2
    for rank, own in enumerate(own_ms):
        writer = EventWriter(os.path.join(profiler_dir, f"rank_{rank}", "profiler") if rank_dirs else profiler_dir, rank, BASE)
        writer.add({"k": "meta", "format": FORMAT, "framework": framework, "device_target": "CPU", "pid": 1000 + rank, "rank_id": rank,
                    "rank_size": len(own_ms),
                    "host": (hosts or {}).get(rank, "node0"), "started_ns": BASE, "cpus": 2, "options": {"cpu_sampling_interval": 1000}})
        starts, durs = [], []
        for n in range(1, STEPS + 1):
            start = BASE + (n - 1) * step_ms * MS
            writer.add({"k": "step", "n": n, "start": start, "end": start + step_ms * MS, "wait": 0, "waits": [], "fp": None, "bp": None, "win": True})
            call = {"k": "comm", "step": n, "name": "allreduce", "start": start + int(own * MS), "dur": int((step_ms - own) * MS), "bytes": 4096}
            if group:
                writer.add({"k": "enter", "group": group[0], "seq": n, "name": "allreduce", "step": n, "ts": call["start"],
                            **({"ranks": group[1]} if n == 1 else {})})
                call.update(group=group[0], seq=n)
            writer.add(call)
            starts.append(start)
            durs.append(int(own * MS))
        record = {"k": "ops", "source": "test", "device": "cpu", "start": starts, "dur": durs, "tid": [1] * len(starts)}
        record["name_codes"], record["name_table"] = coded(["aten::mm"] * len(starts))
        record["type_codes"], record["type_table"] = coded(["aten::mm"] * len(starts))
        writer.add(record)
        writer.add({"k": "end", "reason": "exit", "steps": STEPS})
        writer.close()



def test_groups_are_rolled_up_by_name_the_slowest_first():
    """8 ranks: the default group on all, two tensor-parallel groups of 4; tp1's ranks spend the most a step in it."""
    def entry(rank):
        tp = f"tp{rank // 4}"
        return {"rank_id": rank, "comm_groups": {"world": {"calls_per_step": 2.0, "ms_per_step": 3.0 + rank / 10},
                                                 tp: {"calls_per_step": 8.0, "ms_per_step": (9.0 if tp == "tp1" else 1.0) + rank}}}
    rows = cluster.group_roll_up([entry(r) for r in (7, 3, 0, 5, 1, 6, 2, 4)])
    assert [(g["group"], g["ranks"], g["ms_per_step"]) for g in rows] == [("tp1", [4, 5, 6, 7], 14.5), ("world", list(range(8)), 3.35),
                                                                           ("tp0", [0, 1, 2, 3], 2.5)]
    assert (rows[0]["most"], rows[0]["least"], rows[0]["calls_per_step"]) == ({"rank": 7, "ms_per_step": 16.0}, {"rank": 4, "ms_per_step": 13.0}, 8.0)

def analysed_files(profiler_dir):
    """Every analysed file's bytes (the raw store left out)."""
    return {name: open(os.path.join(profiler_dir, name), "rb").read() for name in sorted(os.listdir(profiler_dir))
            if os.path.isfile(os.path.join(profiler_dir, name))}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """Six ranks on one host, rank 4 working 40 ms more a step, analysed by ``msprof-agent analyse`` (a process pool)."""
    profiler_dir = str(tmp_path_factory.mktemp("job") / "profiler")
    write_job(profiler_dir, [20, 21, 20, 22, 60, 21])
    proc = subprocess.run([sys.executable, "-m", "msprof_agent", "analyse", os.path.dirname(profiler_dir)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return profiler_dir, proc.stderr


def test_the_pool_analyses_every_rank_and_says_its_progress(job):
    profiler_dir, stderr = job
    assert "analysed 6/6 ranks" in stderr and "processes" in stderr and "ranks/s" in stderr
    summary = read_json(os.path.join(profiler_dir, names.CLUSTER_SUMMARY))
    assert [r["rank_id"] for r in summary["ranks"]] == list(range(6)) and summary["missing_ranks"] == []
    assert summary["slow_ranks"] == [4] and summary["slow_nodes"] == []
    straggler = summary["findings"][0]
    assert (straggler["id"], straggler["evidence"]["rank"]) == ("straggler", 4)
    assert 38 <= straggler["ms_per_step"] <= 40.5
    assert summary["per_step"]["own_ms"][4] == [60.0] * STEPS and summary["per_step"]["comm_ms"][4] == [2.0] * STEPS


def test_the_roll_up_is_the_same_in_any_order_and_at_exit(job, tmp_path):
    profiler_dir, _ = job
    written = open(os.path.join(profiler_dir, names.CLUSTER_SUMMARY), "rb").read()
    entries = [cluster.entry(s) for _, s in summaries(profiler_dir)]
    random.Random(7).shuffle(entries)
    cluster.write(str(tmp_path), entries)
    assert open(tmp_path / names.CLUSTER_SUMMARY, "rb").read() == written
    # at exit: each rank analyses itself; the roll-up appears with the last summary, and is the same file
    exit_dir = str(tmp_path / "exit" / "profiler")
    write_job(exit_dir, [20, 21, 20, 22, 60, 21])
    for rank in (5, 0, 3, 1, 4):
        analyse_rank(exit_dir, rank)
        assert not os.path.exists(os.path.join(exit_dir, names.CLUSTER_SUMMARY)), rank
        assert not os.path.exists(os.path.join(exit_dir, names.CLUSTER_REPORT)), rank
    first = open(os.path.join(exit_dir, names.rank_file(names.REPORT, 5)), encoding="utf-8").read()
    assert f'<a href="{names.CLUSTER_REPORT}" id="cluster-link">' in first  # where the page will be, before it is
    analyse_rank(exit_dir, 2)
    exit_summary = read_json(os.path.join(exit_dir, names.CLUSTER_SUMMARY))
    assert exit_summary == json.loads(written.decode().replace(profiler_dir, exit_dir))
    # the Cluster page with it, the same bytes as analyse wrote: it holds no path, no time, nothing of the order
    page = open(os.path.join(profiler_dir, names.CLUSTER_REPORT), "rb").read()
    assert open(os.path.join(exit_dir, names.CLUSTER_REPORT), "rb").read() == page


@pytest.mark.parametrize("rank_dirs", [False, True], ids=["shared", "rank_dirs"])
def test_the_cluster_page_lies_beside_the_summary_and_each_report_links_to_it(tmp_path, rank_dirs):
    """Two ranks, in one shared profiler/ or each in its own rank_N/profiler: cluster_report.html beside
    cluster_summary.json, each rank's report linking to it and it to each report, relatively; analysed again, the same bytes."""
    job = str(tmp_path / "job")
    write_job(job if rank_dirs else os.path.join(job, "profiler"), [20, 60], rank_dirs=rank_dirs)
    offline_analyse(job)
    where = job if rank_dirs else os.path.join(job, "profiler")
    page_path = os.path.join(where, names.CLUSTER_REPORT)
    assert os.path.isfile(os.path.join(where, names.CLUSTER_SUMMARY)) and os.path.isfile(page_path)
    for rank in (0, 1):
        directory = os.path.join(job, f"rank_{rank}", "profiler") if rank_dirs else os.path.join(job, "profiler")
        report = open(os.path.join(directory, names.rank_file(names.REPORT, rank)), encoding="utf-8").read()
        [href] = re.findall(r'<a href="([^"]*)" id="cluster-link">', report)
        assert href == ("../../" if rank_dirs else "") + names.CLUSTER_REPORT
        assert os.path.samefile(os.path.join(directory, href), page_path)
    page = open(page_path, encoding="utf-8").read()
    shown = page.split("<main>", 1)[1]
    assert "Slow ranks: 1; slow nodes: none." in shown and "its step (median): op time 60.0 ms" in shown
    rows = re.findall(r'<td data-col="rank_id" data-v="[^"]*"><a href="([^"]*)">(\d+)</a>', shown)
    assert [rank for _, rank in rows] == ["1", "0"]  # the most own work first
    for href, rank in rows:
        assert os.path.isfile(os.path.join(where, href)) and href.endswith(names.rank_file(names.REPORT, rank))
    [straggler] = re.findall(r'<a href="([^"]*)" class="finding-link" data-link="rank">', shown)
    assert straggler == rows[0][0] + "#steps"
    before = open(page_path, "rb").read()
    offline_analyse(job)
    assert open(page_path, "rb").read() == before


def test_a_single_rank_report_has_no_cluster_link_and_no_page(tmp_path):
    profiler_dir = str(tmp_path / "one" / "profiler")
    write_job(profiler_dir, [20])
    offline_analyse(os.path.dirname(profiler_dir))
    assert 'id="cluster-link"' not in open(os.path.join(profiler_dir, names.rank_file(names.REPORT, 0)), encoding="utf-8").read()
    assert not os.path.exists(os.path.join(profiler_dir, names.CLUSTER_REPORT))


def test_each_report_is_the_same_size_whatever_the_number_of_ranks(tmp_path):
    """Rank 0 of a 2-rank and of an 8-rank job works alike; its report is the same size (the cluster lives in one place)."""
    sizes = []
    for ranks in (2, 8):
        profiler_dir = str(tmp_path / f"job{ranks}" / "profiler")
        write_job(profiler_dir, [20] + [60] * (ranks - 1))
        offline_analyse(os.path.dirname(profiler_dir))
        sizes.append(os.path.getsize(os.path.join(profiler_dir, names.REPORT.format(rank=0))))
    assert sizes[0] == sizes[1], sizes


def test_dask_local_cluster_writes_the_same_files_as_the_pool(job, tmp_path):
    pytest.importorskip("distributed", reason="DASK NOT INSTALLED: the [cluster] extra (pip install 'msprof-agent[cluster]')")
    profiler_dir, _ = job
    pool_files = analysed_files(profiler_dir)
    offline_analyse(os.path.dirname(profiler_dir), scheduler="local", keep_summaries=False)
    dask_files = analysed_files(profiler_dir)
    assert sorted(dask_files) == sorted(pool_files)
    assert [name for name in pool_files if dask_files[name] != pool_files[name]] == []


def test_an_unreachable_scheduler_is_said_in_one_line(job):
    profiler_dir, _ = job
    proc = subprocess.run([sys.executable, "-m", "msprof_agent", "analyse", os.path.dirname(profiler_dir), "--scheduler", "tcp://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="3s"))  # Dask's own setting: 30 s unless set
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("msprof-agent: analyse:")]
    assert len(lines) == 1 and "tcp://127.0.0.1:9" in lines[0], proc.stderr[-2000:]


def test_a_process_group_keys_its_collectives_and_links_in_the_export(tmp_path):
    """Ranks 0 and 2 of 3 all-reduce on group tp_0: its name and global ranks in each member's parallel_group_info,
    its calls and links keyed by msprof-analyze's hash of the name, each link in group-local ranks; rank 1 has none."""
    profiler_dir = str(tmp_path / "job" / "profiler")
    write_job(profiler_dir, [20, 21, 20], group=("tp_0", [0, 2]))
    offline_analyse(os.path.dirname(profiler_dir), export_type="text")
    key = str(ascend_comm.double_hash("tp_0"))
    assert key == "12567585671917305"  # msprof-analyze 26.2's double_hash("tp_0")
    dirs = {int(read_json(os.path.join(d, names.ASCEND_METADATA))["rank"]): d for d in glob.glob(os.path.join(str(tmp_path / "job"), "*_ascend_pt"))}
    for rank, local in ((0, 0), (2, 1), (1, None)):
        meta = read_json(os.path.join(dirs[rank], names.ASCEND_METADATA))
        matrix = read_json(os.path.join(dirs[rank], names.ASCEND_OUTPUT, names.ASCEND_COMMUNICATION_MATRIX))
        comm = read_json(os.path.join(dirs[rank], names.ASCEND_OUTPUT, names.ASCEND_COMMUNICATION))
        if local is None:
            assert "parallel_group_info" not in meta and matrix == {}
            continue
        assert meta["parallel_group_info"] == {"tp_0": {"group_name": "tp_0", "group_rank": local, "global_ranks": [0, 2]}}
        assert sorted(comm["step1"]["collective"]) == ["Total Op Info", f"allreduce__1_0@{key}"]
        assert sorted(matrix["step1"]["collective"]) == sorted(f"allreduce-{s}@{key}" for s in ("top1", "middle", "bottom1", "total"))
        links = matrix["step1"]["collective"][f"allreduce-total@{key}"]
        assert sorted(links) == [f"{local}-0", f"{local}-1"] and links[f"{local}-{local}"]["Transport Type"] == "LOCAL"
        assert links[f"{local}-{1 - local}"]["Transit Size(MB)"] == round(4096 / (1 << 20), 9)
    summary = read_json(os.path.join(profiler_dir, names.rank_file(names.SUMMARY, 0)))
    assert summary["collectives"] == {"tp_0": {"ranks": [0, 2], "entered": STEPS, "completed": STEPS, "last": {"name": "allreduce", "step": STEPS}}}


def test_a_mindspore_job_s_collectives_fill_the_database_msprof_analyze_reads_for_it(tmp_path):
    """Two MindSpore ranks all-reducing on the world group: the db export writes communication_analyzer.db (what
    msprof-analyze 26.2 reads for a MindSpore rank; PyTorch's is analysis.db), its link table a row per call and link as
    msprof writes it (msprof-analyze's CommMatrixSum fails on the per-step form for MindSpore: "'DataFrame' object has no
    attribute 'str'")."""
    job = tmp_path / "job"
    write_job(str(job / "profiler"), [20, 60], framework="mindspore")
    offline_analyse(str(job), export_type="db")
    world = str(ascend_comm.double_hash("world"))
    directories = glob.glob(str(job / "*_ascend_ms" / names.ASCEND_OUTPUT))
    assert len(directories) == 2
    for output in directories:
        assert names.ASCEND_ANALYSIS_DB["torch"] not in os.listdir(output)
        db = sqlite3.connect(os.path.join(output, names.ASCEND_ANALYSIS_DB["mindspore"]))
        columns = [row[1] for row in db.execute(f"PRAGMA table_info({names.ASCEND_COMM_MATRIX_TABLE})")]
        assert tuple(columns) == ascend_comm.CALL_MATRIX_COLUMNS
        rows = db.execute(f"SELECT hccl_op_name, group_name, src_rank, dst_rank FROM {names.ASCEND_COMM_MATRIX_TABLE}").fetchall()
        assert len(rows) == 2 * STEPS and {r[1] for r in rows} == {world} and rows[0][0] == "allreduce__1_0"
        calls = db.execute(f"SELECT count(*) FROM {names.ASCEND_COMM_TIME_TABLE} WHERE group_name = ?", (world,)).fetchone()
        assert calls == (STEPS,)


def noisy_entries(own_by_rank, hosts, steps=1, seed=0):
    """The cluster step's entries of ranks working OWN_BY_RANK ms a step (1 % noise from step to step), as HOSTS place them."""
    noise = random.Random(seed)
    entries = []
    for r, ms in own_by_rank.items():
        own = [ms * (1 + noise.gauss(0, 0.01)) if steps > 1 else ms for _ in range(steps)]
        step = max(own) + 1.0
        entries.append({"rank_id": r, "host": hosts[r], "rank_size": len(own_by_rank), "framework": "torch", "steps": list(range(1, steps + 1)),
                        "step_ms": [step] * steps, "own_ms": own, "comm_ms": [step - o for o in own], "end_ns": [],
                        "own_work_ms": ms, "step_time_ms": step, "iteration_interval": None, "fp_and_bp": None, "tail": None,
                        "communication_ms": 1.0, "breakdown_ms": None, "closed": True, "collectives": {},
                        "comm_groups": {"world": {"calls_per_step": 1.0, "ms_per_step": round(step - ms, 4)}}})
    return entries


def test_one_slow_rank_and_one_slow_node_among_noisy_ranks():
    """1 024 ranks, 8 a node, own work 100 ms with 2 % noise; rank 77 is 30 ms slower, node 9's ranks all 25 ms slower."""
    noise = random.Random(3)
    hosts = {r: f"node{r // 8:03d}" for r in range(1024)}
    own = {r: 100.0 * (1 + noise.gauss(0, 0.02)) + (30.0 if r == 77 else 0.0) + (25.0 if hosts[r] == "node009" else 0.0) for r in range(1024)}
    slow_ranks, slow_nodes, findings = cluster.stragglers(noisy_entries(own, hosts))
    assert (slow_ranks, slow_nodes) == ([77], ["node009"])
    assert sorted(f["id"] for f in findings) == ["slow_node", "straggler"]
    quiet = {r: 100.0 * (1 + noise.gauss(0, 0.02)) for r in range(1024)}
    assert cluster.stragglers(noisy_entries(quiet, hosts))[:2] == ([], [])


def test_two_ranks_name_the_slower_only_past_the_minimum():
    hosts = {0: "a", 1: "a"}
    assert cluster.stragglers(noisy_entries({0: 50.0, 1: 250.0}, hosts))[0] == [1]
    assert cluster.stragglers(noisy_entries({0: 50.0, 1: 53.0}, hosts))[0] == []


def test_the_cluster_page_marks_a_slow_node_and_its_slow_rank(tmp_path):
    """64 ranks, 8 a node: node3's ranks work 25 ms more a step, its rank 27 40 ms more again. The page the roll-up
    writes marks the node's rows and the rank's on every heatmap, by name, and its table says which is which."""
    hosts = {r: f"node{r // 8}" for r in range(64)}
    own = {r: 100.0 + (25.0 if hosts[r] == "node3" else 0.0) + (40.0 if r == 27 else 0.0) for r in range(64)}
    rolled = cluster_roll_up(str(tmp_path), noisy_entries(own, hosts))
    assert (rolled["slow_ranks"], rolled["slow_nodes"]) == ([27], ["node3"])
    html = open(tmp_path / names.CLUSTER_REPORT, encoding="utf-8").read()
    for key in ("step_ms", "own_ms", "comm_ms"):
        layout = charts_of(html)[f"cl-heat-{key}"]["layout"]
        assert [(a["text"], a["y"]) for a in layout["annotations"]] == [("slow node node3", 28), ("slow rank 27", 27)]
        node, rank = layout["shapes"]
        assert node["y0"] < 24 < 31 < node["y1"] and node["y0"] < rank["y0"] < 27 < rank["y1"] < node["y1"]
    assert html.count('data-v="slow node"') == 7 and html.count('data-v="slow rank"') == 1


def test_the_heatmaps_of_many_steps_bin_them_and_keep_a_slow_step_in_sight(tmp_path):
    """1 024 ranks of 120 steps: past 60 000 cells a heatmap the steps are binned, 3 to a column (40 columns); rank 77's one
    step 300 ms slower shows whole in its column on the step and own work maps (the column's max), the waits are its mean;
    the hover and title say which steps a column holds, and the slow rank is still marked at the last column."""
    hosts = {r: f"node{r // 8:03d}" for r in range(1024)}
    entries = noisy_entries({r: 100.0 + (40.0 if r == 77 else 0.0) for r in range(1024)}, hosts, steps=120)
    slow = entries[77]
    slow["own_ms"][49] += 300.0  # step 50
    slow["step_ms"][49] += 300.0
    cluster_roll_up(str(tmp_path), entries)
    charts = charts_of(open(tmp_path / names.CLUSTER_REPORT, encoding="utf-8").read())
    for key, how in (("step_ms", "max"), ("own_ms", "max"), ("comm_ms", "mean")):
        trace, layout = charts[f"cl-heat-{key}"]["data"][0], charts[f"cl-heat-{key}"]["layout"]
        assert trace["x"][:2] == ["1\u20133", "4\u20136"] and trace["x"][-1] == "118\u2013120" and len(trace["x"]) == 40
        assert len(trace["z"]) == 1024 and {len(row) for row in trace["z"]} == {40} and layout["xaxis"]["type"] == "category"
        assert f"steps %{{x}} ({how})" in trace["hovertemplate"] and layout["title"]["text"].endswith(f"each column the {how} of 3 steps")
        [column] = [i for i, label in enumerate(trace["x"]) if label == "49\u201351"]
        cells = [round(v, 3) for v in slow[key][48:51]]
        assert trace["z"][77][column] == (max(cells) if how == "max" else round(sum(slow[key][48:51]) / 3, 3))
        assert [(a["text"], a["x"]) for a in layout["annotations"]] == [("slow rank 77", "118\u2013120")]
    assert charts["cl-heat-own_ms"]["data"][0]["z"][77][column] > 400  # about 140 ms + 300 ms, not diluted into its neighbours (a mean of the 3: about 240)


def test_a_host_name_of_markup_shows_as_text_on_the_cluster_page(tmp_path):
    """A slow node named with markup: the page's table, findings and heatmap labels hold it as text, never as markup."""
    hosts = {0: EVIL, 1: EVIL, 2: "b", 3: "b", 4: "c", 5: "c"}
    rolled = cluster_roll_up(str(tmp_path), noisy_entries({r: 150.0 if hosts[r] == EVIL else 100.0 for r in hosts}, hosts))
    assert rolled["slow_nodes"] == [EVIL]
    html = open(tmp_path / names.CLUSTER_REPORT, encoding="utf-8").read()
    assert EVIL not in html.split("<main>", 1)[1]
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert charts_of(html)["cl-heat-own_ms"]["layout"]["annotations"][0]["text"] == "slow node &lt;img src=x onerror=alert(1)&gt;"
