"""The viewer's pages, one module each, in the order the viewer and report.html show them: each declares its
``View`` (``views``); ``load_page`` reads what one page shows. ``register`` adds a page (a plugin, a test),
``unregister`` takes it out again."""
from ..sections import Loaded, Run, load_section
from ..views import View
from . import cluster, data, device, operators, overview, resources, steps

_VIEWS: dict[str, View] = {view.name: view for view in (overview.VIEW, steps.VIEW, operators.VIEW, data.VIEW, resources.VIEW, device.VIEW, cluster.VIEW)}


def register(view: View) -> View:
    """Add ``view`` after the pages registered before it; returns it."""
    if view.name in _VIEWS:
        raise ValueError(f"viewer page {view.name!r} is taken by another page")
    _VIEWS[view.name] = view
    return view


def unregister(name: str) -> None:
    """Take the page ``name`` out (a plugin's or a test's page)."""
    del _VIEWS[name]


def views() -> dict[str, View]:
    """Every page by name, in the order they are shown."""
    return dict(_VIEWS)


def load_page(run: Run, rank: int, page: str) -> Loaded:
    """The sections one page of one rank shows, and what its view reads besides (``View.more``)."""
    view = _VIEWS[page]
    out: Loaded = {name: load_section(run.ranks[rank], rank, name) for name in view.sections}
    if view.more is not None:
        view.more(run, rank, out)
    return out


__all__ = ["View", "load_page", "register", "unregister", "views"]
