"""Dynamic profiling (the MindSpore Profiler guide's Method 3): a window set by editing ``profiler_config.json`` mid-run.

``DynamicProfilerMonitor(cfg_path, output_path)`` writes ``cfg_path/profiler_config.json`` with the
guide's keys and defaults if no rank wrote it yet (create-if-absent by hard link, so a reader never
sees half a file), then checks it once per step with ``os.stat`` and reads it only when it changed.

Steps are counted by the monitor: ``monitor.step()`` at the end of each step of any loop, or
``on_train_step_end`` as a MindSpore callback, or (zero-code, ``MSPROF_DYNAMIC_CFG``) the session's
own step boundaries. The window ``start_step..stop_step`` (1-based, both inclusive) is collected
with the file's settings into ``output_path/window_{start}_{stop}/profiler`` (raw data and analysis,
the same layout as a run), and analysed at ``stop_step`` (``analyse_mode`` 0), in a separate process
(1), or not at all (-1: raw data kept for ``msprof-agent analyse``). A later edit sets a new window
in the same run. The file may use the guide's (MindSpore <= 2.4) keys or MindSpore 2.5+'s (see ``parse_config``). An edit
that cannot be honoured (invalid JSON, a bad value, start after stop, a window already past) is
reported once and ignored; the last valid settings stay in force. An unknown key is reported once
and ignored alone, as MindSpore does.
An edit made while a window records applies to the windows after it.
"""
from __future__ import annotations

import copy
import json
import os
import sys
from typing import cast  # typing is loaded already: options imports it

from . import log, online_analysis
from . import session as S
from .contract.names import DYNAMIC_CONFIG
from .options import KEYS, Options, OptionsError, _bool, _choice, _int_in, _path, from_mapping, unknown_key_message
from .windows import ASYNC, SYNC, window_folder, with_process_keys
from .writers import replacing

TYPE_CHECKING = False  # what follows is for the type checker only
if TYPE_CHECKING:
    from typing import Any

    from .windows import Collection

    Settings = tuple[int, int, Options, str | None]  # (start, stop, the window's options, analyse mode) of one edit

DEFAULTS = {
    "start_step": -1, "stop_step": -1, "aicore_metrics": -1, "profiler_level": -1, "profile_framework": -1,
    "analyse_mode": -1, "profile_communication": False, "parallel_strategy": False, "with_stack": False,
    "data_simplification": True,
}
ANALYSE_MODES = {-1: None, 0: SYNC, 1: ASYNC}  # the guide's: -1 = no analysis
NEWER_ANALYSE_MODES = {-1: SYNC, 0: SYNC, 1: ASYNC}  # MindSpore's, with "analyse" saying whether at all
FRAMEWORK_CODES = {-1: None, 0: "all", 1: "time"}
# Keys of the file itself; every other key is an option key (either generation, MindSpore's integer codes allowed).
FILE_KEYS = ("start_step", "stop_step", "analyse_mode", "analyse", "prof_path", "is_valid", "profile_framework")
NOT_IN_FILE = ("start", "output_path", "capture")


class ConfigError(ValueError):
    """One edit we cannot honour; the message is the warning's text."""


def _step(key: str, value: Any) -> int:
    if value == -1:
        return -1
    step: int = _int_in(1)(key, value)
    return step


