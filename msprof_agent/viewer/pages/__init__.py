"""One module per viewer page: each view reads its sections and returns its template's context (``render.page_body``)."""
from collections.abc import Callable
from typing import Any

from .cluster import cluster_page
from .data import data_page
from .operators import operators_page
from .overview import overview
from .resources import resources_page
from .steps import steps_page

# (page, run, rank, sections), and ``report`` for the overview and cluster pages
VIEWS: dict[str, Callable[..., dict[str, Any]]] = {"overview": overview, "steps": steps_page, "operators": operators_page, "data": data_page,
         "resources": resources_page, "cluster": cluster_page}
