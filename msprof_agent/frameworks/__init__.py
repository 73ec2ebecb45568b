"""Framework integrations, each installed right after its framework's import, so import order never matters.

Each integration is a package: ``patch`` (the run-loop patches, ``install(session)``) and ``device`` (its
``DeviceSession``). What the analysis, exports and viewer do differently per framework is described below
them, in ``contract.frameworks`` (its profile) and ``export.layouts``, so none of them imports this package.
"""
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from .. import log
from ..contract.frameworks import PROFILES
from .import_hooks import when_imported

if TYPE_CHECKING:
    from ..session import Session


def install_post_import_hooks(session: "Session") -> None:
    import importlib

    def hook_for(framework: str) -> Callable[[ModuleType], None]:
        def on_import(_module: ModuleType) -> None:
            try:
                importlib.import_module(f"{__name__}.{framework}.patch").install(session)
            except Exception as exc:  # an error here would otherwise fail the user's import
                log.report_error(f"instrumenting {framework}", exc)
        return on_import

    for framework in PROFILES:
        when_imported(framework, hook_for(framework))
