"""Timeline: Trace Event JSON (``{cpu,gpu,ascend}_timeline_display_{r}.json``) that Perfetto opens.

Tracks: step trace (steps and their three stages), ops per thread, data waits, CPU counters and
communication calls. ``timeline_limit`` (MB) is honoured by dropping the shortest ops first, the
least useful detail, and the summary says how many went.
"""
import numpy as np
import orjson

from ..writers import write_bytes, write_json

STEP_PID, OPS_PID, DATA_PID, CPU_PID, COMM_PID, DEVICE_PID = 1, 2, 3, 4, 5, 6
TRACK_NAMES = {STEP_PID: "Step Trace", OPS_PID: "Host Ops", DATA_PID: "Data Wait", CPU_PID: "CPU Utilization",
               COMM_PID: "Communication", DEVICE_PID: "Device Kernels"}


def file_prefix(device_target):
    return {"Ascend": "ascend", "GPU": "gpu"}.get(device_target, "cpu")


def _us(ns):
    return ns / 1000.0


def _fixed_events(data, stages):
    events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}} for pid, name in TRACK_NAMES.items()]
    events += [{"ph": "M", "name": "thread_name", "pid": STEP_PID, "tid": 1, "args": {"name": "Steps"}},
               {"ph": "M", "name": "thread_name", "pid": STEP_PID, "tid": 2, "args": {"name": "Stages"}}]
    for row in stages:
        events.append({"ph": "X", "name": f"Step {row['n']}", "cat": "step", "pid": STEP_PID, "tid": 1,
                       "ts": _us(row["start"]), "dur": _us(row["total"]), "args": {"step": row["n"]}})
        for name, begin, length in (("Step Interval", row["start"], row["interval"]), ("Forward+Backward", row["fp"], row["fp_and_bp"]),
                                    ("Tail", row["bp"], row["tail"])):
            if length > 0:
                events.append({"ph": "X", "name": name, "cat": "stage", "pid": STEP_PID, "tid": 2, "ts": _us(begin),
                               "dur": _us(length), "args": {"step": row["n"]}})
    for step in data.window_steps:
        for begin, end in step.get("waits") or ():
            events.append({"ph": "X", "name": "data wait", "cat": "data", "pid": DATA_PID, "tid": 1, "ts": _us(begin),
                           "dur": _us(end - begin), "args": {"step": step["n"]}})
    for sample in data.cpu:
        events.append({"ph": "C", "name": "CPU %", "pid": CPU_PID, "tid": 0, "ts": sample["ts"] * 1000.0,
                       "args": {"machine busy": round(100 - sample.get("idle", 0), 1), "process": round(sample.get("puser", 0) + sample.get("psys", 0), 1)}})
    for call in data.comm:
        events.append({"ph": "X", "name": call.get("name", "comm"), "cat": "communication", "pid": COMM_PID, "tid": 1,
                       "ts": _us(call["start"]), "dur": _us(call["dur"]), "args": {"step": call.get("step"), "bytes": call.get("bytes")}})
    return events


def _op_selection(data, budget_bytes, fixed_bytes):
    """Indices of the ops kept under the size budget: longest first when it must cut."""
    count = data.op_count
    if not count:
        return np.arange(0), 0
    sample = min(count, 200)
    per_event = max(len(_op_events_json(data, np.arange(sample))) / sample, 1.0)
    room = int(max(budget_bytes - fixed_bytes, 0) / per_event)
    if room >= count:
        return np.arange(count), 0
    keep = np.sort(np.argpartition(-data.ops["dur"], room - 1)[:room]) if room > 0 else np.arange(0)
    return keep, count - room


def _op_events_json(data, index):
    """The ops as comma-joined Trace Event objects, built as text from cached per-op-kind prefixes.

    Millions of dicts for orjson would cost several times more, and names repeat every step. Times
    are exact microseconds with three decimals: a float would round epoch times.
    """
    if not len(index):
        return b""
    ops = data.ops
    dumps = orjson.dumps
    prefixes = {}
    parts = []
    columns = (ops["name_id"][index].tolist(), ops["type_id"][index].tolist(), (ops["device"][index] == "cuda").tolist(),
               ops["tid"][index].tolist(), ops["start"][index].tolist(), ops["dur"][index].tolist(),
               ops["step"][index].tolist(), ops["shape"][index].tolist())
    for name_id, type_id, cuda, tid, start, dur, step, shape in zip(*columns):
        key = (name_id, type_id, cuda, tid)
        prefix = prefixes.get(key)
        if prefix is None:
            kind = dumps(data.op_types[type_id]).decode()
            prefix = prefixes[key] = (f'{{"ph":"X","name":{dumps(data.op_names[name_id]).decode()},"cat":{kind},'
                                      f'"pid":{DEVICE_PID if cuda else OPS_PID},"tid":{dumps(tid if tid is not None else 0).decode()},"ts":',
                                      f',"type":{kind}')
        shape_text = "" if shape is None else f',"shape":{dumps(shape).decode()}'
        parts.append(f'{prefix[0]}{start // 1000}.{start % 1000:03d},"dur":{dur // 1000}.{dur % 1000:03d},'
                     f'"args":{{"step":{step}{prefix[1]}{shape_text}}}}}')
    return ",".join(parts).encode()


def write(data, ctx, stages):
    prefix = file_prefix(data.meta.get("device_target", "CPU"))
    limit_mb = (data.meta.get("options") or {}).get("timeline_limit") or 500
    fixed = _fixed_events(data, stages)
    fixed_bytes = len(orjson.dumps(fixed))
    keep, dropped = _op_selection(data, limit_mb * 1_000_000 * 0.98, fixed_bytes)
    op_text = _op_events_json(data, keep)
    name = f"{prefix}_timeline_display_{ctx.rank}.json"
    payload = orjson.dumps(fixed, option=orjson.OPT_INDENT_2 if ctx.pretty else 0)
    if op_text:
        payload = payload[:-1] + b"," + op_text + b"]"
    write_bytes(ctx.path(name), payload)
    threads = set(data.ops["tid"][keep].tolist()) if len(keep) else set()
    names = data.ops["name"][keep][:10000].tolist() if len(keep) else []
    dropped_text = None
    if dropped:
        shortest_kept = float(data.ops["dur"][keep].min()) / 1000.0 if len(keep) else 0.0
        dropped_text = (f"timeline_limit {limit_mb} MB: dropped the {dropped} shortest ops (all under {shortest_kept:.1f} us); "
                        "the op tables still count every op")
        ctx.notes.append(dropped_text)
    span = (stages[-1]["end"] - stages[0]["start"]) / 1e6 if stages else 0.0
    write_json(ctx.path(f"{prefix}_timeline_summary_{ctx.rank}.json"), {
        "total_time": round(span, 3), "num_of_streams": len(threads), "num_of_ops": len(keep),
        "op_exe_times": int(len(keep)), "max_scope_name_num": max((n.count("/") + 1 for n in names), default=0),
    }, ctx.pretty)
    return {"file": name, "events": len(fixed) + len(keep), "bytes": len(payload), "truncated": bool(dropped), "dropped": dropped_text}
