"""CPU utilization of the machine, the process and the dataset pipeline ops (``minddata_cpu_utilization_{r}.json``).

Samples that cover less than ``MIN_SPAN_MS`` since the one before (a last sample taken as sampling
stopped, right after another) hold no measurement and are dropped; the means are
``contract.readers.cpu_means`` of the written file, as the report and viewer compute them.
"""
import os

import numpy as np

from ..contract.names import CPU_UTILIZATION
from ..contract.readers import cpu_means
from ..writers import write_json

MIN_SPAN_MS = 5


def measured(samples):
    """The samples that cover some time: their own ``span_ms`` where recorded, else the gap to the one before."""
    kept, last = [], None
    for sample in sorted(samples, key=lambda s: s["ts"]):
        span = sample.get("span_ms", None if last is None else sample["ts"] - last)
        if span is None or span >= MIN_SPAN_MS:
            kept.append(sample)
            last = sample["ts"]
    return kept


MACHINE_STATES = ("user", "sys", "nice", "iowait", "io", "steal", "idle")  # "io": stores from before the sampler's "iowait"


def whole_percents(sample):
    """SAMPLE with its machine states as whole percents that keep their sum (largest remainders rounded up), so
    that the written states add up to the written busy figure (100 - idle) as the sampled ones do."""
    states = [key for key in MACHINE_STATES if key in sample]
    exact = [float(sample[key]) for key in states]
    whole = [int(v) for v in exact]
    for i in sorted(range(len(exact)), key=lambda i: whole[i] - exact[i])[:int(round(sum(exact))) - sum(whole)]:
        whole[i] += 1
    return dict(sample, **dict(zip(states, whole)))


def write(data, ctx, pipeline=None):
    samples = [whole_percents(s) for s in data.cpu]  # already ``measured``
    if not samples:
        return None
    series = lambda key: [int(round(s.get(key, 0))) for s in samples]  # noqa: E731  (contract: integer percent)
    percent = lambda values: [int(round(v)) for v in values if v is not None]  # noqa: E731
    op_info = [{"op_id": op["op_id"], "metrics": {"user_utilization": percent(op["cpu_user"]), "sys_utilization": percent(op["cpu_sys"])}}
               for op in (pipeline or {}).get("op_cpu", [])]
    stamps = [s["ts"] for s in samples]
    utilization = {
        "cpu_processor_num": data.meta.get("cpus") or os.cpu_count() or 1,  # the profiled machine's (stores before "cpus": this one's)
        # the typical gap: the default interval adapts to the window's length (collectors.cpu)
        "sampling_interval": int(round(float(np.median(np.diff(stamps))))) if len(stamps) > 1 else ctx.sampling_interval_ms,
        "time_stamp": stamps,
        "device_info": {"user_utilization": series("user"), "sys_utilization": series("sys"),
                        "io_utilization": series("iowait" if "iowait" in samples[0] else "io"), "idle_utilization": series("idle"),
                        "context_switch_count": series("ctx"), "runnable_process": series("run"),
                        # the rest of "busy", where the sampler recorded them (stores before these states hold user, sys, io and idle)
                        **{f"{state}_utilization": series(state) for state in ("nice", "steal") if state in samples[0]}},
        "process_info": {"user_utilization": series("puser"), "sys_utilization": series("psys")},
        "op_info": op_info,
    }
    write_json(ctx.path(CPU_UTILIZATION), utilization, ctx.pretty)
    return cpu_means(utilization)
