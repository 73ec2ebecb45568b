"""Framework integrations, each installed by a wrapt post-import hook so import order never matters."""
from .. import log

INTEGRATIONS = {
    "mindspore": "msprof_agent.frameworks.mindspore",
    "torch": "msprof_agent.frameworks.torch",
}


def install_post_import_hooks(session):
    import importlib

    import wrapt

    def hook_for(module_name):
        def on_import(_module):
            try:
                importlib.import_module(module_name).install(session)
            except Exception as exc:  # an error here would otherwise fail the user's import
                log.report_error(f"instrumenting {module_name.rsplit('.', 1)[1]}", exc)
        return on_import

    for framework, module_name in INTEGRATIONS.items():
        wrapt.register_post_import_hook(hook_for(module_name), framework)
