"""Every file and folder name the agent writes or reads, and where each lies.

Per-rank names are templates with a ``{rank}`` field (``rank_file(SUMMARY, 0)`` is ``summary_0.json``).
The layouts are MindInsight's (``docs/ARCHITECTURE.md``); ``summary_{rank}.json`` and
``report_{rank}.html`` and ``cluster_report.html`` are ours. Standard library only: the agent imports this in the training process.
"""
from __future__ import annotations

import glob
import os
import re

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# -- folders -------------------------------------------------------------------------------------

RUN_FOLDER = "profiler"  # output_path/profiler: the run's raw store and analysed files
WINDOW_FOLDER = "window_{start}_{stop}"  # output_path/window_{start}_{stop}/profiler: a dynamic or capture window
RAW_FOLDER = "raw"  # profiler/raw/rank_{rank}/{pid}.jsonl: the raw store
RAW_RANK_FOLDER = "rank_{rank}"
RAW_FILE = "{pid}.jsonl"
RAW_FILE_GLOB = "*.jsonl"
NATIVE_SCRATCH = "native_{pid}"  # MindSpore's own profiler's output during a window, inside the raw rank folder
JOB_RANK_FOLDER_GLOB = "rank_*"  # a multi-card job's output: job/rank_{n}/profiler
JOB_RANK_FOLDER_RE = re.compile(r"^rank_?\d+$")
STEP_LIST_FOLDER = "steps_{first}-{last}"  # ``msprof-agent analyse --step-list``'s output beside the run
DYNAMIC_CONFIG = "profiler_config.json"  # MSPROF_DYNAMIC_CFG / DynamicProfilerMonitor's file in cfg_path
CPU_PEAK_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "msprof-agent", "cpu_peak.json")
WRITE_PROBE = ".write-test-{pid}"  # the writable-output check's probe file
LIVE_RECORD = "live.json"  # raw/rank_{rank}/live.json: the rank's live state while the job runs (live.py), rewritten about once a second
LIVE_CAPTURE = "live_capture.json"  # the job's all-rank capture request, where its ranks' summaries meet (cluster_dir)
EARLIER_FOLDER = "earlier"  # output_path/earlier/{analysed at}/profiler: an earlier run a rerun into output_path kept
EARLIER_STAMP = "%Y%m%dT%H%M%SZ"  # the earlier run's folder: when it was analysed, UTC (time.strftime)
MOVING_LOCK = ".msprof-agent-moving"  # beside profiler/ while one process of a job moves the earlier run aside

# -- analysed files ------------------------------------------------------------------------------

