"""The pages the analysis writes, as their modules declare them (``contract.pages.Page``), in the order they run.

``analyse_pages`` writes the profiler info and step trace first (every page reads them), starts the timeline
on its thread, then runs each registered page with a ``write`` in turn; ``summarise`` writes the summary last.
The viewer reads every registered page's files by their sections (``files``). A page registered here (a
plugin, a test) is written, read and shown with no other edit; ``unregister`` takes it out again.
"""
from ..contract.pages import File, Page
from . import communication, cpu_util, data_prep, device, dynamic_shape, flops, host_io, info, memory, mstx, operators, step_trace, summary, timeline

# the built-in pages, in the order they run (cpu_util last: it reads data_prep's result)
_PAGES: dict[str, Page] = {page.name: page for page in (
    info.PAGE, step_trace.PAGE, timeline.PAGE, operators.PAGE, flops.PAGE, data_prep.PAGE, memory.PAGE, dynamic_shape.PAGE,
    communication.PAGE, host_io.PAGE, mstx.PAGE, device.PAGE, cpu_util.PAGE, summary.PAGE)}


def register(page: Page) -> Page:
    """Add ``page``, run after those registered before it; returns it. Its name and its files' sections must be new."""
    taken = files()
    clash = [file.section for file in page.files if file.section in taken]
    if page.name in _PAGES or clash:
        raise ValueError(f"page {page.name!r}: {'its name' if page.name in _PAGES else f'section {clash[0]!r}'} is taken by another page")
    _PAGES[page.name] = page
    return page


def unregister(name: str) -> None:
    """Take the page ``name`` out (a plugin's or a test's page)."""
    del _PAGES[name]


def registered() -> tuple[Page, ...]:
    """Every page, in the order they run."""
    return tuple(_PAGES.values())


def files() -> dict[str, File]:
    """Every page's files by section."""
    return {file.section: file for page in _PAGES.values() for file in page.files}
