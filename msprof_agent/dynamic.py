"""Dynamic profiling (the seed's Method 3): a window set by editing ``profiler_config.json`` mid-run.

``DynamicProfilerMonitor(cfg_path, output_path)`` writes ``cfg_path/profiler_config.json`` with the
seed's keys and defaults if no rank wrote it yet (create-if-absent by hard link, so a reader never
sees half a file), then checks it once per step with ``os.stat`` and reads it only when it changed.

Steps are counted by the monitor: ``monitor.step()`` at the end of each step of any loop, or
``on_train_step_end`` as a MindSpore callback, or (zero-code, ``MSPROF_DYNAMIC_CFG``) the session's
own step boundaries. The window ``start_step..stop_step`` (1-based, both inclusive) is collected
with the file's settings into ``output_path/window_{start}_{stop}/profiler`` (raw data and analysis,
the same layout as a run), and analysed at ``stop_step`` (``analyse_mode`` 0), in a separate process
(1), or not at all (-1: raw data kept for ``msprof-agent analyse``). A later edit sets a new window
in the same run. An edit that cannot be honoured (invalid JSON, unknown key, bad value, start after
stop, a window already past) is reported once and ignored; the last valid settings stay in force.
An edit made while a window records applies to the windows after it.
"""
import json
import os
import sys

from . import log
from . import session as S
from .options import OptionsError, from_mapping
from .windows import ASYNC, SYNC, window_folder, with_process_keys
from .writers import replacing

CONFIG_NAME = "profiler_config.json"
DEFAULTS = {
    "start_step": -1, "stop_step": -1, "aicore_metrics": -1, "profiler_level": -1, "profile_framework": -1,
    "analyse_mode": -1, "profile_communication": False, "parallel_strategy": False, "with_stack": False,
    "data_simplification": True,
}
# Our option keys a file may add (the seed's keys above map onto the same Options fields).
EXTRA_KEYS = ("op_time", "profile_memory", "l2_cache", "timeline_limit", "data_process", "record_shapes", "cpu_sampling_interval")
ANALYSE_MODES = {-1: None, 0: SYNC, 1: ASYNC}
FRAMEWORK_CODES = {-1: None, 0: "all", 1: "time"}


class ConfigError(ValueError):
    """One edit we cannot honour; the message is the warning's text."""


def _int_choice(key, value, allowed):
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise ConfigError(f'key "{key}": got {value!r}; accepted: ' + ", ".join(str(a) for a in allowed))
    return value


def _step(key, value):
    if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and value != -1):
        raise ConfigError(f'key "{key}": got {value!r}; accepted: an integer from 1 up, or -1 (no window)')
    return value


def parse_config(values, base_options):
    """Validate one version of the file: (start, stop, Options for the window, analyse mode)."""
    if not isinstance(values, dict):
        raise ConfigError(f"expected a JSON object; got {type(values).__name__}")
    unknown = [k for k in values if k not in DEFAULTS and k not in EXTRA_KEYS]
    if unknown:
        raise ConfigError(f'unknown key "{unknown[0]}"; accepted keys: {", ".join(list(DEFAULTS) + list(EXTRA_KEYS))}')
    merged = dict(DEFAULTS, **values)
    start, stop = _step("start_step", merged["start_step"]), _step("stop_step", merged["stop_step"])
    if (start == -1) != (stop == -1):
        raise ConfigError(f'"start_step" {start} and "stop_step" {stop}: set both (a window) or both to -1 (none)')
    if start != -1 and stop < start:
        raise ConfigError(f'"start_step" {start} is after "stop_step" {stop}; accepted: start_step <= stop_step')
    _int_choice("profiler_level", merged["profiler_level"], (-1, 0, 1, 2))
    mode = ANALYSE_MODES[_int_choice("analyse_mode", merged["analyse_mode"], tuple(ANALYSE_MODES))]
    framework = FRAMEWORK_CODES[_int_choice("profile_framework", merged["profile_framework"], tuple(FRAMEWORK_CODES))]
    mapping = {k: merged[k] for k in ("aicore_metrics", "profile_communication", "parallel_strategy", "with_stack") + EXTRA_KEYS if k in merged}
    mapping.update(profile_framework=framework, start=True, output_path=base_options.output_path)
    if not isinstance(merged["data_simplification"], bool):
        raise ConfigError(f'key "data_simplification": got {merged["data_simplification"]!r}; accepted: true or false')
    try:
        options = from_mapping(mapping)
    except OptionsError as exc:
        raise ConfigError(str(exc)) from None
    return start, stop, with_process_keys(options, base_options), mode


