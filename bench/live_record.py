"""Cost of the live record (``msprof_agent/live.py``) per step, against a 10 ms step (target <= 1 %).

A real session (no framework: the step recorder driven directly) runs STEPS steps of ~10 ms of busy
Python each, its live thread writing ``raw/rank_0/live.json`` once a second with the online rules, as in
a training job. Two parts, both counted in CPU time, not wall time, so the shared machine's load does
not enter:

1. the training thread's part: ``LiveState.step_closed`` (one tuple appended), timed over 100 000 calls;
2. the writer thread's part: its CPU time per tick (``thread_time``: the heap sample, the kept steps as
   columns, the JSON, the atomic write; the first tick's imports apart, a one-off), spread over the
   steps of a second (100 at 10 ms). While it runs it holds the GIL, so this is also the most the
   training thread can wait for it.

Run: ``python bench/live_record.py`` (``--steps 1500`` by default, ~15 s). On 2026-12-04 (2 shared cores, loaded):
14.7 us a 10 ms step, 0.15 %: the writer thread 1.4 ms of CPU a tick (8 ms the first), ``step_closed`` 0.35 us.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from msprof_agent import session as S  # noqa: E402
from msprof_agent.options import parse_text  # noqa: E402

STEP_S = 0.010


def busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < until:
        x += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="live-bench-")
    session = S.start(parse_text(json.dumps({"start": True, "output_path": out, "capture": {"every": 10 ** 6}})), "env")
    session.run.claim()  # step timing only, as under a capture policy
    live = session.live
    assert live is not None
    ticks = []
    last = (0, 0)
    for _ in range(args.steps):
        session.steps.open()
        busy(STEP_S)
        session.steps.close()
        if live.ticks != last[0]:
            ticks.append(live.cost_ns - last[1])
            last = (live.ticks, live.cost_ns)
    live.finish("bench")
    steady = ticks[1:]
    per_tick = statistics.median(steady) / 1e3 if steady else float("nan")

    step = {"n": 1, "start": 0, "end": 1, "wait": 0, "fp": None, "bp": None}
    calls = 100_000
    began = time.thread_time_ns()
    for _ in range(calls):
        live.steps.append((step["n"], step["start"], step["end"], step["wait"], step["fp"], step["bp"], 0))
    append_us = (time.thread_time_ns() - began) / calls / 1e3
    began = time.thread_time_ns()
    for _ in range(calls):
        live.step_closed(step)
    closed_us = (time.thread_time_ns() - began) / calls / 1e3

    steps_per_tick = 1.0 / STEP_S
    per_step_us = closed_us + per_tick / steps_per_tick
    print(f"ticks {len(ticks)} over {args.steps} steps of {STEP_S * 1e3:g} ms; first tick (imports, once) {ticks[0] / 1e6 if ticks else 0:.1f} ms CPU")
    print(f"writer thread: {per_tick:.0f} us CPU a tick (median of {len(steady)}; p90 "
          f"{statistics.quantiles(steady, n=10)[-1] / 1e3 if len(steady) > 1 else per_tick:.0f} us), {per_tick / steps_per_tick:.2f} us a step")
    print(f"training thread: step_closed {closed_us:.2f} us a step (a bare deque append {append_us:.2f} us)")
    print(f"live record: {per_step_us:.2f} us a {STEP_S * 1e3:g} ms step = {per_step_us / (STEP_S * 1e6):.3%} (target <= 1 %)")


if __name__ == "__main__":
    main()
