"""The output contract's rules and readers on small hand-made inputs (no framework, no subprocess), and the
check that no module outside it spells a file name."""
import ast
import os
import re
import shutil

import orjson
import pytest

from msprof_agent import compare
from msprof_agent.analysis.ranks import slowest_rank
from msprof_agent.contract import names
from msprof_agent.contract.columns import STEP_TRACE_HEADER, STEP_TRACE_UNITS_PER_MS, per_step_ms, step_trace_table
from msprof_agent.contract.names import STEP_TRACE, SUMMARY, rank_file
from msprof_agent.contract.readers import cpu_means, pipeline_bottlenecks, read_step_trace

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
    assert [m["op_id"] for m in pipeline_bottlenecks(_ops(*usages))] == marked


def test_slowest_rank_needs_two_ranks_with_stages():
    stages = {0: {"iteration_interval": 1.0, "fp_and_bp": 5.0}, 1: {"iteration_interval": 2.0, "fp_and_bp": 6.0}}
    assert slowest_rank(stages) == 1
    assert slowest_rank({0: stages[0], 1: {"iteration_interval": None, "fp_and_bp": 9.0}}) is None


def test_step_trace_table_adds_up_and_reads_back():
    rows = [{"n": 1, "start": 1_000_000_005, "end": 1_003_000_017, "fp": 1_000_400_009, "bp": 1_002_500_003}]
    table = step_trace_table(rows)
    assert table[0][3] == sum(table[0][6:9])
    per_step = per_step_ms(table)
    assert per_step["step"] == [1] and per_step["total"] == [table[0][3] / STEP_TRACE_UNITS_PER_MS]
    text = ",".join(STEP_TRACE_HEADER) + "\n" + ",".join(map(str, table[0])) + "\n-," + ",".join(str(v) for v in table[0][1:]) + "\n"
    parsed = read_step_trace(text.encode())
    assert parsed["steps"][0]["total"] == per_step["total"][0] and parsed["steps"][0]["fp_offset"] == pytest.approx(0.4)


def test_compare_reads_old_summaries_from_the_step_trace(tmp_path):
    """A baseline analysed before ``per_step_ms`` existed compares the same as one with it."""
    new = tmp_path / "new"
    table = step_trace_table([{"n": n, "start": n * 10_000_000, "end": n * 10_000_000 + 9_000_000 + n * 10_000,
                                        "fp": n * 10_000_000 + 1_000_000, "bp": n * 10_000_000 + 8_000_000} for n in range(1, 21)])
    os.makedirs(new)
    summary = {"rank_id": 0, "steps_profiled": 20, "per_step_ms": per_step_ms(table)}
    (new / rank_file(SUMMARY, 0)).write_bytes(orjson.dumps(summary))
    (new / rank_file(STEP_TRACE, 0)).write_text(
        "\n".join(",".join(map(str, row)) for row in [STEP_TRACE_HEADER] + table + [["-"] + table[0][1:]]) + "\n")
    old = tmp_path / "old"
    shutil.copytree(new, old)
    del summary["per_step_ms"]
    (old / rank_file(SUMMARY, 0)).write_bytes(orjson.dumps(summary))
    assert compare.load_run(str(old))["samples"]["step_time"].tolist() == compare.load_run(str(new))["samples"]["step_time"].tolist()
    assert compare.compare(str(old), str(new))["rows"][0]["change"] == 0


