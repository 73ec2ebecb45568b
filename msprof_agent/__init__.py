"""msprof-agent: zero-code profiling of MindSpore and PyTorch training.

Kept import-light: the hook imports submodules directly, and the public API is loaded on first use.
"""
__version__ = "0.1.0"
