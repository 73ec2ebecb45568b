"""CPU utilization of the machine, the process and the dataset pipeline ops (``minddata_cpu_utilization_{r}.json``).

Samples that cover less than ``MIN_SPAN_NS`` (a last sample taken as sampling stopped, right after
another) hold no measurement and are dropped; the means are
``contract.readers.cpu_means`` of the written file, as the report and viewer compute them.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..contract import readers
from ..contract.names import CPU_UTILIZATION
from ..contract.pages import File, Page
from ..contract.readers import cpu_means
from ..writers import write_json
from .stats import median

if TYPE_CHECKING:
    from ..records import Cpu
    from .run import Context
    from .rundata import RunData

MIN_SPAN_NS = 5_000_000


def measured(samples: Iterable[Cpu]) -> list[Cpu]:
    """The samples that cover some time (their ``span``), in time order."""
    return [sample for sample in sorted(samples, key=lambda s: s["ts"]) if sample["span"] >= MIN_SPAN_NS]


MACHINE_STATES = ("user", "sys", "nice", "iowait", "steal", "idle")  # records.Cpu's


def whole_percents(sample: Mapping[str, Any]) -> dict[str, Any]:
    """SAMPLE with its machine states as whole percents that keep their sum (largest remainders rounded up), so
    that the written states add up to the written busy figure (100 - idle) as the sampled ones do."""
    states = [key for key in MACHINE_STATES if key in sample]
    exact = [float(sample[key]) for key in states]
    whole = [int(v) for v in exact]
    for i in sorted(range(len(exact)), key=lambda i: whole[i] - exact[i])[:int(round(sum(exact))) - sum(whole)]:
        whole[i] += 1
    return dict(sample, **dict(zip(states, whole)))


def write(data: RunData, ctx: Context, data_prep: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The CPU file, with the dataset pipeline ops' CPU where the data preparation page (``data_prep``, its result) found them."""
    pipeline = (data_prep or {}).get("pipeline")
    samples = [whole_percents(s) for s in data.cpu]  # already ``measured``
    if not samples:
        return None
    series = lambda key: [int(round(s.get(key, 0))) for s in samples]  # noqa: E731  (contract: integer percent)
    percent = lambda values: [int(round(v)) for v in values if v is not None]  # noqa: E731
    op_info = [{"op_id": op["op_id"], "metrics": {"user_utilization": percent(op["cpu_user"]), "sys_utilization": percent(op["cpu_sys"])}}
               for op in (pipeline or {}).get("op_cpu", [])]
    stamps = [s["ts"] // 1_000_000 for s in samples]  # ms, as MindInsight reads them
    utilization = {
        "cpu_processor_num": data.meta.get("cpus") or 1,  # the profiled machine's
        # the typical gap: the default interval adapts to the window's length (collectors.cpu)
        "sampling_interval": int(round(median(np.diff(stamps)))) if len(stamps) > 1 else ctx.sampling_interval_ms,
        "time_stamp": stamps,
        "device_info": {"user_utilization": series("user"), "sys_utilization": series("sys"),
                        "io_utilization": series("iowait"), "idle_utilization": series("idle"),
                        "context_switch_count": series("ctx"), "runnable_process": series("run"),
                        "nice_utilization": series("nice"), "steal_utilization": series("steal")},  # the rest of busy: ours
        "process_info": {"user_utilization": series("puser"), "sys_utilization": series("psys")},  # the job: its process tree
        "agent_info": {"utilization": series("agent")},  # the agent's own processes (background analysis), the job's neither
        "op_info": op_info,
    }
    write_json(ctx.path(CPU_UTILIZATION), utilization, ctx.pretty)
    return cpu_means(utilization)


PAGE = Page("cpu", (File("cpu", (CPU_UTILIZATION,), readers.read_cpu_utilization),), write, reads=("data_prep",), label="cpu_util")