def write_default_config(path):
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
    """The seed's ``DynamicProfilerMonitor``: a MindSpore callback when MindSpore is loaded, ``step()`` anywhere."""

    def __new__(cls, *args, **kwargs):
        if "mindspore" in sys.modules:  # Model.train only accepts Callback instances
            cls = _with_mindspore_callback(cls)
        return super().__new__(cls)

    def __init__(self, cfg_path="./dyn_cfg", output_path="./dyn_prof_data", follow_session=False):
        self.cfg_path = os.path.abspath(cfg_path)
        self.config_file = os.path.join(self.cfg_path, CONFIG_NAME)
        self.output_path = os.path.abspath(output_path)
        self.count = 0  # steps completed, as this monitor counts them
        self.settings = None  # (start, stop, options, mode) of the last valid edit
        self.window = None  # (start, stop, collection) while one is active
        self._seen = None
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

    def _start_session(self):
        from .frameworks import install_post_import_hooks

        base = from_mapping({"output_path": self.output_path})
        current = S.start(base, origin="dynamic")  # its run keeps the step timing and lists the windows
        install_post_import_hooks(current)
        return current

    # -- the configuration file ------------------------------------------------------------------
    def _check(self):
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
            settings = parse_config(values, from_mapping({"output_path": self.output_path}))
            start = settings[0]
            if start != -1 and start <= self.count and (start, settings[1]) != self._current_window():
                raise ConfigError(f'window {start}..{settings[1]} is in the past: step {self.count} has run already; '
                                  f'set "start_step" to {self.count + 1} or later')
        except (ConfigError, OSError) as exc:
            log.warn_once(f"{self.config_file}: {exc}; keeping the previous settings", key=(self.config_file, seen, str(exc)))
            return
        self.settings = settings

    def _current_window(self):
        return self.window[:2] if self.window else None

    # -- the window ----------------------------------------------------------------------------------
    def _maybe_start(self, at_ns):
        """Before step count+1: open the window the settings ask for, if it begins now."""
        if self.window is not None or self.settings is None:
            return
        start, stop, options, mode = self.settings
        if start != self.count + 1:
            return
        options.output_path = window_folder(self.output_path, start, stop)  # the window's meta names its own folder
        collection = self.session.start_window(self.output_path, start, stop, options, "dynamic", mode,
                                               {"trigger": "dynamic"}, at_ns=at_ns)
        if collection is None:
            log.warn_once(f"dynamic window {start}..{stop} skipped: another collection is recording "
                          f"({self.session.owner.origin if self.session.owner else 'finished'})")
            return
        self.window = (start, stop, collection)

    def _maybe_stop(self):
        """After step ``count``: the window ends at its stop step."""
        if self.window is None or self.count < self.window[1]:
            return
        collection, self.window = self.window[2], None
        self.session.analyse(collection, reason=f"stop_step {self.count}")

    # -- step sources --------------------------------------------------------------------------------
    def step(self):
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

    def step_opened(self, n, start_ns):
        """Zero-code mode: the session opens step N."""
        self.count = n - 1
        self._check()
        self._maybe_start(at_ns=start_ns)

    def step_closed(self, step):
        """Zero-code mode: the session closed a step; its record is already in the window's store."""
        self.count = step["n"]
        self._maybe_stop()

    # -- the MindSpore callback surface ----------------------------------------------------------------
    def on_train_begin(self, run_context):
        if self.passive:
            return
        try:
            self._check()
            self._maybe_start(at_ns=None)
        except Exception as exc:
            log.report_error("the dynamic profiling monitor", exc)

    def on_train_step_end(self, run_context):
        self.step()


_flavours = {}


def _with_mindspore_callback(cls):
    """CLS with mindspore's Callback as a second base, made once per class (subclasses keep theirs)."""
    if cls not in _flavours:
        from mindspore.train import Callback

        if issubclass(cls, Callback):
            return cls
        _flavours[cls] = type(cls.__name__, (cls, Callback), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
    return _flavours[cls]
