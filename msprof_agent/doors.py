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


def compile_hook(hook):
    """Write the hook's bytecode where it is missing or stale: an interpreter under PYTHONDONTWRITEBYTECODE
    (or with the folder read-only) would otherwise compile it at every start, ~1.5 ms each, the whole of
    the off path's cost. Best effort: a folder we cannot write to just stays as it is."""
    import contextlib
    import importlib.util
    import py_compile

    source = os.path.join(hook, "sitecustomize.py")
    cached = importlib.util.cache_from_source(source)
    with contextlib.suppress(OSError, py_compile.PyCompileError):
        if not os.path.exists(cached) or os.stat(cached).st_mtime < os.stat(source).st_mtime:
            py_compile.compile(source, doraise=True)


def hook_on_path(pythonpath):
    """True when an os.pathsep list (PYTHONPATH's value) holds this checkout's hook folder."""
    hook = hook_dir()
    return hook is not None and any(p and os.path.normpath(p) == os.path.normpath(hook) for p in (pythonpath or "").split(os.pathsep))
