"""Every environment variable the agent reads or sets, by name (the doors in sitecustomize_hook/ and
setup.py's .pth spell OPTIONS themselves: they run before this package may be imported)."""

OPTIONS = "MS_PROFILER_OPTIONS"  # the options' JSON object: the zero-code door
DYNAMIC_CFG = "MSPROF_DYNAMIC_CFG"  # the dynamic monitor's folder (profiler_config.json), zero-code
DEBUG = "MSPROF_AGENT_DEBUG"  # agent errors with their traceback
HANG_AFTER_S = "MSPROF_AGENT_HANG_S"  # seconds with no rank finishing a step before the live record names a hang (0: off)
# Who this process is, as MindSpore's launchers (first) and torchrun set it.
RANK = ("RANK_ID", "RANK")
DEVICE = ("DEVICE_ID", "LOCAL_RANK")
WORLD_SIZE = ("RANK_SIZE", "WORLD_SIZE")
MS_ROLE = "MS_ROLE"  # msrun's role of a process: its scheduler (MS_SCHED) runs the script and steps nothing
FP_START = "PROFILING_FP_START"  # the op that starts forward propagation (MindSpore's variable)
BP_END = "PROFILING_BP_END"  # the op that ends backward propagation
# A process the agent starts for itself (a window's background analysis) runs without these: the hook stays off there.
AGENT_STARTS = (OPTIONS, DYNAMIC_CFG)
TORCH_SESSION_EVENTS = "MSPROF_TORCH_SESSION_EVENTS"  # a smaller torch.profiler session size, for tests of the hand-over
TORCH_SHAPES_EVERY = "MSPROF_TORCH_SHAPES_EVERY"  # shapes in every Nth torch.profiler session (1: all), for tests and benches
KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"  # set to quiet Kineto's start-up lines unless the user chose a level
TEARDOWN_CUPTI = "TEARDOWN_CUPTI"  # set to "1" around a GPU profiler session's start and stop: kineto then detaches CUPTI after it
GITHUB_STEP_SUMMARY = "GITHUB_STEP_SUMMARY"  # compare's Markdown table, under GitHub Actions
