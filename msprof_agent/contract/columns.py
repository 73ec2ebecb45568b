"""The analysed files' columns and units, shared by the analysis that writes them and the readers."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

STEP_TRACE_UNIT_NS = 10  # step trace times are in units of 10 ns
STEP_TRACE_UNITS_PER_MS = 1_000_000 // STEP_TRACE_UNIT_NS
STEP_TRACE_HEADER = ["step_num", "start_point", "end_point", "total", "fp_point", "bp_point", "iteration_interval", "fp_and_bp", "tail"]
STAGES = ("iteration_interval", "fp_and_bp", "tail")
AVERAGE_ROW = "-"  # step_num of the last row of the step trace and hccl files
CPU_OP_TYPE_HEADER = ["op_type", "type_occurrences", "execution_frequency(per-step)", "total_compute_time(ms)", "avg_time(ms)", "percent"]
CPU_OP_DETAIL_HEADER = ["op_side", "op_type", "op_name", "full_op_name", "op_occurrences", "op_total_time(ms)", "op_avg_time(ms)",
                        "total_proportion", "subgraph", "pid"]
CPU_OP_SHAPE_HEADER = ["op_type", "op_name", "input_shape", "op_occurrences", "self_time(ms)", "total_time(ms)"]
GPU_KERNEL_HEADER = ["kernel", "kind", "launched_by", "count", "total_time(ms)", "avg_time(us)", "proportion"]
# The device's idle time a step by cause (analysis/device.py says what each means), each cause's column in DEVICE_STEPS
DEVICE_IDLE_COLUMNS = {"host": "idle_host_launch(ms)", "sync": "idle_after_sync(ms)", "data": "idle_data(ms)", "queued": "idle_queued(ms)",
                       "agent": "idle_agent(ms)"}
IDLE_CAUSES = tuple(DEVICE_IDLE_COLUMNS)  # in DEVICE_STEPS's order
IDLE_WORDS = {"host": "waiting for the host to launch", "sync": "after a host sync", "data": "while the host fetched data",
              "queued": "between queued kernels", "agent": "in the agent's own pauses (profiler start-up, hand-overs)"}
DEVICE_STEP_HEADER = ["step_num", "step_time(ms)", "device_busy(ms)", "device_idle(ms)", *DEVICE_IDLE_COLUMNS.values(),
                      "device_activities", "launches", "syncs"]
GPU_OP_TYPE_HEADER = ["op_type", "type_occurrences", "total_time(us)", "proportion", "avg_time(us)"]
GPU_OP_DETAIL_HEADER = ["op_side", "op_type", "op_name", "op_full_name", "op_occurrences", "op_total_time(us)", "op_avg_time(us)",
                        "proportion", "cuda_activity_cost_time(us)", "cuda_activity_call_count"]
PIPELINE_HEADER = ["op_id", "op_type", "num_workers", "output_queue_size", "output_queue_average_size",
                   "output_queue_length", "output_queue_usage_rate", "sample_interval", "parent_id", "children_id"]
HCCL_HEADER = ["step_num", "communication_cost", "wait_cost", "link_info", "communication_operator_cost"]
NOT_MEASURED = ""  # a contract column the agent cannot fill (hccl wait_cost): empty, read back as None
CLUSTER_HEADER = ["rank_id", "step_time(ms)", "iteration_interval(ms)", "fp_and_bp(ms)", "tail(ms)", "communication(ms)"]
PYTHON_HOT_SPOTS_HEADER = ["first_step", "last_step", "function", "self_ms", "total_ms", "self_ms_per_step"]
# The states a machine's busy time (100 - idle) is made of, as ``minddata_cpu_utilization``'s device_info names them
# (nice and steal where the sampler recorded them); the kernel's irq and softirq time is the small rest.
CPU_BUSY_STATES = {"user_utilization": "user", "sys_utilization": "sys", "nice_utilization": "nice", "io_utilization": "iowait",
                   "steal_utilization": "steal"}
QUEUE_FETCH, QUEUE_SIZE = "0", "1"  # first field of a queue profiling line: a fetch's cost, or the queue's size
FETCH_GET, FETCH_TOTAL = 0, 2  # second field of a fetch line: the get alone, or the whole step


def step_trace_table(rows: Sequence[Mapping[str, int]]) -> list[list[int]]:
    """The step trace's per-step rows in 10 ns units from ns ``start``/``end``/``fp``/``bp``: the points
    are converted first, then differenced, so the stages add up to the total exactly."""
    unit = STEP_TRACE_UNIT_NS
    table = []
    for r in rows:
        start, end, fp, bp = r["start"] // unit, r["end"] // unit, r["fp"] // unit, r["bp"] // unit
        table.append([r["n"], start, end, end - start, fp, bp, fp - start, bp - fp, end - bp])
    return table


def per_step_ms(table: Sequence[Sequence[int]]) -> dict[str, list[float]]:
    """The summary's ``per_step_ms``: step numbers, and the total and stage times (ms) of the step trace rows."""
    columns = {"step": 0, "total": 3, "iteration_interval": 6, "fp_and_bp": 7, "tail": 8}
    return {key: [row[i] if key == "step" else row[i] / STEP_TRACE_UNITS_PER_MS for row in table] for key, i in columns.items()}
