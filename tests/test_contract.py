"""The output contract's rules and readers on small hand-made inputs (no framework, no subprocess)."""
import os
import shutil

import orjson
import pytest

from msprof_agent import compare, contract

pytestmark = pytest.mark.unit


def _ops(*usages, parents=None):
    """A linear pipeline source(0) -> ... -> root(n-1), each op's output queue usage given."""
    count = len(usages)
    return [{"op_id": i, "parent_id": i + 1 if i + 1 < count else -1, "children": [i - 1] if i else [], "queue_usage": u}
            for i, u in enumerate(usages)]


@pytest.mark.parametrize("usages, marked", [
    ((0.9, 0.5, 0.7), [1]),  # input high, output low
    ((0.7, 0.9, 0.9), [2]),  # the root's input high
    ((0.8, 0.5, 0.7), []),  # 0.8 is not above the high mark
    ((0.1, 0.2, 0.3), [0]),  # every queue low: the source
    ((0.1, 0.2, 0.6), []),  # 0.6 is not below the low mark
])
def test_pipeline_bottleneck_rule(usages, marked):
    assert [m["op_id"] for m in contract.pipeline_bottlenecks(_ops(*usages))] == marked


def test_step_trace_table_adds_up_and_reads_back():
    rows = [{"n": 1, "start": 1_000_000_005, "end": 1_003_000_017, "fp": 1_000_400_009, "bp": 1_002_500_003}]
    table = contract.step_trace_table(rows)
    assert table[0][3] == sum(table[0][6:9])
    per_step = contract.per_step_ms(table)
    assert per_step["step"] == [1] and per_step["total"] == [table[0][3] / contract.STEP_TRACE_UNITS_PER_MS]
    text = ",".join(contract.STEP_TRACE_HEADER) + "\n" + ",".join(map(str, table[0])) + "\n-," + ",".join(str(v) for v in table[0][1:]) + "\n"
    parsed = contract.read_step_trace(text.encode())
    assert parsed["steps"][0]["total"] == per_step["total"][0] and parsed["steps"][0]["fp_offset"] == pytest.approx(0.4)


def test_compare_reads_old_summaries_from_the_step_trace(tmp_path):
    """A baseline analysed before ``per_step_ms`` existed compares the same as one with it."""
    new = tmp_path / "new"
    table = contract.step_trace_table([{"n": n, "start": n * 10_000_000, "end": n * 10_000_000 + 9_000_000 + n * 10_000,
                                        "fp": n * 10_000_000 + 1_000_000, "bp": n * 10_000_000 + 8_000_000} for n in range(1, 21)])
    os.makedirs(new)
    summary = {"rank_id": 0, "steps_profiled": 20, "per_step_ms": contract.per_step_ms(table)}
    (new / contract.name(contract.SUMMARY, 0)).write_bytes(orjson.dumps(summary))
    (new / contract.name(contract.STEP_TRACE, 0)).write_text(
        "\n".join(",".join(map(str, row)) for row in [contract.STEP_TRACE_HEADER] + table + [["-"] + table[0][1:]]) + "\n")
    old = tmp_path / "old"
    shutil.copytree(new, old)
    del summary["per_step_ms"]
    (old / contract.name(contract.SUMMARY, 0)).write_bytes(orjson.dumps(summary))
    assert compare.load_run(str(old))["samples"]["step_time"].tolist() == compare.load_run(str(new))["samples"]["step_time"].tolist()
    assert compare.compare(str(old), str(new))["rows"][0]["change"] == 0


def test_cpu_samples_without_elapsed_time_are_dropped_and_means_are_time_weighted():
    """A last all-zero sample at the timestamp of the one before counts for nothing; uneven gaps weigh
    each sample by the time it covers, and the mean is the one every page shows."""
    from msprof_agent.analysis.cpu_util import measured

    samples = [{"ts": 1000, "idle": 30}, {"ts": 1100, "idle": 20}, {"ts": 1300, "idle": 40}, {"ts": 1301, "idle": 0}]
    kept = measured(samples)
    assert [s["ts"] for s in kept] == [1000, 1100, 1300]
    means = contract.cpu_means({"time_stamp": [s["ts"] for s in kept], "device_info": {"idle_utilization": [s["idle"] for s in kept]}})
    assert means["machine_busy_mean"] == pytest.approx(100 - (30 * 100 + 20 * 100 + 40 * 200) / 400)
    assert means["samples"] == 3


def test_warmup_is_the_leading_run_of_slow_steps_only():
    from msprof_agent.analysis import warmup

    assert [w["step"] for w in warmup.detect([1, 2, 3, 4, 5, 6], [700, 90, 12, 13, 12, 80])] == [1, 2]
    assert warmup.detect([1, 2, 3, 4, 5, 6], [12, 700, 12, 13, 12, 12]) == []  # a slow step later on is no warm-up
    assert warmup.detect([1, 2, 3], [700, 12, 12]) == []  # too few steps to tell
    assert warmup.detect([1, 2, 3, 4], [1.2, 0.5, 0.5, 0.5]) == []  # under a millisecond beyond the steady time
