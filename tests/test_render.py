"""The render layer without a server or a framework: templates, escaping, the JSON the pages embed, and the
report's skip where the viewer extra (jinja2, plotly) is missing, seen from a child python as the training
process would run the analysis."""
import json
import os
import subprocess

import pytest

from conftest import PY, ROOT
from test_viewer import EVIL, EVIL_SCRIPT, make_fixture

pytestmark = pytest.mark.unit


def test_every_template_compiles():
    from msprof_agent.viewer import documents

    env = documents.environment()
    names = env.list_templates()
    assert {"base.html", "macros.html", "run.html", "report.html", "index.html", "error.html"} <= set(names)
    for name in names:
        env.get_template(name)


def test_json_blob_cannot_close_its_script():
    from msprof_agent.viewer.documents import json_blob

    text = json_blob({"name": EVIL_SCRIPT + " & <!--", "nan": float("nan")})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"name": EVIL_SCRIPT + " & <!--", "nan": None}


def test_pages_print_hostile_names_as_text(tmp_path):
    from msprof_agent.viewer import documents, pages
    from msprof_agent.viewer import sections as data

    directory = make_fixture(str(tmp_path / "job" / "profiler"))
    run = data.scan(str(tmp_path))["job"]
    for page in pages.views():
        text = documents.run_page(run, 0, page, pages.load_page(run, 0, page))
        assert EVIL not in text and "<script>alert" not in text, page
    assert "&lt;img src=x onerror=alert(1)&gt;" in documents.run_page(run, 0, "operators", pages.load_page(run, 0, "operators"))
    text = documents.error_page(404, EVIL)
    assert EVIL not in text and "&lt;img" in text and "msprof-charts" not in text
    assert EVIL not in documents.index_page(directory + EVIL, data.scan(str(tmp_path)))


def test_a_long_table_shows_its_first_rows_and_says_so(monkeypatch):
    from msprof_agent.viewer import documents, render

    monkeypatch.setattr(render, "MAX_TABLE_ROWS", 2)
    rows = [{"name": f"op{i}", "ms": i / 3} for i in range(5)]
    table = render.table("t", (("name", "Name", "text"), ("ms", "Time", "num")), rows, ("name",))
    html = documents.environment().from_string('{% from "macros.html" import sortable_table %}{{ sortable_table(t) }}').render(t=table)
    assert html.count("<tr data-search=") == 2 and "Showing the first 2 of 5 rows" in html
    assert f'data-v="{1 / 3!r}">0.333</td>' in html


def test_an_op_type_has_one_share_of_all_op_time_in_pie_bar_and_table():
    """The pie's slices are the table's shares (the types beyond the top ones are one slice), not shares of the top."""
    from msprof_agent.viewer import render
    from msprof_agent.viewer.pages.operators import TYPE_COLUMNS

    types = [{"op_type": f"T{i}", "total_ms": 30.0 - i, "percent": (30.0 - i) / 465} for i in range(30)]
    page = render.Page()
    pie, bar = render.op_type_charts(page, "t-", types, limit=20)
    [slices], [bars] = page.charts[pie]["data"], page.charts[bar]["data"]
    first_row = render.table("t", TYPE_COLUMNS, types, ("op_type",))["rows"][0]
    assert slices["text"][0] == render.pct(types[0]["percent"]) == "6.5%" and ">6.5%</td>" in first_row
    assert slices["labels"][-1] == "10 other types" and sum(slices["values"]) == sum(t["total_ms"] for t in types)
    assert slices["textinfo"] == "text" and bars["text"][-1] == "6.5%"


def _raw_store(profiler_dir):
    """A small raw store as the hook writes it: five 8 ms steps with one op each."""
    from msprof_agent.records import FORMAT
    from msprof_agent.store import EventWriter

    writer = EventWriter(profiler_dir, 0, 0)
    writer.add({"k": "meta", "format": FORMAT, "framework": "torch"})
    ms = 1_000_000
    for n in range(1, 6):
        writer.add({"k": "step", "n": n, "start": n * 10 * ms, "end": (n * 10 + 8) * ms, "win": True})
    writer.add({"k": "ops", "source": "test", "device": "cpu", "start": [n * 10 * ms + ms for n in range(1, 6)], "dur": [5 * ms] * 5,
                "tid": [1] * 5, "name_codes": [0] * 5, "name_table": ["aten::mm"], "type_codes": [0] * 5, "type_table": ["aten::mm"]})
    writer.close()


ANALYSE = """
import json, sys
for name in sys.argv[2:]:
    sys.modules[name] = None  # what an import of a package that is not installed finds
from msprof_agent.pipeline import offline_analyse
offline_analyse(sys.argv[1])
offline_analyse(sys.argv[1])
print(json.dumps(sorted(m for m in ("http.server", "msprof_agent.viewer.server", "jinja2") if sys.modules.get(m) is not None)))
"""


@pytest.mark.parametrize("hidden", [["jinja2"], ["plotly"], []])
def test_analysis_skips_the_report_without_the_viewer_extra(tmp_path, hidden):
    """The analysis never loads the viewer's server; without jinja2 or plotly it writes every other file and says so once."""
    profiler_dir = str(tmp_path / "profiler")
    _raw_store(profiler_dir)
    proc = subprocess.run([PY, "-c", ANALYSE, str(tmp_path), *hidden], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "http.server" not in loaded and "msprof_agent.viewer.server" not in loaded
    files = os.listdir(profiler_dir)
    assert {"step_trace_raw_0_detail_time.csv", "cpu_op_type_info_0.csv", "summary_0.json"} <= set(files)
    notes = [line for line in proc.stderr.splitlines() if "report.html skipped" in line]
    if hidden:
        assert notes == [f"msprof-agent: report.html skipped: {hidden[0]} is not installed (pip install 'msprof-agent[viewer]')"], proc.stderr
        assert "report_0.html" not in files and "failed" not in proc.stderr
    else:
        assert not notes and "report_0.html" in files and loaded == ["jinja2"]


def test_table_rows_escape_their_cells_link_the_first_and_hide_past_the_page():
    """The rows render.table draws in Python: what a template prints for each cell (None as nothing, text
    escaped as markupsafe does, Markup as it is), the first column's link, and rows past a page hidden."""
    from markupsafe import Markup

    from msprof_agent.viewer import render

    rows = [{"name": "a<b>&'\"", "ms": 1.5}, {"name": None, "ms": None}, {"name": Markup("<i>m</i>"), "ms": 2}]
    table = render.table("t", (("name", "Name", "text"), ("ms", "Time", "num")), rows, ("name",),
                         href=lambda row: "/r?a=1&b=2" if row["ms"] else None, page_size=2)
    assert table["rows"] == [
        '<tr data-search="a&lt;b&gt;&amp;&#39;&#34;"><td data-col="name" data-v="a&lt;b&gt;&amp;&#39;&#34;"><a href="/r?a=1&amp;b=2">'
        'a&lt;b&gt;&amp;&#39;&#34;</a></td><td data-col="ms" data-v="1.5">1.500</td></tr>',
        '<tr data-search=""><td data-col="name" data-v=""></td><td data-col="ms" data-v="">—</td></tr>',
        '<tr data-search="&lt;i&gt;m&lt;/i&gt;" hidden><td data-col="name" data-v="<i>m</i>"><a href="/r?a=1&amp;b=2"><i>m</i></a></td>'
        '<td data-col="ms" data-v="2.0">2</td></tr>']
