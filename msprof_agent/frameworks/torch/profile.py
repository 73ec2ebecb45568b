"""PyTorch in the analysis, the exports and the viewer."""
from ...contract.names import ASCEND_ANALYSIS_DB, ASCEND_DB_FRAMEWORK, ASCEND_SUFFIX
from ..profile import FrameworkProfile

PROFILE = FrameworkProfile(
    name="torch", version_key="torch_version", version_label="torch version", fixed_mode="eager",
    default_context_mode="pynative", export_suffix=ASCEND_SUFFIX["torch"], component="PTA", db_framework=ASCEND_DB_FRAMEWORK["torch"],
    analysis_db=ASCEND_ANALYSIS_DB["torch"], call_matrix=False, api_tables=True, hta_trace=True, empty_pipeline_file=False, merges_subgraphs=False,
    workers_setting="num_workers",
    workers_are_children=True,
    advice={
        "data_wait": "raise the DataLoader's num_workers from {workers} to {needed}: a batch takes ~{batch} to make and a step "
                     "consumes one every {consume}, so ~{needed} workers keep up ({loading})",
        "data_wait_cores": "num_workers is {workers}; ~{needed} workers would keep up (a batch takes ~{batch} to make, a step "
                           "consumes one every {consume}), but this machine has {cpus} cores{others}, {free} free beside the training process, "
                           "and the loading keeps its workers' cores busy: make the per-sample work of __getitem__ / collate_fn "
                           "cheaper (precompute it, or move it to the device)",
        "data_wait_cores_raise": "raise the DataLoader's num_workers from {workers} to {advised}, what the {cpus} cores allow "
                                 "({loading}); ~{needed} would keep up (a batch takes ~{batch} to make, a step consumes one every "
                                 "{consume}): also make the per-sample work of __getitem__ / collate_fn cheaper (precompute it, "
                                 "or move it to the device)",
        "data_wait_persistent": "; persistent_workers=True keeps the workers between epochs",
        "data_wait_unknown": "give the DataLoader num_workers > 0 (with persistent_workers=True, prefetch_factor), "
                             "pin_memory=True for GPU training; move per-sample Python work out of __getitem__",
        "host_work": "move the Python work named in the evidence out of the training loop or forward (log every N steps, "
                     "avoid .item() / .cpu() each step); use torch.compile or CUDA graphs to cut per-op dispatch",
        "host_work_compiled": "move the Python work named in the evidence out of the training loop or forward (log every N steps, "
                              "avoid .item() / .cpu() each step): it runs outside the torch.compile regions",
        "runtime_overhead": "the time between the ops of the torch.compile regions is the runtime's cost per op, not Python: "
                            "fewer, larger ops (a larger batch; mode=\"max-autotune\" fuses more; mode=\"reduce-overhead\" "
                            "replays CUDA graphs on GPU)",
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