PROFILER_INFO = "profiler_info_{rank}.json"
SUMMARY = "summary_{rank}.json"
REPORT = "report_{rank}.html"
REPORT_PLOTLY = "plotly.min.js"  # beside report_{rank}.html and cluster_report.html, which load it: one copy a folder, not one inlined in each
STEP_TRACE = "step_trace_raw_{rank}_detail_time.csv"
STEP_POINTS = "step_trace_point_info_{rank}.json"
CPU_OP_TYPES = "cpu_op_type_info_{rank}.csv"
CPU_OP_DETAIL = "cpu_op_detail_info_{rank}.csv"
CPU_OP_SHAPES = "cpu_op_shape_info_{rank}.csv"  # ours: host ops by op and input shape, self and total time
GPU_OP_TYPES = "gpu_op_type_info_{rank}.csv"
GPU_OP_DETAIL = "gpu_op_detail_info_{rank}.csv"
GPU_KERNELS = "gpu_kernels_{rank}.csv"  # device activities by name and launching op (analysis/device.py)
DEVICE_STEPS = "device_steps_{rank}.csv"  # per step: the device's busy time and its idle time by cause
FLOPS = "flops_{rank}.txt"
FLOPS_SUMMARY = "flops_summary_{rank}.json"
ITERATOR_QUEUE = "dataset_iterator_profiling_{rank}.txt"  # non-sink runs
DEVICE_QUEUE = "device_queue_profiling_{rank}.txt"  # sink runs
# ours: the same fetch lines where the run sampled no queue sizes (no data_process): MindInsight reads a queue
# file with no size lines as zero batches (its tuning proposal divides by them), and no queue file as no queue data
DATA_WAITS = "data_wait_profiling_{rank}.txt"
QUEUE_FILES = (ITERATOR_QUEUE, DEVICE_QUEUE, DATA_WAITS)  # the order readers look
PIPELINE_RAW = "minddata_pipeline_raw_{rank}.csv"
PIPELINE_PROFILING = "pipeline_profiling_{rank}.json"
CPU_UTILIZATION = "minddata_cpu_utilization_{rank}.json"
MEMORY_SUMMARY = "memory_usage_summary_{rank}.json"
MEMORY_DETAILS = "memory_usage_details_{rank}.json"
DYNAMIC_SHAPE = "dynamic_shape_info_{rank}.json"
HCCL = "hccl_raw_{rank}.csv"
HOST_DISK = "host_disk_usage_{rank}.json"
HOST_NETWORK = "host_network_usage_{rank}.json"
MSTX_RANGES = "mstx_ranges_{rank}.json"
TIMELINE_DISPLAY = "{device}_timeline_display_{rank}.json"
TIMELINE_SUMMARY = "{device}_timeline_summary_{rank}.json"
TIMELINE_DEVICES = ("cpu", "ascend", "gpu")  # the {device} of the timeline names, in the order readers look
PYTHON_HOT_SPOTS = "python_hot_spots_{rank}.csv"  # with_stack / profile_framework: sampled Python time per function
# MindInsight 2.3.1's dashboard of a host-only run asks for the gpu summary (its API knows only gpu and ascend):
# a cpu run's timeline summary is written under this {device} too.
MINDINSIGHT_HOST_TIMELINE = "gpu"
CLUSTER_SUMMARY = "cluster_summary.json"
CLUSTER_REPORT = "cluster_report.html"  # the job's Cluster page, beside CLUSTER_SUMMARY: the one place the ranks are compared
CLUSTER_ANALYSE = "cpu_cluster_analyse_model-data_parallel_1_{ranks}_0.csv"
MERGED_TIMELINE = "timeline_{kind}_{ranks}{merged}.json"  # the viewer's download of several ranks' timelines
MERGED_SUFFIX = "_merged"

# -- exports (beside profiler/) ------------------------------------------------------------------

ASCEND_FOLDER = "{host}_{pid}_{started_ms}_{suffix}"  # the Ascend layout's root, per run
ASCEND_SUFFIX = {"torch": "ascend_pt", "mindspore": "ascend_ms"}
ASCEND_FOLDER_RE = re.compile(r"^.+_\d+_\d+_(" + "|".join(ASCEND_SUFFIX.values()) + ")$")  # an export, not a run, to the runs index
ASCEND_OUTPUT = "ASCEND_PROFILER_OUTPUT"
ASCEND_INFO = PROFILER_INFO
ASCEND_METADATA = "profiler_metadata.json"
ASCEND_STEP_TRACE = "step_trace_time.csv"
ASCEND_TRACE_VIEW = "trace_view.json"
ASCEND_COMMUNICATION = "communication.json"
ASCEND_COMMUNICATION_MATRIX = "communication_matrix.json"
ASCEND_OP_STATISTIC = "op_statistic.csv"
ASCEND_MEMORY_RECORD = "memory_record.csv"
ASCEND_DB = "ascend_{framework}_profiler_{rank}.db"
ASCEND_DB_FRAMEWORK = {"torch": "pytorch", "mindspore": "mindspore"}
# the communication analysis database msprof-analyze's cluster run reads per framework (PyTorch's also its step table)
ASCEND_ANALYSIS_DB = {"torch": "analysis.db", "mindspore": "communication_analyzer.db"}
# its communication tables (per call, per call's transfer, per link), which msprof-analyze's cluster run reads
ASCEND_COMM_TIME_TABLE = "CommAnalyzerTime"
ASCEND_COMM_BANDWIDTH_TABLE = "CommAnalyzerBandwidth"
ASCEND_COMM_MATRIX_TABLE = "CommAnalyzerMatrix"
HTA_FOLDER = "hta_trace"  # PyTorch-style traces only: HTA reads every JSON there
HTA_TRACE = "{host}_{pid}.rank{rank}.pt.trace.json"

# -- MindSpore's own profiler's files (read back from its scratch folder) -------------------------

