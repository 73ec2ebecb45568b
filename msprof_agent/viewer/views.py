"""What a viewer page is, as one declaration (``View``): its title, the sections it reads, its view function and
template, and the hints for the sections it is the home of. ``pages`` holds the registered views in order."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .sections import Loaded, Run


@dataclass(frozen=True)
class View:
    """One page of the viewer and report.html. ``build(page, run, rank, sections[, report])`` returns the context of
    ``template`` (a file of templates/, default ``{name}.html``, or the absolute path of a plugin's own) from
    ``sections``, the files it reads by section (``analysis.pages``); ``more(run, rank, loaded)`` adds what it reads
    besides (the step timeline, the cluster summary). ``hints``: one sentence per section it is the home of, which option fills it when it is absent.
    ``takes_report``: ``build`` is told whether it draws report.html; ``compares_ranks``: a page of the job, shown
    where it has more than one rank and written once beside the cluster summary, not in each rank's report;
    ``applies(run, rank)``: whether the rank has anything for the page (the GPU page: a GPU run), which the page bar
    and the report leave out where it has not; None: every rank."""

    name: str
    title: str
    sections: tuple[str, ...]
    build: Callable[..., dict[str, Any]]
    template: str = ""
    hints: Mapping[str, str] = field(default_factory=dict)
    more: Callable[[Run, int, Loaded], None] | None = None
    takes_report: bool = False
    compares_ranks: bool = False
    applies: Callable[[Run, int], bool] | None = None
