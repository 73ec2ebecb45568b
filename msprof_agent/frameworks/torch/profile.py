"""PyTorch in the analysis, the exports and the viewer."""
from ...contract.names import ASCEND_DB_FRAMEWORK, ASCEND_SUFFIX
from ..profile import FrameworkProfile

PROFILE = FrameworkProfile(
    name="torch", version_key="torch_version", version_label="torch version", fixed_mode="eager",
    default_context_mode="pynative", export_suffix=ASCEND_SUFFIX["torch"], component="PTA", db_framework=ASCEND_DB_FRAMEWORK["torch"],
    api_tables=True, hta_trace=True, empty_pipeline_file=False, merges_subgraphs=False,
    profiler_bytes_per_event=5 * 1024,  # with shapes, as measured for the profiler hand-overs (device.SESSION_EVENTS)
    advice={
        "data_wait": "give the DataLoader num_workers > 0 (with persistent_workers=True, prefetch_factor), "
                     "pin_memory=True for GPU training; move per-sample Python work out of __getitem__",
        "host_work": "move the Python work named in the evidence out of the training loop or forward (log every N steps, "
                     "avoid .item() / .cpu() each step); use torch.compile or CUDA graphs to cut per-op dispatch",
        "hot_ops": "the ops in the evidence own the step: use bf16 / AMP autocast, channels_last for convolutions, "
                   "fuse small ops with torch.compile, check the shapes in the op table",
        "memory_growth": "memory grows every step: keep no tensors attached to the graph across steps "
                         "(store loss.item(), not loss), clear lists and caches that grow in the loop",
    },
    hints={
        "queue_sizes": "a PyTorch DataLoader has no queue to sample; the wait per step above is how long each batch took.",
        "pipeline": "The pipeline view is for mindspore.dataset pipelines; a PyTorch DataLoader has none (the wait for data per step is shown above).",
    },
)
