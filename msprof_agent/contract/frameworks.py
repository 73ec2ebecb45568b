"""What the analysis and the viewer do differently per framework, as one object per integration.

Readers look a run's profile up by the raw meta's ``framework`` (``profile_of``) instead of branching on
the name. The profiles live in the contract, below the analysis, the exports and the viewer, so none of
them imports ``msprof_agent.frameworks`` (the integrations that run in the training process); what
differs per framework in the exports' layouts is the exports' own table (``export.layouts``).
"""
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class FrameworkProfile:
    name: str  # the framework's import name, as the raw meta's "framework" holds it
    version_key: str  # the meta key of the framework's version
    version_label: str  # the run card's row for that version
    fixed_mode: str | None  # the run card's mode where the framework has one only (torch: eager); else the run's context_mode
    default_context_mode: str  # profiler_info's context_mode where the run recorded none
    graph_context_mode: str | None  # the context_mode whose step runs as one compiled graph (its gaps between ops are the runtime's)
    ranges_among_ops: bool  # its ops are ``namespace::op``; any other recorded name is a range (record_function), not an op
    compiled_region_prefixes: tuple[str, ...]  # the names of the ranges around a compiled graph's ops (torch.compile's)
    compiled_region: str  # those compiled parts, in words
    empty_pipeline_file: bool  # pipeline_profiling_{r}.json written without ops (MindInsight's CPU page needs it)
    merges_subgraphs: bool  # the timeline download offers merging subgraphs
    workers_setting: str  # the data loader's setting for its worker count, in the recorded data_settings (advice says from what to what)
    workers_are_children: bool  # its loader's workers are child processes (their CPU time is the job's descendants')
    advice: Mapping[str, str]  # the advisor's action per finding id, in this framework's words
    hints: Mapping[str, str]  # the viewer's sentence per absent section, where it differs by framework


MINDSPORE = FrameworkProfile(
    name="mindspore", version_key="ms_version", version_label="MindSpore version", fixed_mode=None,
    default_context_mode="graph", graph_context_mode="GRAPH", ranges_among_ops=False,
    compiled_region_prefixes=(), compiled_region="the GRAPH-mode graph",
    empty_pipeline_file=True, merges_subgraphs=True, workers_setting="num_parallel_workers", workers_are_children=False,
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

TORCH = FrameworkProfile(
    name="torch", version_key="torch_version", version_label="torch version", fixed_mode="eager",
    default_context_mode="pynative", graph_context_mode=None, ranges_among_ops=True,
    compiled_region_prefixes=("Torch-Compiled Region", "CompiledFunction"), compiled_region="the torch.compile regions",
    empty_pipeline_file=False, merges_subgraphs=False, workers_setting="num_workers", workers_are_children=True,
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


PROFILES = {profile.name: profile for profile in (MINDSPORE, TORCH)}


def profile_of(framework: str | None) -> FrameworkProfile | None:
    """The profile of the framework a raw meta names, None for a run no framework attached to."""
    return PROFILES.get(framework or "")
