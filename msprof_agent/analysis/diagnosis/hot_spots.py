"""The Python hot spots: where the sampled Python stacks spent the steady steps, by function and line."""
from __future__ import annotations

from typing import Any

import numpy as np

from .breakdown import Row


def _folded(frame: str) -> str:
    """"function (file:line)" -> "function (file)": a function's lines as one row."""
    return frame.rsplit(":", 1)[0] + ")" if frame.endswith(")") and ":" in frame else frame


def hot_spots(data: Any, steady: list[Row], limit: int = 20) -> list[Row]:
    """Python time sampled in the consecutive steps ``steady``, as py-spy shows it: "function (file:line)",
    the line the function was executing, by self (innermost frame) and total (anywhere on the stack) time; a
    sample lasts until the next one. A function sampled at several lines also has one row "function (file)"
    of those lines folded (``lines``: how many), after the rows of the lines."""
    if not data.stacks or not steady:
        return []
    records = sorted(data.stacks, key=lambda s: s["ts"])
    first, last = steady[0]["start"], steady[-1]["end"]
    steady_numbers = {r["n"] for r in steady}
    starts = np.array([s["start"] for s in data.window_steps], dtype=np.int64)
    numbers = [s["n"] for s in data.window_steps]
    own: dict[str, float] = {}
    total: dict[str, float] = {}
    lines: dict[str, set[str]] = {}
    for record, following in zip(records, records[1:]):
        begin, end = max(record["ts"], first), min(following["ts"], last)
        frames = record.get("frames") or []
        if end <= begin or not frames:
            continue
        index = int(np.searchsorted(starts, begin, side="right")) - 1
        if index < 0 or numbers[index] not in steady_numbers:
            continue
        span = (end - begin) / 1e6
        innermost = frames[-1]
        function = _folded(innermost)
        lines.setdefault(function, set()).add(innermost)
        for name in {innermost, function}:
            own[name] = own.get(name, 0.0) + span
        for name in set(frames) | {_folded(frame) for frame in frames}:
            total[name] = total.get(name, 0.0) + span
    at_lines = sorted(((name, ms) for name, ms in own.items() if name not in lines or name in lines[name]), key=lambda item: -item[1])
    folded = sorted(((name, ms) for name, ms in own.items() if name in lines and len(lines[name]) > 1), key=lambda item: -item[1])
    count = len(steady)
    ranked = at_lines[:limit] + folded[:limit]  # the lines first: the top hot spot names the line
    return [dict({"function": name, "self_ms": round(ms, 3), "total_ms": round(total[name], 3),
                  "self_ms_per_step": round(ms / count, 3), "steps": [steady[0]["n"], steady[-1]["n"]]},
                 **({"lines": len(lines[name])} if name in lines else {})) for name, ms in ranked]