def test_cpu_samples_without_elapsed_time_are_dropped_and_means_are_time_weighted():
    """A last all-zero sample covering a millisecond counts for nothing; uneven gaps weigh
    each sample by the time it covers, and the mean is the one every page shows."""
    from msprof_agent.analysis.cpu_util import measured

    ms = 1_000_000
    samples = [{"ts": t * ms, "span": span * ms, "idle": idle} for t, span, idle in ((1000, 100, 30), (1100, 100, 20), (1300, 200, 40), (1301, 1, 0))]
    kept = measured(samples)
    assert [s["ts"] // ms for s in kept] == [1000, 1100, 1300]
    means = cpu_means({"time_stamp": [s["ts"] // ms for s in kept], "device_info": {"idle_utilization": [s["idle"] for s in kept]}})
    assert means["machine_busy_mean"] == pytest.approx(100 - (30 * 100 + 20 * 100 + 40 * 200) / 400)
    assert means["samples"] == 3


def test_warmup_is_the_leading_run_of_slow_steps_only():
    from msprof_agent.analysis import warmup

    assert [w["step"] for w in warmup.detect([1, 2, 3, 4, 5, 6], [700, 90, 12, 13, 12, 80])] == [1, 2]
    assert warmup.detect([1, 2, 3, 4, 5, 6], [12, 700, 12, 13, 12, 12]) == []  # a slow step later on is no warm-up
    assert warmup.detect([1, 2, 3], [700, 12, 12]) == []  # too few steps to tell
    assert warmup.detect([1, 2, 3, 4], [1.2, 0.5, 0.5, 0.5]) == []  # under a millisecond beyond the steady time


# -- every output file and folder name is spelled in msprof_agent/contract/ only ---------------------

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "msprof_agent")
FILE_NAME = re.compile(r"^[\w.{}*\-]*\.(csv|json|txt|html|db|jsonl)$")  # a name or a glob, no spaces, no path
FOLDER_PREFIX = re.compile(r"^window_|^rank_(\{|\*|$)|_?ascend_(ms|pt)$")
FOLDERS = {names.RUN_FOLDER, names.RAW_FOLDER, names.HTA_FOLDER, names.ASCEND_OUTPUT}
PACKAGE_FILES = ("render", "static_text")  # calls naming the viewer's templates and static files, shipped in the package
# (file, literal): a word that is a folder's name elsewhere, used here as a value
NOT_NAMES = {("records.py", "profiler")}  # COMM_FROM_PROFILER: a comm record seen in the profiler's events


def _text(node):
    """A string constant's value, or an f-string's literal parts with ``{}`` for each field."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    return None


def _exempt(tree):
    """Docstrings, the f-strings' inner parts and the package-file arguments: not output names."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and ast.get_docstring(node) is not None:
            skip.add(id(node.body[0].value))
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(part) for part in node.values)
        elif isinstance(node, ast.Call) and node.args and getattr(node.func, "id", getattr(node.func, "attr", None)) in PACKAGE_FILES:
            skip.update(id(n) for n in ast.walk(node.args[0]))
    return skip


def name_literals(source, where=""):
    """(line, text) of each string literal in SOURCE that names an output file or folder."""
    tree = ast.parse(source)
    skip = _exempt(tree)
    found = []
    for node in ast.walk(tree):
        text = _text(node)
        if text is None or id(node) in skip or (where, text) in NOT_NAMES:
            continue
        if FILE_NAME.match(text) or text in FOLDERS or FOLDER_PREFIX.search(text):
            found.append((node.lineno, node.col_offset, text))
    return [(line, text) for line, _, text in sorted(found)]


def test_no_file_name_outside_the_contract():
    spelled = []
    for directory, _, files in os.walk(PACKAGE):
        for file in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(directory, file)
            where = os.path.relpath(path, PACKAGE)
            if where.startswith("contract" + os.sep):
                continue
            with open(path, encoding="utf-8") as handle:
                spelled += [f"{where}:{line}: {text!r}" for line, text in name_literals(handle.read(), where)]
    assert not spelled, "file or folder names outside msprof_agent/contract/ (define them in contract/names.py):\n" + "\n".join(spelled)


def test_the_name_check_catches_names_and_nothing_else():
    caught = '''
info = os.path.join(root, f"profiler_info_{rank}.json")
run = os.path.join(output_path, "profiler")
found = glob.glob(os.path.join(directory, "summary_*.json"))
raw = os.path.join(profiler_dir, "raw", f"rank_{rank}")
DISK_PAGE = "host_disk_usage_{rank}.json"
suffix = "ascend_pt" if torch else "ascend_ms"
window = f"window_{start}_{stop}"
db = f"ascend_{framework}_profiler_{rank}.db"
'''
    assert [text for _, text in name_literals(caught)] == [
        "profiler_info_{}.json", "profiler", "summary_*.json", "raw", "rank_{}", "host_disk_usage_{rank}.json",
        "ascend_pt", "ascend_ms", "window_{}_{}", "ascend_{}_profiler_{}.db"]
    innocent = '''
"""Writes ``summary_{rank}.json`` into ``output_path/profiler``."""
row = {"rank_id": 0, "rank_size": 2, "total_ms": 1.0, "source": "torch"}
raise ValueError(f"no raw data under {path} (looked for profiler/raw/rank_*/)")
log.report_error("writing report.html", exc)
page = render("run.html", run=run)
css = static_text("viewer.css")
'''
    assert name_literals(innocent) == []


def test_every_export_type_has_its_exports_in_the_registry():
    from msprof_agent.export.registry import EXPORTS
    from msprof_agent.options import EXPORT_TYPES

    assert tuple(EXPORTS) == EXPORT_TYPES
    assert all(callable(e.target) and callable(e.write) and e.NAME for exports in EXPORTS.values() for e in exports)
