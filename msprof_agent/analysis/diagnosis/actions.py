"""What to change for each finding, in the words of the framework in use (its profile's ``advice``) or in any framework's."""
from __future__ import annotations

from typing import Any

from ...contract.frameworks import TORCH, profile_of

# Actions in any framework's words; the framework-specific ones are its profile's advice (contract/frameworks.py).
ACTIONS = {
    "periodic_pause": "something runs every {period} steps (garbage collection, checkpointing, logging, evaluation): "
                      "make it rarer or asynchronous (gc.freeze() after setup, save checkpoints in a thread)",
    "warm_up": "one-off cost of compilation and first allocations; profile from a later step "
               "(start_step / schedule) so it does not skew the steady numbers",
    "host_work_unnamed": "the evidence names no Python work: profile again with \"with_stack\": true in MS_PROFILER_OPTIONS "
                         "(msprof-agent run -o with_stack=true) to have the functions and lines taking the time named, then ",
    "cpu_contention": "other processes keep the machine's CPUs busy while the training waits on the host: "
                      "run fewer jobs per machine, or pin the training to its own cores",
    "low_mfu": "the ops reach a small share of the device's peak: raise the batch size, use lower "
               "precision, or larger fused ops",
    "straggler": "rank {rank} is slower ({kind} time): give it the same data shard size and host work as the others, "
                 "check its machine for other load, or rebalance the work across ranks",
    "slow_node": "every rank on {host} is slower: check that machine (other jobs, CPU frequency, thermal limits, its "
                 "data source or disk), or move its ranks to another node",
    "hang": "find what rank(s) {ranks} did instead of entering the collective of step {step}: their last lines on stderr, an "
            "exception, a stuck data loader or a branch only they took; give the process group a timeout (init_process_group(timeout=...)) "
            "so the job fails fast",
    "communication": "communication takes much of the step: overlap it with compute (DDP bucket size, "
                     "gradient accumulation), or reduce what is exchanged (lower precision, fewer syncs)",
}


def action(finding_id: str, framework: str | None, **fields: Any) -> str:
    """The action for a finding in the words of the framework (a run naming none reads PyTorch's), else the generic one."""
    words = profile_of(framework) or TORCH
    return (words.advice.get(finding_id) or ACTIONS.get(finding_id, "")).format(**fields)
