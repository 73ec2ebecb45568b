"""The step recorder in process, with explicit times: steps tile the time from the first sign of training."""
import pytest

from msprof_agent.collectors.steps import MAX_WAITS_KEPT, StepRecorder

pytestmark = pytest.mark.unit


class Seen:
    """What the recorder told its session."""

    def __init__(self):
        self.opened, self.closed = [], []

    def recorder(self):
        return StepRecorder(lambda n, start: self.opened.append((n, start)), self.closed.append)


def test_steps_tile_the_time_and_carry_their_marks():
    seen = Seen()
    steps = seen.recorder()
    steps.open(100)
    assert steps.open(150) is steps.current and seen.opened == [(1, 100)]  # idempotent: the first call starts training
    steps.data_wait(110, 130)
    steps.mark_fp(140)
    steps.mark_fp(145)  # the first forward marker counts
    steps.mark_bp(170)
    steps.mark_bp(180)  # the last backward marker counts
    first = steps.close(200, epoch=1)
    assert first == {"k": "step", "n": 1, "start": 100, "end": 200, "wait": 20, "waits": [(110, 130)], "fp": 140, "bp": 180, "epoch": 1}
    steps.mark_fp(230)  # opens step 2 where step 1 ended, not at the marker
    second = steps.close(300)
    assert (second["n"], second["start"], second["end"], second["fp"], second["bp"]) == (2, 200, 300, 230, None)
    assert seen.opened == [(1, 100), (2, 200)] and seen.closed == [first, second] and steps.completed == 2


def test_a_fetch_with_no_open_step_opens_one_where_it_began():
    seen = Seen()
    steps = seen.recorder()
    steps.data_wait(50, 80)
    assert seen.opened == [(1, 50)] and steps.current["wait"] == 30


def test_waits_are_summed_but_only_the_first_ones_kept():
    steps = Seen().recorder()
    for i in range(MAX_WAITS_KEPT + 5):
        steps.data_wait(10 * i, 10 * i + 3)
    step = steps.close(1000)
    assert step["wait"] == 3 * (MAX_WAITS_KEPT + 5) and len(step["waits"]) == MAX_WAITS_KEPT


def test_close_without_an_open_step_does_nothing():
    seen = Seen()
    steps = seen.recorder()
    assert steps.close(10) is None and seen.closed == [] and steps.completed == 0


def test_time_between_steps_spent_by_the_agent_belongs_to_no_step():
    steps = Seen().recorder()
    steps.open(0)
    steps.close(100)
    steps.start_next_at(160)  # a profiler hand-over from 100 to 160
    assert steps.open(170)["start"] == 160
    steps.start_next_at(500)  # a step is open: nothing to move
    assert steps.current["start"] == 160


def test_a_step_cut_short_is_dropped():
    seen = Seen()
    steps = seen.recorder()
    steps.open(0)
    steps.close(100)
    steps.open()
    steps.discard_open()
    assert steps.current is None and steps.completed == 1 and seen.closed[-1]["n"] == 1
    assert steps.open(500)["n"] == 2
