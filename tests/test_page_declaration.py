"""A page is one declaration: a page registered from outside the package, with no edit to it, is written by the
analysis of a raw store, read back by its reader and shown by the viewer (its own page, the runs' page bar and
report.html)."""
import csv
import io
import urllib.parse

import pytest
from test_pages import MS, STEP_OPS, step_record, write_store

from msprof_agent import analysis
from msprof_agent.contract.pages import File, Page
from msprof_agent.pipeline import analyse_rank
from msprof_agent.viewer import pages, sections
from msprof_agent.viewer.views import View
from msprof_agent.writers import write_csv
from test_viewer import served

pytestmark = pytest.mark.unit

STEP_GAPS = "step_gaps_{rank}.csv"  # the page's file: each profiled step's time from the one before it
COLUMNS = ("step_num", "gap(ms)")


def write_gaps(data, ctx):
    """The page's write, as a page module's: the window's steps from the raw store into its file."""
    steps = [s for s in data.steps if s.get("win")]
    rows = [[step["n"], (step["start"] - before["start"]) / MS] for before, step in zip(steps, steps[1:])]
    write_csv(ctx.path(STEP_GAPS), list(COLUMNS), rows)
    return {"rows": len(rows)}


def read_gaps(raw):
    """The page's reader: the file's bytes -> one dict per step."""
    rows = list(csv.reader(io.StringIO(raw.decode())))
    if rows[0] != list(COLUMNS):
        raise ValueError(f"step gaps: header {rows[0]}")
    return [{"step": int(step), "gap_ms": float(gap)} for step, gap in rows[1:]]


def gaps_view(page, run, rank, sections):
    return {"gaps": sections["step_gaps"]}


@pytest.fixture
def declared_page(tmp_path):
    """The page, registered for one test: its analysis page and its view, its template beside the test's files."""
    template = tmp_path / "step_gaps.html"
    template.write_text('<div class="card" id="gaps">{% if gaps is ok %}{% for row in gaps.data %}'
                        '<p class="gap">step {{ row.step }}: {{ row.gap_ms | fmt(1) }} ms</p>{% endfor %}'
                        '{% else %}<p class="missing">{{ gaps.status }}</p>{% endif %}</div>')
    page = analysis.pages.register(Page("step_gaps", (File("step_gaps", (STEP_GAPS,), read_gaps, COLUMNS),), write_gaps))
    view = pages.register(View("step_gaps", "Step gaps", ("step_gaps",), gaps_view, template=str(template)))
    try:
        yield page, view
    finally:
        analysis.pages.unregister("step_gaps")
        pages.unregister("step_gaps")


def test_a_page_registered_in_one_declaration_is_written_read_and_shown(tmp_path, declared_page):
    profiler_dir = tmp_path / "job" / "profiler"
    steps = [step_record(n) for n in range(1, 5)]
    steps[3] = dict(steps[3], start=steps[3]["start"] + 5 * MS, end=steps[3]["end"] + 5 * MS)  # step 4 starts 5 ms late
    write_store(str(profiler_dir), steps, [(name, kind, s["start"] + at * MS, dur * MS) for s in steps for name, kind, at, dur in STEP_OPS])
    summary = analyse_rank(str(profiler_dir), 0)
    assert not [note for note in summary["notes"] if "step_gaps" in note]

    with open(profiler_dir / "step_gaps_0.csv", encoding="utf-8") as handle:
        assert handle.read().splitlines() == ["step_num,gap(ms)", "2,10.0", "3,10.0", "4,15.0"]
    section = sections.load_section(str(profiler_dir), 0, "step_gaps")  # its reader, through its declaration
    assert section["status"] == "ok" and section["data"] == [{"step": 2, "gap_ms": 10.0}, {"step": 3, "gap_ms": 10.0}, {"step": 4, "gap_ms": 15.0}]

    with open(profiler_dir / "report_0.html", encoding="utf-8") as handle:
        report = handle.read()
    assert '<a href="#step_gaps">Step gaps</a>' in report and '<p class="gap">step 4: 15.0 ms</p>' in report
    with served(tmp_path) as live:
        status, _, body = live.get("/run/step_gaps?" + urllib.parse.urlencode({"run": "job", "rank": 0}))
        assert status == 200
        text = body
        assert "<h1>Step gaps</h1>" in text and '<p class="gap">step 2: 10.0 ms</p>' in text
        status, _, body = live.get("/run/overview?" + urllib.parse.urlencode({"run": "job", "rank": 0}))
        assert status == 200 and 'data-page="step_gaps">Step gaps</a>' in body  # the page bar links it


def test_an_unregistered_page_is_neither_written_nor_shown(tmp_path):
    profiler_dir = tmp_path / "job" / "profiler"
    steps = [step_record(n) for n in range(1, 4)]
    write_store(str(profiler_dir), steps, [(name, kind, s["start"] + at * MS, dur * MS) for s in steps for name, kind, at, dur in STEP_OPS])
    analyse_rank(str(profiler_dir), 0)
    assert not (profiler_dir / "step_gaps_0.csv").exists()
    assert "step_gaps" not in pages.views() and "step_gaps" not in analysis.pages.files()
    with served(tmp_path) as live:
        assert live.get("/run/step_gaps?" + urllib.parse.urlencode({"run": "job", "rank": 0}))[0] == 404


def test_a_page_cannot_take_a_name_or_section_another_declares():
    with pytest.raises(ValueError, match="'operators': its name is taken"):
        analysis.pages.register(Page("operators"))
    with pytest.raises(ValueError, match="section 'op_types' is taken"):
        analysis.pages.register(Page("my_ops", (File("op_types", ("my_ops_{rank}.csv",)),)))
    with pytest.raises(ValueError, match="'overview' is taken"):
        pages.register(View("overview", "Mine", (), gaps_view))
