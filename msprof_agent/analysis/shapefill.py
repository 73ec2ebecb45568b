"""Shapes and FLOPs for the ops of torch.profiler sessions that recorded none, from the sessions that did.

The torch device session records ``record_shapes`` / ``with_flops`` in a sample of its profiler
sessions (``frameworks/torch/device.py``: the first, a short one every ``SHAPES_EVERY``-th, and the
one after a session whose steps looked new); its ``buffer`` records say which, and the model's input
shapes where they changed. A step without shapes takes them, op by op, from a step with shapes whose
host ops have the same names in the same order and whose model inputs had the same shapes: the op
at the same call position gets its shape and FLOPs. A step matching none keeps no shapes, and the
summary says how many (``shapes`` in the summary).
"""
from __future__ import annotations

import bisect
from typing import Any

import numpy as np

FILL_RULE = ("steps of sessions without shapes take each op's shape and FLOPs from the op at the same call position "
             "in a step with shapes whose host ops have the same names in the same order and whose model inputs had the same shapes")


def fill(data: Any) -> dict[str, Any] | None:
    """Fill the ops' ``shape_id`` and ``flops`` columns of steps without shapes in place; what was done, for
    the summary (None where every session recorded shapes, or none did: nothing to say)."""
    sessions = [b for b in data.buffers if "record_shapes" in b]
    sampled = [b for b in sessions if b["record_shapes"]]
    if not data.op_count or not sampled or len(sampled) == len(sessions):
        return None
    ops = data.ops
    steps = ops["step"]
    host = np.flatnonzero(~ops.on_device & (steps > 0))
    if not len(host):
        return None
    shape_values = ops.code_values["shape"]
    known_code = np.array([s is not None for s in shape_values], dtype=bool)
    host_steps = steps[host]
    bounds = np.flatnonzero(np.diff(host_steps)) + 1
    firsts, lasts = np.append(0, bounds), np.append(bounds, len(host))
    inputs = _inputs_by_step(sessions)
    names, shape_id = ops["name_id"][host], ops["shape_id"][host]
    known = known_code[shape_id]
    references: dict[tuple[bytes, str | None], int] = {}  # signature -> first index of a step with shapes
    missing: list[tuple[int, int, int, tuple[bytes, str | None]]] = []
    for first, last in zip(firsts.tolist(), lasts.tolist()):
        step = int(host_steps[first])
        signature = (names[first:last].tobytes(), inputs(step))
        if known[first:last].all():
            references.setdefault(signature, first)
        elif not known[first:last].any():
            missing.append((step, first, last, signature))
    filled_steps, unfilled = 0, []
    new_shapes, flops = np.array(ops["shape_id"]), np.array(ops["flops"])  # writable: either may be a broadcast view
    for step, first, last, signature in missing:
        source = references.get(signature)
        if source is None:
            unfilled.append(step)
            continue
        into, came = host[first:last], host[source:source + last - first]
        new_shapes[into] = new_shapes[came]
        flops[into] = flops[came]
        filled_steps += 1
    ops["shape_id"], ops["flops"] = new_shapes, flops
    ops.pop("shape", None)  # a cached object column of the old codes
    return {"sessions": len(sessions), "sessions_with_shapes": [_session_words(b) for b in sampled],
            "steps_filled": filled_steps, "steps_not_filled": _ranges(unfilled), "rule": FILL_RULE}


def _inputs_by_step(sessions: list[dict[str, Any]]) -> Any:
    """A function: step number -> the shapes of the model's inputs in that step (None where unrecorded)."""
    changes = sorted((int(step), text) for b in sessions for step, text in b.get("inputs") or ())
    at = [step for step, _ in changes]

    def inputs(step: int) -> str | None:
        i = bisect.bisect_right(at, step) - 1
        return changes[i][1] if i >= 0 else None
    return inputs


def _session_words(buffer: dict[str, Any]) -> dict[str, Any]:
    first = buffer.get("first_step")
    steps = buffer.get("steps")
    return {"steps": [first, first + steps - 1] if first is not None and steps else None, "events": buffer["events"],
            "because": buffer.get("shapes_because")}


def _ranges(numbers: list[int]) -> list[list[int]]:
    """[[first, last], ...] runs of consecutive step numbers."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and runs[-1][1] + 1 == n:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return runs
