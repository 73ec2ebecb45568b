"""Framework integrations, each installed right after its framework's import, so import order never matters.

Each integration is a package: ``patch`` (the run-loop patches, ``install(session)``), ``device`` (its
``DeviceSession``) and ``profile`` (its ``FrameworkProfile``, read by the analysis, exports and viewer).
"""
from .. import log
from .import_hooks import when_imported
from .mindspore.profile import PROFILE as MINDSPORE
from .profile import FrameworkProfile
from .torch.profile import PROFILE as TORCH

PROFILES = {profile.name: profile for profile in (MINDSPORE, TORCH)}


def profile_of(framework: str | None) -> FrameworkProfile | None:
    """The profile of the framework a raw meta names, None for a run no framework attached to."""
    return PROFILES.get(framework or "")


def install_post_import_hooks(session):
    import importlib

    def hook_for(framework):
        def on_import(_module):
            try:
                importlib.import_module(f"{__name__}.{framework}.patch").install(session)
            except Exception as exc:  # an error here would otherwise fail the user's import
                log.report_error(f"instrumenting {framework}", exc)
        return on_import

    for framework in PROFILES:
        when_imported(framework, hook_for(framework))
