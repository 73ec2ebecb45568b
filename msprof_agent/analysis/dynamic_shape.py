"""``dynamic_shape_info_{r}.json``: per-step op-type times and shapes, written when shapes change between steps.

Works on the integer codes of names, types and shapes: millions of ops, a few hundred distinct values.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..contract.names import DYNAMIC_SHAPE
from ..contract.pages import File, Page
from ..writers import write_json
from .operators import profiled_op_mask, shapes_known

if TYPE_CHECKING:
    from .run import Context
    from .rundata import RunData


def write(data: RunData, ctx: Context) -> dict[str, int] | None:
    if not data.op_count:
        return None
    ops = data.ops
    mask = profiled_op_mask(data)
    shape_values = ops.code_values["shape"]
    shape_id = ops["shape_id"][mask]
    known = shapes_known(data, mask)
    if not known.any():
        return None
    name_id = ops["name_id"][mask]
    pairs = np.unique(name_id[known] * len(shape_values) + shape_id[known])  # distinct (name, shape)
    shapes_per_name = np.bincount(pairs // len(shape_values), minlength=len(data.op_names))
    changing_ids = np.flatnonzero(shapes_per_name > 1)
    if not len(changing_ids):
        return None
    steps, type_id = ops["step"][mask], ops["type_id"][mask]
    keys, inverse = np.unique(steps * len(data.op_types) + type_id, return_inverse=True)
    milliseconds = np.bincount(inverse.reshape(-1), weights=ops["dur"][mask]) / 1e6
    per_step: dict[str, dict[str, float]] = {}  # step -> op type -> ms
    for key, value in zip(keys.tolist(), milliseconds.tolist()):
        step, kind = divmod(key, len(data.op_types))
        per_step.setdefault(str(step), {})[data.op_types[kind]] = round(value, 6)
    op_shapes: dict[str, dict[str, Any]] = {}  # step -> op name -> its shape
    picked = known & np.isin(name_id, changing_ids)
    for step, name, shape in zip(steps[picked].tolist(), name_id[picked].tolist(), shape_id[picked].tolist()):
        op_shapes.setdefault(str(step), {})[data.op_names[name]] = shape_values[shape]
    changing = sorted(data.op_names[i] for i in changing_ids.tolist())
    write_json(ctx.path(DYNAMIC_SHAPE), {
        "op_type_time_ms_by_step": per_step, "ops_with_changing_shapes": changing, "shapes_by_step": op_shapes,
    }, ctx.pretty)
    return {"ops_with_changing_shapes": len(changing)}


PAGE = Page("dynamic_shape", (File("dynamic_shape", (DYNAMIC_SHAPE,)),), write)
