"""MindInsight 2.3.1 itself, started on a profiled LeNet run, answers every profiler API with our data.

MindInsight is installed from the package index once into its own venv under
``~/.cache/msprof-agent-test-clients/`` (it pins its own Flask and protobuf); where that fails the test
skips, saying why. ``mindinsight start`` execs gunicorn by name, so it runs with its venv's bin first on
PATH, on a free loopback port, and is stopped at the end.
"""
import json
import os
import subprocess
import urllib.request

import pytest

from conftest import EXAMPLES, client_python, free_port, read_csv, read_json, run_script, step_trace

pytestmark = [pytest.mark.client, pytest.mark.mindspore]
MINDINSIGHT = "mindinsight==2.3.1"
VENVS = [("mindinsight", MINDINSIGHT, "client")]  # made ahead (conftest)
STEPS = 6
JOB = "lenet"  # the train job: a folder under the summary base dir holding profiler/
PLAIN_JOB = "lenet_plain"  # profiled without data_process


@pytest.fixture(scope="module")
def mindinsight(tmp_path_factory):
    """(GET, POST, profiler dir): MindInsight's REST API on a LeNet run profiled with the dataset pipeline."""
    pytest.importorskip("mindspore")
    bin_dir = os.path.dirname(client_python("mindinsight", MINDINSIGHT))
    base = tmp_path_factory.mktemp("summaries")
    for job, options in ((JOB, {"data_process": True}), (PLAIN_JOB, {})):
        run = run_script([os.path.join(EXAMPLES, "mindspore_lenet.py"), "--steps", str(STEPS), "--quiet"],
                         dict({"start": True, "output_path": str(base / job)}, **options), timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
    port = str(free_port())
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    start = subprocess.run([os.path.join(bin_dir, "mindinsight"), "start", "--port", port, "--summary-base-dir", str(base),
                            "--workspace", str(tmp_path_factory.mktemp("workspace"))], env=env, capture_output=True, text=True, timeout=300)
    assert "service start state: success" in start.stdout + start.stderr, start.stdout + start.stderr
    url = f"http://127.0.0.1:{port}/v1/mindinsight/profile/"
    job = {"train_id": f"./{JOB}", "profile": "profiler", "device_id": "0"}

    def call(path, query=None, body=None, train_id=JOB):
        params = "&".join(f"{k}={v}" for k, v in dict(job, train_id=f"./{train_id}", **(query or {})).items())
        data = None if body is None else json.dumps(dict({"device_id": "0"}, **body)).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{url}{path}?{params}", data=data), timeout=120) as response:
            answer = json.loads(response.read())
        assert not (isinstance(answer, dict) and "error_code" in answer), f"{path}: {answer}"
        return answer

    try:
        yield call, str(base / JOB / "profiler")
    finally:
        subprocess.run([os.path.join(bin_dir, "mindinsight"), "stop", "--port", port], env=env, capture_output=True, timeout=120)


def _ms(units):
    return round(int(units) / 1e5, 4)  # step trace units (10 ns) as MindInsight shows them


def test_step_trace_graph_and_each_step(mindinsight):
    call, profiler_dir = mindinsight
    header, rows, average = step_trace(profiler_dir)
    trace = {"dir": f"./{JOB}"}
    graph = call("training-trace/graph", dict(trace, type="0"))
    assert graph["summary"]["total_steps"] == STEPS == len(rows)
    assert graph["point_info"] == read_json(os.path.join(profiler_dir, "step_trace_point_info_0.json"))
    assert graph["summary"]["iteration_interval"] == _ms(average[0][header.index("iteration_interval")])
    for n, row in enumerate(rows, 1):
        total = call("training-trace/graph", dict(trace, type=str(n)))["training_trace_graph"][0][0]
        assert total["duration"] == _ms(row[header.index("total")])
    for stage in ("iteration_interval", "fp_and_bp", "tail"):
        times = call("training-trace/target-time-info", dict(trace, type=stage))["info"][stage]
        assert times == [_ms(row[header.index(stage)]) for row in rows]


def test_op_search_for_cpu_op_types_and_ops(mindinsight):
    call, profiler_dir = mindinsight
    types = read_csv(os.path.join(profiler_dir, "cpu_op_type_info_0.csv"))[1:]
    ops = read_csv(os.path.join(profiler_dir, "cpu_op_detail_info_0.csv"))[1:]
    found = call("ops/search", body={"op_type": "cpu_op_type", "filter_condition": {},
                                     "sort_condition": {"name": "total_compute_time", "type": "descending"}})
    assert found["object"] and sorted(row[0] for row in found["object"]) == sorted(row[0] for row in types)
    by_type = {row[0]: row for row in found["object"]}
    for row in types:
        assert by_type[row[0]][1] == int(row[1]) and by_type[row[0]][2] == int(row[2])
    found = call("ops/search", body={"op_type": "cpu_op_info", "filter_condition": {},
                                     "sort_condition": {"name": "op_total_time", "type": "descending"},
                                     "group_condition": {"limit": 100, "offset": 0}})
    assert found["size"] == len(ops) and {row[3] for row in found["object"]} == {row[3] for row in ops}


def test_queue_and_data_pipeline(mindinsight):
    call, profiler_dir = mindinsight
    lines = [line.split() for line in open(os.path.join(profiler_dir, "dataset_iterator_profiling_0.txt"))]
    queue = call("queue_info", {"type": "device_queue"})
    assert queue["size"] == sum(line[0] == "1" for line in lines) > 0
    times = call("minddata_op", {"type": "device_queue"})
    assert times["info"]["get_cost"] == [float(line[3]) for line in lines if line[:2] == ["0", "0"]]
    assert times["size"] == STEPS
    pipeline = call("minddata-pipeline/op-queue", body={"filter_condition": {}, "sort_condition": {}, "group_condition": {}})
    assert {row[1] for row in pipeline["object"]} >= {"GeneratorOp", "BatchOp"}


def test_minddata_cpu_utilization(mindinsight):
    call, profiler_dir = mindinsight
    ours = read_json(os.path.join(profiler_dir, "minddata_cpu_utilization_0.json"))
    answer = call("minddata-cpu-utilization-summary", body={"filter_condition": {}})
    assert answer["cpu_processor_num"] == ours["cpu_processor_num"]
    shown = answer["device_info"]["user_utilization"]["metrics"]
    assert shown and shown == ours["device_info"]["user_utilization"][:len(shown)]  # the samples within the steps


def test_timeline_summary(mindinsight):
    call, profiler_dir = mindinsight
    summary = call("timeline-summary", {"dir": f"./{JOB}", "device_type": "gpu"})  # the page of a host-only run asks for gpu
    assert summary == read_json(os.path.join(profiler_dir, "cpu_timeline_summary_0.json")) and summary["num_of_ops"] > 0


def test_tuning_proposal(mindinsight):
    call, _ = mindinsight
    proposal = call("summary/propose")
    assert proposal["step_trace-iter_interval"]  # the step interval, read from the average row
    # MindInsight proposes minddata_cpu_utilization only past its own threshold of the pipeline's CPU share,
    # which a quiet machine's LeNet pipeline stays under since the sampler reads states from cpu_times() deltas
    assert "minddata_device_queue" in proposal


def test_a_run_under_the_default_options_answers_every_api(mindinsight):
    """Without data_process, all 9 profiler APIs answer: step trace (graph, per step), CPU op types and ops,
    queue info (none: no queue file, the waits are in our own), CPU utilization (the page needs pipeline_profiling,
    here without ops), timeline summary, the tuning proposal (no division by zero batches), devices and profile info."""
    call, data_dir = mindinsight
    profiler_dir = os.path.join(os.path.dirname(os.path.dirname(data_dir)), PLAIN_JOB, "profiler")
    trace = {"dir": f"./{PLAIN_JOB}"}
    assert call("training-trace/graph", dict(trace, type="0"), train_id=PLAIN_JOB)["summary"]["total_steps"] == STEPS
    assert len(call("training-trace/target-time-info", dict(trace, type="fp_and_bp"), train_id=PLAIN_JOB)["info"]["fp_and_bp"]) == STEPS
    types = read_csv(os.path.join(profiler_dir, "cpu_op_type_info_0.csv"))[1:]
    found = call("ops/search", body={"op_type": "cpu_op_type", "filter_condition": {}, "sort_condition": {"name": "total_compute_time",
                                                                                                       "type": "descending"}}, train_id=PLAIN_JOB)
    assert sorted(row[0] for row in found["object"]) == sorted(row[0] for row in types)
    found = call("ops/search", body={"op_type": "cpu_op_info", "filter_condition": {}, "sort_condition": {"name": "op_total_time", "type": "descending"},
                                     "group_condition": {"limit": 100, "offset": 0}}, train_id=PLAIN_JOB)
    assert found["size"] == len(read_csv(os.path.join(profiler_dir, "cpu_op_detail_info_0.csv"))) - 1
    assert not os.path.exists(os.path.join(profiler_dir, "dataset_iterator_profiling_0.txt"))
    assert os.path.isfile(os.path.join(profiler_dir, "data_wait_profiling_0.txt"))  # the waits, for our pages and compare
    for kind in ("device_queue", "get_next"):
        assert call("queue_info", {"type": kind}, train_id=PLAIN_JOB) == {}  # MindInsight's "no queue data"
    answer = call("minddata-cpu-utilization-summary", body={"filter_condition": {}}, train_id=PLAIN_JOB)
    assert answer["device_info"]["user_utilization"]["metrics"] and answer["op_info"]["op_list"] == []
    summary = call("timeline-summary", dict(trace, device_type="gpu"), train_id=PLAIN_JOB)
    assert summary == read_json(os.path.join(profiler_dir, "cpu_timeline_summary_0.json"))
    assert "common-profiler_tutorial" in call("summary/propose", train_id=PLAIN_JOB)  # an answer, not HTTP 500
    assert call("devices", train_id=PLAIN_JOB)["device_list"] == ["0"]
    assert call("profile_info", train_id=PLAIN_JOB)["mi"] == "2.3.1"