MS_OP_EXECUTIONS = "cpu_op_execute_timestamp_*.txt"
MS_FRAMEWORK = "cpu_framework_*.txt"
MS_MEMORY_RECORD = "cpu_ms_memory_record_*.txt"
MS_ITERATOR_QUEUE = "dataset_iterator_profiling_*.txt"
MS_DEVICE_QUEUE = "device_queue_profiling_*.txt"
MS_PIPELINE = "pipeline_profiling_*.json"
MS_CPU_UTILIZATION = "minddata_cpu_utilization_*.json"


def rank_file(template: str, rank: int | str, **fields: Any) -> str:
    """The file name of ``template`` for one rank (``fields``: the template's other fields, e.g. ``device``)."""
    return template.format(rank=rank, **fields)


def window_name(start: int, stop: int) -> str:
    """The folder name of the window of steps START..STOP (both inclusive)."""
    return WINDOW_FOLDER.format(start=start, stop=stop)


class RunFolders:
    """A run's folders, derived once where the run is placed and passed down: ``folder`` (the output path, a window's
    folder, a job's rank folder), which holds ``profiler`` (the raw store and analysed files) and the exports."""

    __slots__ = ("folder", "profiler")

    def __init__(self, folder: str, profiler: str) -> None:
        self.folder, self.profiler = folder, profiler

    def __repr__(self) -> str:
        return f"RunFolders({self.folder!r}, {self.profiler!r})"


def run_folders(output_path: str) -> RunFolders:
    """``output_path`` and ``output_path/profiler``: the folders of a run placed in ``output_path``."""
    return RunFolders(output_path, os.path.join(output_path, RUN_FOLDER))


def run_dir(output_path: str) -> str:
    """``output_path/profiler``: the run's profiler directory."""
    return run_folders(output_path).profiler


def named_profiler_dir(profiler_dir: str) -> RunFolders:
    """The folders of a profiler directory named by itself (a path a user, a background analysis or a test gives),
    the folder it lies in: the one place a run's folder is found from its profiler directory."""
    return RunFolders(os.path.dirname(os.path.abspath(profiler_dir)), profiler_dir)


def timeline_device(device_target: str) -> str:
    """The ``{device}`` of the timeline names for a framework's device target."""
    return {"Ascend": "ascend", "GPU": "gpu"}.get(device_target, "cpu")


def timeline_file(profiler_dir: str, rank: int | str) -> str | None:
    """Name of the rank's Trace Event file (cpu/ascend/gpu variant), or None."""
    for device in TIMELINE_DEVICES:
        candidate = rank_file(TIMELINE_DISPLAY, rank, device=device)
        if os.path.isfile(os.path.join(profiler_dir, candidate)):
            return candidate
    return None


def timeline_summaries() -> tuple[str, ...]:
    """The timeline summary's templates, one per ``{device}``, in the order readers look."""
    return tuple(TIMELINE_SUMMARY.replace("{device}", device) for device in TIMELINE_DEVICES)


def queue_file(profiler_dir: str, rank: int | str) -> str | None:
    """The rank's queue profiling file (iterator or device queue, or the waits alone), or None."""
    for template in QUEUE_FILES:
        candidate = rank_file(template, rank)
        if os.path.isfile(os.path.join(profiler_dir, candidate)):
            return candidate
    return None


def profiler_dirs(path: str, holds: Callable[[str], Any]) -> list[str]:
    """The profiler directories under PATH: PATH itself, PATH/profiler or PATH/rank_*/profiler (multi-card),
    those for which ``holds(directory)`` is true (raw data for the analysis, a summary for compare)."""
    return [folders.profiler for folders in runs_under(path, holds)]


def runs_under(path: str, holds: Callable[[str], Any]) -> list[RunFolders]:
    """The folders of ``profiler_dirs``' runs under PATH."""
    path = os.path.abspath(path)
    job_ranks = sorted((run_folders(folder) for folder in glob.glob(os.path.join(path, JOB_RANK_FOLDER_GLOB))), key=lambda f: f.profiler)
    return [f for f in [named_profiler_dir(path), run_folders(path)] + job_ranks if holds(f.profiler)]


def is_rank_layout(profiler_dir: str) -> bool:
    """Whether the directory is one rank's ``job/rank_N/profiler`` (each rank of a job its own output path)."""
    profiler_dir = os.path.abspath(profiler_dir)
    return os.path.basename(profiler_dir) == RUN_FOLDER and JOB_RANK_FOLDER_RE.match(os.path.basename(os.path.dirname(profiler_dir))) is not None


