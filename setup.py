"""Adds the activation .pth to the wheel; everything else is declared in pyproject.toml.

The .pth's one line costs an interpreter two environment lookups. When MS_PROFILER_OPTIONS or
MSPROF_DYNAMIC_CFG is set it executes sitecustomize_hook/sitecustomize.py, whose source is embedded here at
build time, so the installed package and the PYTHONPATH hook run the same code (pytest-cov ships its
subprocess support the same way). Editable installs get no .pth: there the checkout's hook folder
serves, through PYTHONPATH or ``msprof-agent run``.
"""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
# site runs .pth files in name order: ours last, so path entries other .pth files add (frameworks kept in
# another tree, conda-develop links) are in place before the agent imports anything.
PTH_NAME = "zz_msprof_agent.pth"
PTH_LINE = ("import os; ('MS_PROFILER_OPTIONS' in os.environ or 'MSPROF_DYNAMIC_CFG' in os.environ) "
            "and exec({source!r}, {{'__name__': 'msprof_agent_pth'}})\n")


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        with open(os.path.join(HERE, "sitecustomize_hook", "sitecustomize.py"), encoding="utf-8") as handle:
            source = handle.read()
        with open(os.path.join(self.build_lib, PTH_NAME), "w", encoding="utf-8") as handle:
            handle.write(PTH_LINE.format(source=source))


setup(cmdclass={"build_py": BuildPyWithPth})