def parse_config(values: object, base_options: Options, source: str = DYNAMIC_CONFIG) -> Settings:
    """Validate one version of the file: (start, stop, Options for the window, analyse mode).

    Both formats are read: the guide's (``aicore_metrics``, ``profile_framework`` codes, ``analyse_mode``
    -1 = no analysis) and MindSpore 2.5+'s (``aic_metrics``, ``profiler_level``, ``activities``, ...,
    ``analyse`` true/false with ``analyse_mode`` choosing sync or async). A key known to neither gets
    one warning and is ignored, as MindSpore ignores it; values are checked strictly.
    """
    if not isinstance(values, dict):
        raise ConfigError(f"expected a JSON object; got {type(values).__name__}")
    accepted = FILE_KEYS + tuple(k for k in KEYS if k not in NOT_IN_FILE)
    for key in values:
        if key not in accepted:
            log.warn_once(f'{source}: {unknown_key_message(key)}; "{key}" is ignored, as MindSpore ignores it')
    merged = dict(DEFAULTS, **{k: v for k, v in values.items() if k in accepted})
    try:
        start, stop = _step("start_step", merged["start_step"]), _step("stop_step", merged["stop_step"])
        if (start == -1) != (stop == -1):
            raise ConfigError(f'"start_step" {start} and "stop_step" {stop}: set both (a window) or both to -1 (none)')
        if start != -1 and stop < start:
            raise ConfigError(f'"start_step" {start} is after "stop_step" {stop}; accepted: start_step <= stop_step')
        if "analyse" in merged and not _bool("analyse", merged["analyse"]):
            mode: str | None = None
        else:
            modes = NEWER_ANALYSE_MODES if "analyse" in merged else ANALYSE_MODES
            mode = modes[_choice(tuple(modes))("analyse_mode", merged["analyse_mode"])]
        _bool("is_valid", merged.get("is_valid", False))
        framework = FRAMEWORK_CODES[_choice(tuple(FRAMEWORK_CODES))("profile_framework", merged["profile_framework"])]
        output_path = _path("prof_path", merged["prof_path"]) if "prof_path" in merged else base_options.output_path
        # The guide's file defaults ask for nothing (its profiler_level -1 is "unset"; MindSpore's -1,
        # LevelNone, without mstx is reset to Level0 anyway).
        guide_defaults = {k for k, v in DEFAULTS.items() if merged[k] == v and not (k == "profiler_level" and merged.get("mstx"))}
        mapping = {k: v for k, v in merged.items() if k not in FILE_KEYS and k not in guide_defaults}
        mapping.update(profile_framework=framework, start=True, output_path=output_path)
        options = from_mapping(mapping, codes=True, source=source)
    except OptionsError as exc:
        raise ConfigError(str(exc)) from None
    return start, stop, with_process_keys(options, base_options), mode


def write_default_config(path: str) -> bool:
    """Create the file with the MindSpore Profiler guide's defaults unless some rank already did: atomic, create-if-absent."""
    if os.path.exists(path):
        return False
    try:
        with replacing(path, exclusive=True) as handle:  # another rank first: its file stays
            handle.write(json.dumps(DEFAULTS, indent=4).encode() + b"\n")
        return True
    except FileExistsError:
        return False


