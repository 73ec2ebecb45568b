"""``dynamic_shape_info_{r}.json``: per-step op-type times and shapes, written when shapes change between steps."""
import numpy as np

from ..writers import write_json
from .operators import profiled_op_mask


def write(data, ctx):
    if not data.op_count:
        return None
    mask = profiled_op_mask(data)
    shapes = data.ops["shape"][mask]
    known = np.array([s is not None for s in shapes], dtype=bool)
    if not known.any():
        return None
    names, steps = data.ops["name"][mask][known], data.ops["step"][mask][known]
    shapes_by_name = {}
    for name, shape in zip(names.tolist(), shapes[known].tolist()):
        shapes_by_name.setdefault(name, set()).add(shape)
    changing = sorted(n for n, s in shapes_by_name.items() if len(s) > 1)
    if not changing:
        return None
    types, durs, all_steps = data.ops["type"][mask], data.ops["dur"][mask], data.ops["step"][mask]
    per_step = {}
    for step, kind, dur in zip(all_steps.tolist(), types.tolist(), durs.tolist()):
        entry = per_step.setdefault(step, {})
        entry[kind] = entry.get(kind, 0.0) + dur / 1e6
    changing_set = set(changing)
    op_shapes = {}
    for step, name, shape in zip(steps.tolist(), names.tolist(), shapes[known].tolist()):
        if name in changing_set:
            op_shapes.setdefault(str(step), {})[name] = shape
    write_json(ctx.path(f"dynamic_shape_info_{ctx.rank}.json"), {
        "op_type_time_ms_by_step": {str(k): {t: round(v, 6) for t, v in per_step[k].items()} for k in sorted(per_step)},
        "ops_with_changing_shapes": changing, "shapes_by_step": op_shapes,
    }, ctx.pretty)
    return {"ops_with_changing_shapes": len(changing)}
