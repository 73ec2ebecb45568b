"""``profiler_info_{r}.json``: how MindInsight finds ranks, plus what we collected and with which options."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..contract import readers
from ..contract.frameworks import MINDSPORE, profile_of
from ..contract.names import PROFILER_INFO
from ..contract.pages import File, Page
from ..contract.summary import NO_END_RECORD
from ..writers import write_json

if TYPE_CHECKING:
    from .run import Context
    from .rundata import RunData


def write(data: RunData, ctx: Context) -> dict[str, Any]:
    meta = data.meta
    options = meta.get("options") or {}
    profile = profile_of(meta.get("framework")) or MINDSPORE
    info = {
        "context_mode": meta.get("context_mode", profile.default_context_mode),
        "rank_id": ctx.rank, "ms_version": meta.get("ms_version", ""),
        "parallel_mode": meta.get("parallel_mode", "data_parallel" if meta.get("rank_size", 1) > 1 else "stand_alone"),
        "stage_num": meta.get("stage_num", 1), "rank_size": meta.get("rank_size", 1), "is_heterogeneous": False,
        "diff_time": 0, "framework": meta.get("framework"), "framework_version": meta.get(profile.version_key),
        "device_target": meta.get("device_target", "CPU"), "device_id": meta.get("device_id", 0), "pid": meta.get("pid"),
        "analyse_reason": (data.end or {}).get("reason", NO_END_RECORD),
        "profiler_parameters": options, "agent": "msprof-agent",
    }
    write_json(ctx.path(PROFILER_INFO), info, ctx.pretty)
    return info


PAGE = Page("info", (File("info", (PROFILER_INFO,), readers.read_json),))