def cluster_dir(profiler_dir: str) -> str:
    """Where the job's ``CLUSTER_SUMMARY`` and ``CLUSTER_REPORT`` go: the profiler directory its ranks share, or for the
    ``job/rank_N/profiler`` layout the job directory above them (one place either way)."""
    profiler_dir = os.path.abspath(profiler_dir)
    return os.path.dirname(os.path.dirname(profiler_dir)) if is_rank_layout(profiler_dir) else profiler_dir


def job_dirs(profiler_dir: str) -> list[str]:
    """The profiler directories of the job ``profiler_dir`` belongs to: itself, or every ``rank_N/profiler`` beside it."""
    if not is_rank_layout(profiler_dir):
        return [os.path.abspath(profiler_dir)]
    return _rank_layout_dirs(cluster_dir(profiler_dir))


def cluster_member_dirs(cluster: str) -> list[str]:
    """The profiler directories whose job's roll-up lies in ``cluster`` (a ``cluster_dir``): itself where its ranks
    share it, else the ``rank_N/profiler`` under it."""
    cluster = os.path.abspath(cluster)
    return [cluster] if summary_ranks(cluster) else _rank_layout_dirs(cluster) or [cluster]


def cluster_report_href(profiler_dir: str) -> str:
    """The link from a rank's report in ``profiler_dir`` to its job's ``CLUSTER_REPORT``, relative (the job may move)."""
    profiler_dir = os.path.abspath(profiler_dir)
    return _href(os.path.join(cluster_dir(profiler_dir), CLUSTER_REPORT), profiler_dir)


def rank_report_href(cluster: str, profiler_dir: str, rank: int) -> str:
    """The link from the job's ``CLUSTER_REPORT`` in ``cluster`` to one rank's ``REPORT``, relative."""
    return _href(os.path.join(os.path.abspath(profiler_dir), rank_file(REPORT, rank)), os.path.abspath(cluster))


def _href(path: str, start: str) -> str:
    return os.path.relpath(path, start).replace(os.sep, "/")


def _rank_layout_dirs(job: str) -> list[str]:
    return sorted(os.path.join(job, d, RUN_FOLDER) for d in _entries(job)
                  if JOB_RANK_FOLDER_RE.match(d) and os.path.isdir(os.path.join(job, d, RUN_FOLDER)))


def rank_pattern(template: str) -> re.Pattern[str]:
    """A regular expression matching the template's file names, the rank as its group 1."""
    return re.compile("^" + re.escape(template).replace(re.escape("{rank}"), r"(\d+)") + "$")


_SUMMARY_RE = rank_pattern(SUMMARY)


def earlier_runs(output_path: str) -> list[str]:
    """The earlier runs a rerun kept (``output_path/earlier/*``, each holding a ``profiler``), oldest first."""
    earlier = os.path.join(output_path, EARLIER_FOLDER)
    return sorted(os.path.join(earlier, d) for d in _entries(earlier) if os.path.isdir(os.path.join(earlier, d, RUN_FOLDER)))


def summary_ranks(profiler_dir: str) -> list[int]:
    """Ranks with a ``summary_{rank}.json`` in the directory, in rank order."""
    return sorted(int(m.group(1)) for m in map(_SUMMARY_RE.match, _entries(profiler_dir)) if m)


def live_records(path: str) -> list[str]:
    """Every rank's ``LIVE_RECORD`` of the job(s) under PATH (an output path, a profiler directory or a job of ``rank_N`` folders)."""
    found = []
    for profiler_dir in profiler_dirs(path, lambda d: os.path.isdir(os.path.join(d, RAW_FOLDER))):
        found += glob.glob(os.path.join(profiler_dir, RAW_FOLDER, RAW_RANK_FOLDER.format(rank="*"), LIVE_RECORD))
    return sorted(found)


def live_capture_file(profiler_dir: str) -> str:
    """The job's ``LIVE_CAPTURE`` request: one file every rank of the job reads, beside its cluster summary."""
    return os.path.join(cluster_dir(profiler_dir), LIVE_CAPTURE)


def _entries(directory: str) -> list[str]:
    return os.listdir(directory) if os.path.isdir(directory) else []
