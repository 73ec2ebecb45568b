"""FLOPs per op and per step: the framework's own count where it gives one (torch ``with_flops``),
else an estimate from input shapes for matmul, convolution, bias-add, activations and reductions.

Shapes arrive as JSON text of the input shape list, e.g. ``[[32,1,32,32],[6,1,5,5]]``. Convolutions
are estimated for stride 1 and no padding: an honest order of magnitude, labelled as an estimate.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from ..contract import readers
from ..contract.names import FLOPS, FLOPS_SUMMARY
from ..contract.pages import File, Page
from ..writers import write_json, write_text
from . import warmup
from .device import MIN_UNPROFILED_STEPS, unprofiled_steps
from .device_peak import peak_gflops
from .operators import group_sum, profiled_op_mask, shapes_known
from .rundata import parents
from .stats import median

if TYPE_CHECKING:
    from ..records import Step
    from .run import Context
    from .rundata import RunData

CUBE = ("matmul", "conv", "addmm", "mm", "bmm", "linear", "dense", "batchmatmul")
ELEMENTWISE = ("biasadd", "relu", "add", "mul", "sigmoid", "tanh", "gelu", "softmax", "sub", "div")
REDUCTION = ("reduce", "sum", "mean", "max_pool", "maxpool", "avgpool", "avg_pool")
ATTENTION_CONVENTION = "attention counted as the full square (4*t*s*d forward, twice that backward); a causal mask halves its real work"


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape) if shape else 1


def estimate(op_type: str, shape_text: str | None) -> float:
    """FLOPs of one call, or nan when the shapes do not tell."""
    try:
        shapes: list[list[int]] | None = orjson.loads(shape_text) if shape_text else None
    except orjson.JSONDecodeError:
        return math.nan
    if not shapes or not isinstance(shapes, list) or not all(isinstance(s, list) for s in shapes):
        return math.nan
    kind = op_type.lower().replace("aten::", "").replace("_", "")
    first = shapes[0]
    if "attention" in kind and "evaluatefunction" not in kind:
        return _attention(shapes, "backward" in kind)
    if "conv" in kind and len(shapes) >= 2 and len(first) == 4 and len(shapes[1]) == 4:
        n, cin, h, w = first
        cout, _, kh, kw = shapes[1]
        return 2.0 * n * cout * max(h - kh + 1, 1) * max(w - kw + 1, 1) * cin * kh * kw
    if any(k in kind for k in ("matmul", "addmm", "bmm", "linear", "dense", "mm")) and len(shapes) >= 2:
        a, b = (shapes[1], shapes[2]) if kind == "addmm" and len(shapes) >= 3 else (shapes[0], shapes[1])
        if len(a) >= 2 and len(b) >= 2:
            k = a[-1]
            return 2.0 * _numel(a[:-1]) * k * (b[-1] if b[-2] == k else b[-2])
    if any(k in kind for k in ELEMENTWISE + REDUCTION):
        return float(_numel(first))
    return math.nan


def _attention(shapes: list[list[int]], backward: bool) -> float:
    """Scaled dot-product attention from q [..., t, d] and k [..., s, d]: the forward's two matmuls 4*t*s*d per batch and
    head, the backward's four twice that; the full square (``ATTENTION_CONVENTION``): a causal mask is not in the shapes."""
    q, k = (shapes[1], shapes[2]) if backward and len(shapes) >= 3 else (shapes[0], shapes[1]) if len(shapes) >= 2 else ([], [])
    if len(q) < 2 or len(k) < 2 or q[-1] != k[-1]:
        return math.nan
    forward = 4.0 * _numel(q[:-1]) * k[-2] * q[-1]
    return 2 * forward if backward else forward