class DynamicProfilerMonitor:
    """The guide's ``DynamicProfilerMonitor``: a MindSpore callback when MindSpore is loaded, ``step()`` anywhere."""

    def __new__(cls, *args: object, **kwargs: object) -> DynamicProfilerMonitor:
        flavour = _with_mindspore_callback(cls) if "mindspore" in sys.modules else cls  # Model.train only accepts Callback instances
        return super().__new__(flavour)

    def __init__(self, cfg_path: str = "./dyn_cfg", output_path: str = "./dyn_prof_data", follow_session: bool = False) -> None:
        self.cfg_path = os.path.abspath(cfg_path)
        self.config_file = os.path.join(self.cfg_path, DYNAMIC_CONFIG)
        self.output_path = os.path.abspath(output_path)
        self.count = 0  # steps completed, as this monitor counts them
        self.settings: Settings | None = None  # of the last valid edit
        self.window: tuple[int, int, Collection] | None = None  # (start, stop, collection) while one is active
        self._seen: tuple[int, int, int] | None = None  # the file's (mtime_ns, size, inode) when last read
        self._follow = follow_session
        self.session = S.current() or self._start_session()
        self.passive = not follow_session and any(isinstance(listener, DynamicProfilerMonitor) for listener in self.session.listeners)
        if self.passive:  # one monitor per process, or two would fight over the window
            log.say(f"DynamicProfilerMonitor: MSPROF_DYNAMIC_CFG already runs the dynamic monitor; this one "
                    f"({self.config_file}) stays passive")
            return
        write_default_config(self.config_file)
        self._check()
        if follow_session:
            self.session.listeners.append(self)
        else:
            if self.session.framework is None:
                self.session.steps.open()  # no framework reports steps: this monitor's step() does
            self._maybe_start(at_ns=None)

    def _start_session(self) -> S.Session:
        from .frameworks import install_post_import_hooks

        base = from_mapping({"output_path": self.output_path})
        current = S.start(base, origin="dynamic", analyse=online_analysis.analyse)  # its run keeps the step timing and lists the windows
        install_post_import_hooks(current)
        return current

    # -- the configuration file ------------------------------------------------------------------
    def _check(self) -> None:
        """Read the file only when its stat changed; a bad edit is reported once and ignored."""
        try:
            st = os.stat(self.config_file)
        except OSError:
            return
        seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            with open(self.config_file) as handle:
                text = handle.read()
            try:
                values = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
            settings = parse_config(values, from_mapping({"output_path": self.output_path}), self.config_file)
            start = settings[0]
            if start != -1 and start <= self.count and (start, settings[1]) != self._current_window():
                raise ConfigError(f'window {start}..{settings[1]} is in the past: step {self.count} has run already; '
                                  f'set "start_step" to {self.count + 1} or later')
        except (ConfigError, OSError) as exc:
            log.warn_once(f"{self.config_file}: {exc}; keeping the previous settings", key=(self.config_file, seen, str(exc)))
            return
        self.settings = settings

    def _current_window(self) -> tuple[int, int] | None:
        return (self.window[0], self.window[1]) if self.window else None

    # -- the window ----------------------------------------------------------------------------------
    def _maybe_start(self, at_ns: int | None) -> None:
        """Before step count+1: open the window the settings ask for, if it begins now."""
        if self.window is not None or self.settings is None:
            return
        start, stop, options, mode = self.settings
        if start != self.count + 1:
            return
        options = copy.copy(options)  # the settings keep their output base (prof_path or output_path) for a later window
        base = options.output_path
        options.output_path = window_folder(base, start, stop)  # the window's meta names its own folder
        collection = self.session.start_window(base, start, stop, options, "dynamic", mode, {"trigger": "dynamic"}, at_ns=at_ns,
                                               after_open_step=not self._follow and self.session.framework is not None)
        if collection is None:
            log.warn_once(f"dynamic window {start}..{stop} skipped: another collection is recording "
                          f"({self.session.owner.origin if self.session.owner else 'finished'})")
            return
        self.window = (start, stop, collection)

    def _maybe_stop(self) -> None:
        """After step ``count``: the window ends at its stop step."""
        if self.window is None or self.count < self.window[1]:
            return
        collection, self.window = self.window[2], None
        self.session.analyse(collection, reason=f"stop_step {self.count}")

    # -- step sources --------------------------------------------------------------------------------
    def step(self) -> None:
        """End of one training step (call it once per step in a custom loop)."""
        if self.passive:
            return
        try:
            if not self._follow and self.session.framework is None:
                self.session.steps.close()
                self.session.steps.open()
            self.count += 1
            self._maybe_stop()
            self._check()
            self._maybe_start(at_ns=None)
        except Exception as exc:
            log.report_error("the dynamic profiling monitor", exc)

    def step_opened(self, n: int, start_ns: int) -> None:
        """Zero-code mode: the session opens step N."""
        self.count = n - 1
        self._check()
        self._maybe_start(at_ns=start_ns)

    def step_closed(self, step: dict[str, Any]) -> None:
        """Zero-code mode: the session closed a step; its record is already in the window's store."""
        self.count = step["n"]
        self._maybe_stop()

    # -- the MindSpore callback surface ----------------------------------------------------------------
    def on_train_begin(self, run_context: Any) -> None:
        if self.passive:
            return
        try:
            self._check()
            self._maybe_start(at_ns=None)
        except Exception as exc:
            log.report_error("the dynamic profiling monitor", exc)

    def on_train_step_end(self, run_context: Any) -> None:
        self.step()


_flavours: dict[type[DynamicProfilerMonitor], type[DynamicProfilerMonitor]] = {}


def _with_mindspore_callback(cls: type[DynamicProfilerMonitor]) -> type[DynamicProfilerMonitor]:
    """CLS with mindspore's Callback as a second base, made once per class (subclasses keep theirs)."""
    if cls not in _flavours:
        from mindspore.train import Callback

        if issubclass(cls, Callback):
            return cls
        flavour = type(cls.__name__, (cls, Callback), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
        _flavours[cls] = cast("type[DynamicProfilerMonitor]", flavour)  # a subclass of CLS
    return _flavours[cls]
