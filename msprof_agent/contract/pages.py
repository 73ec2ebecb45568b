"""What a page is, as one declaration: the files it writes (name templates, columns, reader) and how it is written.

Each analysis page module declares its ``Page`` beside its ``write``; the analysis runs the registered pages in
turn (``analysis.pages``) and the viewer reads each section through its ``File``'s reader. The types live here,
in the lowest layer, so that the analysis that writes a file and the viewer that reads it see one declaration.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Read = Callable[[bytes], Any]  # a ``readers`` reader: a file's bytes -> plain dicts and lists


@dataclass(frozen=True)
class File:
    """One analysed file: its ``section`` (the name the viewer's pages read it by), the name ``templates`` that may
    hold it (``names``; the first present wins: a device variant, alternative files), its ``read``er (None: no page
    reads it back) and its ``columns`` where it is a table."""

    section: str
    templates: tuple[str, ...]
    read: Read | None = None
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Page:
    """One analysis page: ``name``, its result's key (``Run.results``); its ``files``; ``write(data, ctx, *earlier)``,
    handed the results of the earlier pages ``reads`` names, and ``fallback``, its result when it fails (a failure
    costs that page alone, noted as ``label``'s). ``write`` None: the analysis's own steps write its files (the
    profiler info and step trace every page reads, the timeline on its thread, the summary last)."""

    name: str
    files: tuple[File, ...] = ()
    write: Callable[..., Any] | None = None
    fallback: Any = None
    reads: tuple[str, ...] = ()
    label: str = ""

    @property
    def noted_as(self) -> str:
        """The name its failure note gives."""
        return self.label or self.name
