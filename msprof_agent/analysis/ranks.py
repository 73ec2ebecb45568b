"""Rules over several ranks, read by the cluster roll-up and the viewer's cluster page alike."""
from collections.abc import Mapping
from typing import Any

SLOWEST_RANK_WHY = "largest step interval + forward/backward (its own work, before waiting for peers)"


def slowest_rank(stages: Mapping[Any, Mapping[str, Any]]) -> Any:
    """The rank with the most work of its own per step (interval + forward/backward, before the tail where it
    waits for its peers), or None unless two or more ranks have both. ``stages``: each rank's average stage
    times. Total step time cannot tell: synchronised ranks all wait for the slowest."""
    own = {rank: s["iteration_interval"] + s["fp_and_bp"] for rank, s in stages.items()
           if s.get("iteration_interval") is not None and s.get("fp_and_bp") is not None}
    return max(own, key=lambda rank: own[rank]) if len(own) > 1 else None
