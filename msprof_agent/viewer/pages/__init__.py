"""One module per viewer page: each view reads its sections and returns its template's context (``render.page_body``)."""
from .cluster import cluster_page
from .data import data_page
from .operators import operators_page
from .overview import overview
from .resources import resources_page
from .steps import steps_page

VIEWS = {"overview": overview, "steps": steps_page, "operators": operators_page, "data": data_page,
         "resources": resources_page, "cluster": cluster_page}
