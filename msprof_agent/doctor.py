"""``msprof-agent doctor``: would a Python started here be profiled, through which door, with what?

The role ``ddtrace-run --info`` plays, for CI logs. It never imports a framework: versions come from
package metadata, because importing MindSpore with the variable set starts MindSpore's own profiler.
Exit status 0 when a Python started here would be profiled, 1 (with the reason) when not.
"""
import json
import os
import platform
import sys

from . import doors, environment
from .contract.frameworks import PROFILES
from .contract.names import DYNAMIC_CONFIG, run_dir
from .options import OptionsError, not_applicable, parse_text


def _versions() -> str:
    from importlib import metadata

    found: list[str] = []
    for name in PROFILES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(found) or "none (neither mindspore nor torch is installed for this interpreter)"


def _device_target() -> str:
    """The device the frameworks would find, guessed from the system (no framework import)."""
    if os.environ.get("ASCEND_HOME_PATH") or os.path.isdir("/usr/local/Ascend"):
        return "Ascend"
    if os.path.exists("/dev/nvidiactl"):
        return "GPU"
    return "CPU"


def _writable(path: str) -> bool:
    """Whether this process could create and write PATH, judged on its nearest existing ancestor (nothing is created)."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    return os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK)


def _doors() -> tuple[list[str], str | None]:
    """(lines describing each door, the door a plain ``python`` here would come through or None)."""
    pth = doors.installed_pth()
    hook = doors.hook_dir()
    on_path = doors.hook_on_path(os.environ.get("PYTHONPATH"))
    lines = [f".pth in site-packages: {pth} (every interpreter of this environment, also under -I and -E; not -S)" if pth
             else ".pth in site-packages: not installed (an editable install or a checkout has none)"]
    if hook:
        lines.append(f"hook on PYTHONPATH: {'yes' if on_path else 'no'} ({hook}; skipped under -S, -E and -I)")
    lines.append("msprof-agent run: sets the variable" + ("" if pth else " and puts the hook on PYTHONPATH") + " for one command")
    return lines, ".pth" if pth else "hook on PYTHONPATH" if on_path else None


def main() -> int:
    def show(label: str, value: str) -> None:
        print(f"{label + ':' if label else '':<21}{value}")

    show("python", f"{sys.executable} ({platform.python_version()})")
    lines, door = _doors()
    for i, line in enumerate(lines):
        show("doors" if i == 0 else "", line)
    show("frameworks", _versions())
    text = os.environ.get(environment.OPTIONS)
    dynamic = os.environ.get(environment.DYNAMIC_CFG)
    show(environment.OPTIONS, "not set" if text is None else text)
    if dynamic:
        show(environment.DYNAMIC_CFG, f"{dynamic} (windows from {os.path.join(dynamic, DYNAMIC_CONFIG)})")
    try:
        opts = parse_text(text if text and text.strip() else "{}")
    except OptionsError as exc:
        return _verdict(f"{environment.OPTIONS}: {exc}")
    show("options in effect", json.dumps(opts.in_effect()))
    show("rank", f"{opts.rank_id} of {opts.world_size}, device {opts.device_id}")
    target = _device_target()
    show("not applicable", "; ".join(not_applicable(opts, target)) or f"nothing (device: {target})")
    profiler_dir = run_dir(opts.output_path)
    writable = _writable(profiler_dir)
    show("output", f"{profiler_dir} ({'writable' if writable else 'NOT writable by this user'})")
    if text is None and not dynamic:
        return _verdict(f"{environment.OPTIONS} is not set (export it, or use msprof-agent run)")
    if not opts.start and not dynamic:
        return _verdict(f'{environment.OPTIONS} has "start": false')
    if not writable:
        return _verdict(f'{environment.OPTIONS}: key "output_path": cannot write to {opts.output_path!r}')
    if door is None:
        return _verdict("no door into a plain python here: the .pth is not installed and the hook is not on PYTHONPATH "
                        "(msprof-agent run would profile it)")
    return _verdict(None, door)


def _verdict(reason: str | None, door: str | None = None) -> int:
    if reason:
        print(f"verdict: NOT profiled: {reason}")
        return 1
    print(f"verdict: a Python started here would be profiled (through the {door})")
    return 0