def per_op_flops(data: RunData, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs of each profiled op (reported values first, estimates where missing) and whether it is cube work.

    Estimates are made once per distinct (type, shape) code pair: a training step repeats the same
    shapes every step.
    """
    ops = data.ops
    flops = ops["flops"][mask]  # a copy: a boolean index always makes one
    shape_values = ops.code_values["shape"]
    missing = np.isnan(flops) & shapes_known(data, mask)
    if missing.any():  # the type and shape codes of the missing ops alone: the analysis's timeline may be written beside this
        where = np.flatnonzero(mask)[missing]
        width = len(shape_values)
        pairs, inverse = np.unique(ops["type_id"][where] * width + ops["shape_id"][where], return_inverse=True)
        estimates = np.array([estimate(str(data.op_types[p // width]), shape_values[p % width]) for p in pairs.tolist()])
        flops[missing] = estimates[inverse.reshape(-1)]
    if data.meta.get("nested_ops"):  # an op and the op it calls (aten::linear -> aten::addmm) both report: the inner one counts
        full = np.full(len(ops["start"]), np.nan)
        full[mask] = flops
        flops[counted_inside(full, parents(ops))[mask]] = np.nan
    lowered = np.char.lower(data.op_types.astype(str))
    cube_type = np.zeros(len(lowered), dtype=bool)
    for word in CUBE:
        cube_type |= np.char.find(lowered, word) >= 0
    return flops, cube_type[data.ops["type_id"][mask]]


def counted_inside(flops: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Which ops have an op with FLOPs nested inside them (the ancestors of every op with a count): their own count
    is the same work again, so each multiply is counted once, at the innermost op that reports it."""
    marked = np.zeros(len(flops), dtype=bool)
    climbing = parent[np.flatnonzero(~np.isnan(flops))]
    climbing = climbing[climbing >= 0]
    while len(climbing):
        fresh = np.unique(climbing[~marked[climbing]])
        marked[fresh] = True
        climbing = parent[fresh]
        climbing = climbing[climbing >= 0]
    return marked


def write(data: RunData, ctx: Context) -> dict[str, Any] | None:
    if not data.op_count:
        return None
    mask = profiled_op_mask(data)
    counted = any(s is not None for s in data.ops.code_values["shape"]) or not np.isnan(data.ops["flops"]).all()  # else no op has any
    flops, cube = per_op_flops(data, mask) if counted else (np.empty(0), np.empty(0, dtype=bool))
    known = ~np.isnan(flops)
    if not known.any():
        ctx.notes.append("FLOPs: the device session reported no FLOP counts or input shapes, so none were computed")
        return None
    codes, durs = data.ops["name_id"][mask][known], data.ops["dur"][mask][known]
    values, is_cube = flops[known], cube[known]
    size = len(data.op_names)
    cube_sum = np.bincount(codes, weights=np.where(is_cube, values, 0.0), minlength=size)
    vector_sum = np.bincount(codes, weights=np.where(is_cube, 0.0, values), minlength=size)
    names = data.op_names
    lines = ["op_full_name, MFLOPs(10^6 cube), GFLOPS(10^9 cube), MFLOPs(10^6 vector), GFLOPS(10^9 vector)"]
    for code, count, dur in zip(*group_sum(codes, durs)):
        seconds = max(dur, 1) / 1e9
        cube_f, vec_f = cube_sum[code], vector_sum[code]
        lines.append(f"{names[code]}, {cube_f / count / 1e6:.6f}, {cube_f / seconds / 1e9:.6f}, {vec_f / count / 1e6:.6f}, {vec_f / seconds / 1e9:.6f}")
    write_text(ctx.path(FLOPS), lines)
    steps = warmup.steady(data.window_steps, ctx.warmup)
    unfilled = (getattr(data, "shapes", None) or {}).get("steps_not_filled")
    if unfilled:  # steps of profiler sessions without shapes that no sampled step matched: their FLOPs are unknown
        unknown = {n for first, last in unfilled for n in range(first, last + 1)}
        steps = [s for s in steps if s["n"] not in unknown] or steps
    figures = model_flops(data, steps, data.ops["step"][mask][known], values, durs)
    if any("attention" in str(t).lower() for t in data.op_types):
        figures["convention"] = ATTENTION_CONVENTION
    summary = {"FLOPs": figures["mflops_per_step"], "FLOPS": figures["gflops_per_s"],
               "FLOPS_Utilization": _six_figures(100.0 * figures["mfu"]["ratio"]) if figures["mfu"] else 0.0,
               "estimated": bool(np.isnan(data.ops["flops"][mask]).any())}
    write_json(ctx.path(FLOPS_SUMMARY), summary, ctx.pretty)
    return dict(figures, estimated=summary["estimated"])


def model_flops(data: RunData, steps: Sequence[Step], op_steps: np.ndarray, values: np.ndarray, durs: np.ndarray) -> dict[str, Any]:
    """The FLOPs figures, one definition wherever they are shown: over the steady ``steps`` (warm-up left
    out), model FLOPs per step, and total FLOPs over their total time (GFLOPS) against the device's peak
    (MFU), a ratio of totals, not a mean of per-step ratios. Without steps: over the ops' own time (``durs``, ns)."""
    numbers = [s["n"] for s in steps]
    in_steps = np.isin(op_steps, numbers) if steps else np.ones(len(values), dtype=bool)
    total_flops = float(values[in_steps].sum())
    on_device = {n: ns for record in data.device_steps for n, ns in record["steps"]}  # CUDA-event step times, where recorded
    timed_on_device = bool(steps) and all(n in on_device for n in numbers)
    if timed_on_device:
        seconds = sum(on_device[n] for n in numbers) / 1e9
    else:
        seconds = sum(s["end"] - s["start"] for s in steps) / 1e9 if steps else float(durs.sum()) / 1e9
    gflops_per_s = total_flops / 1e9 / max(seconds, 1e-9)
    peak, how = peak_gflops(data.meta.get("device_target", "CPU"), data.meta.get("device_name"), _matmul_dtype(data.meta))
    mfu: dict[str, Any] | None = None
    if peak and steps:
        clock = "their time on the device (CUDA events)" if timed_on_device else "their total time"
        mfu = {"ratio": _six_figures(gflops_per_s / peak), "peak_gflops": round(peak, 2), "peak_source": how,
               "steps": len(steps), "definition": f"model FLOPs of the steady steps / {clock} / peak"}
        outside = unprofiled_steps(on_device, {s["n"] for s in data.window_steps})
        if len(outside) >= MIN_UNPROFILED_STEPS:  # the same work a step: the job's own MFU, without the profiler's cost
            per_step = total_flops / len(steps)
            mfu["unprofiled"] = {"ratio": _six_figures(per_step / (median(outside) / 1e3) / 1e9 / peak), "steps": len(outside),
                                 "definition": "model FLOPs a step / the median CUDA-event time of the steps no profiler slowed / peak"}
    return {"mflops_per_step": round(total_flops / max(len(steps), 1) / 1e6, 6), "gflops_per_s": round(gflops_per_s, 6), "mfu": mfu}


def _six_figures(ratio: float) -> float:
    """A ratio or percentage to six significant figures: a tiny CPU job's MFU (0.0002) keeps its precision, as six decimals would not."""
    return float(f"{ratio:.6g}")


def _matmul_dtype(meta: dict[str, Any]) -> str | None:
    """The precision the matmuls ran in, from what the job did (torch on a GPU: autocast's dtype, else TF32 or FP32)."""
    settings = meta.get("gpu_settings")
    if not settings:
        return None
    return str(settings["autocast"]) if settings.get("autocast") else "tf32" if settings.get("tf32_matmul") else "float32"


PAGE = Page("flops", (File("flops", (FLOPS,), readers.read_flops), File("flops_summary", (FLOPS_SUMMARY,), readers.read_json)), write)
