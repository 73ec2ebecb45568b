"""MindSpore in the analysis, the exports and the viewer."""
from ...contract.names import ASCEND_ANALYSIS_DB, ASCEND_DB_FRAMEWORK, ASCEND_SUFFIX
from ..profile import FrameworkProfile

PROFILE = FrameworkProfile(
    name="mindspore", version_key="ms_version", version_label="MindSpore version", fixed_mode=None,
    default_context_mode="graph", export_suffix=ASCEND_SUFFIX["mindspore"], component="MindSpore", db_framework=ASCEND_DB_FRAMEWORK["mindspore"],
    analysis_db=ASCEND_ANALYSIS_DB["mindspore"], call_matrix=True, api_tables=False, hta_trace=False, empty_pipeline_file=True, merges_subgraphs=True,
    workers_setting="num_parallel_workers",
    workers_are_children=False,
    advice={
        "data_wait": "raise num_parallel_workers of {op} from {workers} to {needed}: a batch takes ~{batch} to make and a step "
                     "consumes one every {consume} (prefetch_size {prefetch_size}); or convert the source to MindRecord",
        "data_wait_cores": "num_parallel_workers of {op} is {workers}; ~{needed} would keep up (a batch takes ~{batch} to make, a "
                           "step consumes one every {consume}), but this machine has {cpus} cores: make its per-sample work "
                           "cheaper, or convert the source to MindRecord",
        "data_wait_cores_raise": "raise num_parallel_workers of {op} from {workers} to {advised}, what the {cpus} cores allow; "
                                 "~{needed} would keep up (a batch takes ~{batch} to make, a step consumes one every {consume}): "
                                 "also make its per-sample work cheaper, or convert the source to MindRecord",
        "data_wait_unknown": "raise num_parallel_workers of the dataset's slow op (map / GeneratorDataset) and "
                             "prefetch_size (mindspore.dataset.config.set_prefetch_size); convert the source to MindRecord",
        "host_work": "move the Python work named in the evidence out of the step loop (or into the dataset "
                     "pipeline); use GRAPH mode (ms.jit) for the step; avoid .asnumpy() / printing every step",
        "host_work_compiled": "move the Python work named in the evidence out of the step loop (or into the dataset pipeline): "
                              "the step already runs as a GRAPH-mode graph, so this is Python outside it (callbacks, "
                              "the loop); avoid .asnumpy() / printing every step",
        "runtime_overhead": "the time between the compiled graph's ops is MindSpore's runtime launching them, not Python: "
                            "fewer, larger ops (a larger batch spreads the cost per op; jit_level is {jit_level}: O1 adds "
                            "graph kernel fusion); look for many small ops (casts, reshapes) in the op table",
        "hot_ops": "the ops in the evidence own the step: check their shapes and dtypes (float16 / "
                   "mixed precision: amp_level is {amp_level}), fuse small ops with graph kernel fusion",
        "memory_growth": "memory grows every step: keep no Tensors across steps (losses kept for logging: "
                         "keep float(loss)), clear lists and caches that grow in the loop",
    },
    hints={
        "queue_sizes": "set data_process: true to sample the dataset queue's size at each fetch.",
        "pipeline": "Set data_process: true in MS_PROFILER_OPTIONS to record the dataset pipeline's ops and queues.",
    },
)
