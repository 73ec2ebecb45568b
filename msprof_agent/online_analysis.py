"""How a session analyses a collection it has finished inside the profiled process (at exit, on SIGTERM, at a
window's stop): the pipeline, imported only then. The doors that start a session (the bootstrap, the
``Profiler`` API, the dynamic monitor) hand it this, so the session, which runs from the job's start, never
imports the analysis; ``background_analysis`` is its twin in a process of its own."""
from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    from .contract.names import RunFolders
    from .contract.summary import Summary


def analyse(profiler_dir: str, rank: int, announce: bool, output: RunFolders) -> Summary:
    """One collection's raw store analysed into OUTPUT: its pages, exports, summary and report."""
    from .pipeline import analyse_rank

    return analyse_rank(profiler_dir, rank, announce=announce, output=output)
