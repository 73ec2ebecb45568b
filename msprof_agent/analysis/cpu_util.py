"""CPU utilization of the machine, the process and the dataset pipeline ops (``minddata_cpu_utilization_{r}.json``)."""
import os

from .. import contract
from ..writers import write_json


def write(data, ctx, pipeline=None):
    samples = data.cpu
    if not samples:
        return None
    series = lambda key: [int(round(s.get(key, 0))) for s in samples]  # noqa: E731  (contract: integer percent)
    percent = lambda values: [int(round(v)) for v in values if v is not None]  # noqa: E731
    op_info = [{"op_id": op["op_id"], "metrics": {"user_utilization": percent(op["cpu_user"]), "sys_utilization": percent(op["cpu_sys"])}}
               for op in (pipeline or {}).get("op_cpu", [])]
    write_json(ctx.path(contract.CPU_UTILIZATION), {
        "cpu_processor_num": data.meta.get("cpus") or os.cpu_count() or 1,  # the profiled machine's (stores before "cpus": this one's)
        "sampling_interval": ctx.sampling_interval_ms,
        "time_stamp": [s["ts"] for s in samples],
        "device_info": {"user_utilization": series("user"), "sys_utilization": series("sys"),
                        "io_utilization": series("io"), "idle_utilization": series("idle"),
                        "context_switch_count": series("ctx"), "runnable_process": series("run")},
        "process_info": {"user_utilization": series("puser"), "sys_utilization": series("psys")},
        "op_info": op_info,
    }, ctx.pretty)
    mean = lambda key: sum(s.get(key, 0) for s in samples) / len(samples)  # noqa: E731
    return {"machine_busy_mean": round(100 - mean("idle"), 2), "process_user_mean": round(mean("puser"), 2),
            "process_sys_mean": round(mean("psys"), 2), "samples": len(samples)}
