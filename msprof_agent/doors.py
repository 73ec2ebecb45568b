"""The ways the agent gets into a Python process, as ``run`` and ``doctor`` need to know them.

- The .pth an installed wheel puts in site-packages (setup.py): every interpreter of that environment,
  also under ``-I`` and ``-E``; only ``-S`` (no site) skips it.
- ``sitecustomize_hook/`` on PYTHONPATH, beside the package in a checkout or an editable install:
  ``-S``, ``-E`` and ``-I`` all skip it.
"""
import os


def installed_pth():
    """The activation .pth this distribution installed, or None (editable installs and checkouts have none)."""
    from importlib import metadata

    try:
        files = metadata.distribution("msprof-agent").files or ()
    except metadata.PackageNotFoundError:
        return None
    for item in files:
        if item.suffix == ".pth" and not item.name.startswith("__editable__"):
            path = str(item.locate())
            if os.path.isfile(path):
                return path
    return None


def hook_dir():
    """The folder holding only sitecustomize.py, beside the package in a checkout; None in a wheel install."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidate = os.path.join(os.path.dirname(here), "sitecustomize_hook")
    return candidate if os.path.isfile(os.path.join(candidate, "sitecustomize.py")) else None


def hook_on_path(pythonpath):
    """True when an os.pathsep list (PYTHONPATH's value) holds this checkout's hook folder."""
    hook = hook_dir()
    return hook is not None and any(p and os.path.normpath(p) == os.path.normpath(hook) for p in (pythonpath or "").split(os.pathsep))
