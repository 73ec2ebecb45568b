"""What the exports write differently per framework: the Ascend layout as each framework's own profiler
(torch_npu's or MindSpore's) writes it, and whether HTA's PyTorch-style traces go beside it. The exports'
own table, keyed by the raw meta's ``framework``; the analysis and the viewer never read it."""
from dataclasses import dataclass
from typing import Any

from ..contract.names import ASCEND_ANALYSIS_DB, ASCEND_DB_FRAMEWORK, ASCEND_SUFFIX


@dataclass(frozen=True)
class Layout:
    suffix: str  # the Ascend layout's directory suffix (contract.names.ASCEND_FOLDER)
    component: str  # memory_record.csv's component column
    db_framework: str  # the framework word in the db export's name (contract.names.ASCEND_DB)
    api_tables: bool  # the db export's PYTORCH_API table
    analysis_db: str  # the db export's communication analysis database (contract.names.ASCEND_ANALYSIS_DB)
    call_matrix: bool  # its link table a row per call, as msprof writes it (MindSpore's), not per step's top, middle, bottom and total (PyTorch's)
    hta_trace: bool  # the text export adds HTA's PyTorch-style trace directory


MINDSPORE = Layout(suffix=ASCEND_SUFFIX["mindspore"], component="MindSpore", db_framework=ASCEND_DB_FRAMEWORK["mindspore"],
                   api_tables=False, analysis_db=ASCEND_ANALYSIS_DB["mindspore"], call_matrix=True, hta_trace=False)
TORCH = Layout(suffix=ASCEND_SUFFIX["torch"], component="PTA", db_framework=ASCEND_DB_FRAMEWORK["torch"],
               api_tables=True, analysis_db=ASCEND_ANALYSIS_DB["torch"], call_matrix=False, hta_trace=True)
LAYOUTS = {"mindspore": MINDSPORE, "torch": TORCH}


def layout_of(data: Any) -> Layout:
    """The run's layout; MindSpore's (MindInsight's and msprof's own) for a run no framework attached to."""
    return LAYOUTS.get(data.meta.get("framework") or "", MINDSPORE)
