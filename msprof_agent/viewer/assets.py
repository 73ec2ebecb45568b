"""Where the viewer's files come from: its static/ and templates/ folders, and plotly.min.js from the plotly package.

Shared by the server, the pages and the report. It imports nothing beyond ``os``, so the analysis can ask
whether the report's extra is installed without loading the template engine or the viewer's server.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
STATIC_DIR = os.path.join(HERE, "static")
TEMPLATE_DIR = os.path.join(HERE, "templates")
INSTALL_VIEWER = "pip install 'msprof-agent[viewer]'"


def plotly_js_path():
    """plotly.min.js inside the installed plotly package, or None (the viewer then shows tables only).
    Found without importing plotly: its import takes 0.1-0.5 s, more than writing the whole report."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("plotly")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "package_data", "plotly.min.js")
    return path if os.path.isfile(path) else None


def static_text(name):
    with open(os.path.join(STATIC_DIR, name), encoding="utf-8") as handle:
        return handle.read()


def template_engine_missing():
    """True where jinja2 (the viewer extra's template engine) cannot be imported."""
    try:
        import jinja2  # noqa: F401
    except ImportError:
        return True
    return False
