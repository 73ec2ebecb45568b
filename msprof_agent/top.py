"""``msprof-agent top DIR``: a running job in the terminal, every rank under DIR, updated in place each second.

It reads the ranks' live records (``live.py``) through the online rules' job view (``analysis/live.py``):
steps per second, the step time now and its trend, the slowest ranks and why, the findings, a hang. Curses
from the standard library draws it; ``--once`` prints one screen to stdout (no terminal needed). Ctrl-C or
``q`` leaves.
"""
from __future__ import annotations

import os
import textwrap
import time
from typing import Any

from .analysis import live as rules
from .analysis.diagnosis.words import ms_words
from .contract import live as contract

REFRESH_S = 1.0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _trend(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    arrow = "^" if ratio >= 1.1 else "v" if ratio <= 0.9 else "="
    return f"{arrow}x{ratio:.2f}"


def screen(path: str, view: dict[str, Any], width: int = 120) -> list[str]:
    """The lines top shows for VIEW (``analysis.live.job_view``) of the job under PATH."""
    clock = time.strftime("%H:%M:%S", time.localtime(view["now_ns"] / 1e9))
    ranks = view["ranks"]
    state = "HUNG" if view.get("hang") else view["state"].upper()
    lines = [f"msprof-agent top  {path}  {len(ranks)}/{view['rank_size']} ranks  {state}  {clock}",
             f"steps/s {view['steps_per_s']:.2f}   step now {_ms(view['step_ms_now'])} ms"
             + (f" (on the GPU {_ms(view['gpu_step_ms_now'])} ms)" if view.get("gpu_step_ms_now") is not None else "")
             + f"   trend {_trend(view['trend'])} (last {contract.RECENT_STEPS} steps against the {rules.TREND_STEPS} before)"]
    if not ranks:
        lines.append(f"waiting for a job's live records under {path} (a job profiling into it writes them from its first step)")
    if view["missing_ranks"]:
        lines.append(f"no live record yet from rank(s) {', '.join(map(str, view['missing_ranks'][:16]))}")
    hang = view.get("hang")
    if hang:
        lines.append("")
        lines += ["HANG " + line if i == 0 else line for i, line in enumerate(contract.hang_lines(hang))]
    capture = view.get("capture")
    if capture:
        lines.append(f"capture: steps {capture['steps'][0]}..{capture['steps'][1]} on every rank ({capture.get('by', '')}): {capture['state']}")
    lines += ["", f"{'rank':>5} {'host':<12} {'state':<8} {'steps':>7} {'step ms':>9} {'trend':>7} {'own ms':>8} {'wait ms':>8} "
                  f"{'coll ms':>8} {'steps/s':>8} {'idle s':>7}"]
    for v in ranks[:64]:
        mark = "*" if v["rank"] in view["slow_ranks"] else " "
        lines.append(f"{v['rank']:>4}{mark} {v['host'][:12]:<12} {v['state']:<8} {v['steps_done']:>7} {_ms(v['step_ms_now']):>9} "
                     f"{_trend(v['trend']):>7} {_ms(v['own_ms_now']):>8} {_ms(v['wait_ms_now']):>8} {_ms(v['comm_ms_now']):>8} "
                     f"{v['steps_per_s']:>8.2f} {_ms(v['idle_s']):>7}")
    if len(ranks) > 64:
        lines.append(f"  ... and {len(ranks) - 64} more ranks")
    lines += ["", "slowest ranks (own work: the step outside collectives):"]
    for s in view["slowest"]:
        lines.append(f"  rank {s['rank']}: {ms_words(s['own_ms_now'] or 0.0)} own work a step: {s['why']}")
    lines += ["", "findings:"]
    for f in view["findings"][:12] or []:
        who = f"rank {f['rank']}: " if f.get("rank") is not None else ""
        lines.append(f"  [{f['severity']}] {who}{f['text']}")
    if not view["findings"]:
        lines.append("  none")
    wrapped = []
    for line in lines:  # long lines (a hang, a finding) wrap, indented, rather than lose their end
        wrapped += textwrap.wrap(line, width, subsequent_indent="      ", drop_whitespace=False) if len(line) > width else [line]
    return wrapped


def _draw(stdscr: Any, path: str) -> None:
    import curses

    curses.curs_set(0)
    stdscr.timeout(int(REFRESH_S * 1000))
    while True:
        view = rules.job_view(contract.job_records(path), time.time_ns())
        height, width = stdscr.getmaxyx()
        stdscr.erase()
        for y, line in enumerate(screen(path, view, width - 1)[:height - 1]):
            stdscr.addstr(y, 0, line)
        stdscr.addstr(min(height - 1, 60), 0, "q or Ctrl-C: quit"[:width - 1])
        stdscr.refresh()
        if stdscr.getch() in (ord("q"), ord("Q")):
            return


def main(path: str, once: bool = False) -> int:
    if once:
        if not contract.job_records(path):
            print(f"msprof-agent top: no live record under {path} (raw/rank_*/live.json: a job profiling into it writes one from its first step)")
            return 2
        print("\n".join(screen(path, rules.job_view(contract.job_records(path), time.time_ns()), os.get_terminal_size(1).columns
                                if os.isatty(1) else 160)))
        return 0
    import curses

    for stale in ("COLUMNS", "LINES"):  # curses would take a size a parent process exported over the terminal's own
        os.environ.pop(stale, None)
    try:
        curses.wrapper(_draw, path)
    except KeyboardInterrupt:
        pass
    return 0
