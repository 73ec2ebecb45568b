"""Adds the activation .pth to the wheel; everything else is declared in pyproject.toml.

The .pth's one line costs an interpreter two environment lookups (and site's compile of the short line).
When MS_PROFILER_OPTIONS or MSPROF_DYNAMIC_CFG is set it imports ``_msprof_agent_pth``, a copy of
sitecustomize_hook/sitecustomize.py made here at build time, so the installed package and the PYTHONPATH
hook run the same code (pytest-cov ships its subprocess support the same way). Not the source itself in
the line: site compiles every .pth line at every start, and 4 KB of literal cost 80 µs there.
Editable installs get no .pth: there the checkout's hook folder serves, through PYTHONPATH or
``msprof-agent run``.

The build's scratch (``build/``, ``*.egg-info``) goes to a temporary folder, removed at the end, so that
``pip install .`` or ``pip wheel .`` leaves the checkout as it was.
"""
import atexit
import os
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
# site runs .pth files in name order: ours last, so path entries other .pth files add (frameworks kept in
# another tree, conda-develop links) are in place before the agent imports anything.
PTH_NAME = "zz_msprof_agent.pth"
MODULE = "_msprof_agent_pth"
PTH_LINE = f"import os; ('MS_PROFILER_OPTIONS' in os.environ or 'MSPROF_DYNAMIC_CFG' in os.environ) and __import__({MODULE!r})\n"


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        shutil.copyfile(os.path.join(HERE, "sitecustomize_hook", "sitecustomize.py"), os.path.join(self.build_lib, MODULE + ".py"))
        with open(os.path.join(self.build_lib, PTH_NAME), "w", encoding="utf-8") as handle:
            handle.write(PTH_LINE)


SCRATCH = tempfile.mkdtemp(prefix="msprof-agent-build-")
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)
setup(cmdclass={"build_py": BuildPyWithPth}, options={"build": {"build_base": SCRATCH}, "egg_info": {"egg_base": SCRATCH}})
