"""Framework integrations, each installed right after its framework's import, so import order never matters."""
from .. import log
from .import_hooks import when_imported

INTEGRATIONS = {
    "mindspore": "msprof_agent.frameworks.mindspore",
    "torch": "msprof_agent.frameworks.torch",
}


def install_post_import_hooks(session):
    import importlib

    def hook_for(module_name):
        def on_import(_module):
            try:
                importlib.import_module(module_name).install(session)
            except Exception as exc:  # an error here would otherwise fail the user's import
                log.report_error(f"instrumenting {module_name.rsplit('.', 1)[1]}", exc)
        return on_import

    for framework, module_name in INTEGRATIONS.items():
        when_imported(framework, hook_for(module_name))
