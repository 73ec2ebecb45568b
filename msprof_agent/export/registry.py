"""The exports of each ``export_type`` kind, in the order they are written (imported when an export is asked for)."""
from . import ascend_db, ascend_text, hta_trace
from .base import Export

EXPORTS: dict[str, tuple[Export, ...]] = {"text": (ascend_text, hta_trace), "db": (ascend_db,)}
