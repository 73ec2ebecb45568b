"""MindSpore in the analysis, the exports and the viewer."""
from ...contract.names import ASCEND_DB_FRAMEWORK, ASCEND_SUFFIX
from ..profile import FrameworkProfile

PROFILE = FrameworkProfile(
    name="mindspore", version_key="ms_version", version_label="MindSpore version", fixed_mode=None,
    default_context_mode="graph", export_suffix=ASCEND_SUFFIX["mindspore"], component="MindSpore", db_framework=ASCEND_DB_FRAMEWORK["mindspore"],
    api_tables=False, hta_trace=False, empty_pipeline_file=True, merges_subgraphs=True, profiler_bytes_per_event=0,
    advice={
        "data_wait": "raise num_parallel_workers of the dataset's slow op (map / GeneratorDataset) and "
                     "prefetch_size (mindspore.dataset.config.set_prefetch_size); convert the source to MindRecord",
        "host_work": "move the Python work named in the evidence out of the step loop (or into the dataset "
                     "pipeline); use GRAPH mode (ms.jit) for the step; avoid .asnumpy() / printing every step",
        "hot_ops": "the ops in the evidence own the step: check their shapes and dtypes (float16 / "
                   "mixed precision), fuse small ops with GRAPH mode and graph kernel fusion",
        "memory_growth": "memory grows every step: keep no Tensors across steps (losses kept for logging: "
                         "keep float(loss)), clear lists and caches that grow in the loop",
    },
    hints={
        "queue_sizes": "set data_process: true to sample the dataset queue's size at each fetch.",
        "pipeline": "Set data_process: true in MS_PROFILER_OPTIONS to record the dataset pipeline's ops and queues.",
    },
)
