"""What the analysis, the exports and the viewer do differently per framework, as one object per integration.

Readers look a run's profile up by the raw meta's ``framework`` (``frameworks.profile_of``) instead of
branching on the name; each integration's ``profile.py`` holds its own.
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
    export_suffix: str  # the Ascend layout's directory suffix (contract.names.ASCEND_FOLDER)
    component: str  # memory_record.csv's component column
    db_framework: str  # the framework word in the db export's name (contract.names.ASCEND_DB)
    api_tables: bool  # the db export's PYTORCH_API table
    analysis_db: str  # the db export's communication analysis database (contract.names.ASCEND_ANALYSIS_DB)
    call_matrix: bool  # its link table a row per call, as msprof writes it (MindSpore's), not per step's top, middle, bottom and total (PyTorch's)
    hta_trace: bool  # the text export adds HTA's PyTorch-style trace directory
    empty_pipeline_file: bool  # pipeline_profiling_{r}.json written without ops (MindInsight's CPU page needs it)
    merges_subgraphs: bool  # the timeline download offers merging subgraphs
    workers_setting: str  # the data loader's setting for its worker count, in the recorded data_settings (advice says from what to what)
    workers_are_children: bool  # its loader's workers are child processes (their CPU time is the job's descendants')
    advice: Mapping[str, str]  # the advisor's action per finding id, in this framework's words
    hints: Mapping[str, str]  # the viewer's sentence per absent section, where it differs by framework
