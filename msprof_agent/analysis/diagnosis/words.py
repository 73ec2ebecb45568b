"""The diagnosis's figures in words, one way for every reader: durations, step numbers and runs of them, a time at stake."""
from __future__ import annotations


def ranges(numbers: list[int]) -> list[list[int]]:
    """Step numbers as [first, last] runs."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return runs


def steps_words(numbers: list[int] | list[list[int]], limit: int = 8) -> str:
    """Step numbers (or [first, last] runs) as "step 4" / "steps 3, 5, 7-40", the first ``limit`` runs."""
    flat = sorted({n for item in numbers for n in (range(item[0], item[1] + 1) if isinstance(item, list) else [item])})
    runs = ranges(flat)
    words = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    more = f" and {len(runs) - limit} more runs" if len(runs) > limit else ""
    return ("step " if len(flat) == 1 else "steps ") + ", ".join(words) + more


def ms_words(ms: float) -> str:
    """A duration in words with its unit: "850 us", "41.2 ms", "1.73 s"."""
    if abs(ms) < 1:
        return f"{ms * 1000:.0f} us"
    return f"{ms:.1f} ms" if abs(ms) < 1000 else f"{ms / 1000:.2f} s"


def stake_words(ms: float) -> str:
    """A finding's time at stake as every reader prints it (exit table, report, viewer): the steady steps' mean."""
    return f"mean {ms:.1f} ms/step"
