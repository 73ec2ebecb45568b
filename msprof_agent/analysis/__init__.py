"""Analysis: one rank's raw event store -> its pages (the MindInsight contract's files) and its summary.

``analyse_pages`` reads the store and writes every page into a ``Run`` (the timeline file on a thread of
its own, beside the other pages and the exports); ``summarise`` waits for it and writes the summary;
``cluster`` rolls the summaries of a job's ranks up. ``msprof_agent.pipeline`` runs them, with the exports
and the report, at exit or later (``msprof-agent analyse``); the raw store is never modified, so analysing
twice gives the same files. ``run`` holds the ``Context`` and ``Run`` every page types against, ``rank`` the
order the pages run in.

This module only re-exports: the names imported here are the analysis's public API, the exports read only these.
"""
from . import cluster, pages
from .communication import collectives as communication_groups
from .device import DeviceActivity
from .operators import counted_op_mask, device_tables
from .opevents import OpEvents
from .overlap import GROUP, Overlap, collectives
from .rank import analyse_pages, raw_runs, summarise
from .run import Context, Run
from .rundata import parents, started_ns
from .summary import print_table
from .timeline import DEVICE_PID, OPS_PID, fixed_events, step_events, time_base, write_trace

__all__ = ["DEVICE_PID", "GROUP", "OPS_PID", "Context", "DeviceActivity", "OpEvents", "Overlap", "Run", "analyse_pages", "cluster", "collectives", "pages",
           "communication_groups", "counted_op_mask", "device_tables", "fixed_events", "parents", "print_table", "raw_runs", "started_ns",
           "step_events", "summarise", "time_base", "write_trace"]
