"""The options a profiling session runs with, read strictly from MS_PROFILER_OPTIONS or keyword arguments.

Standard library only: the hook imports this before deciding whether to load anything heavy.
Every rejection names the key, the value received and what is accepted, because the person
reading it is looking at a CI log, not at our source.
"""
import json
import os
from dataclasses import dataclass, field, fields

ENV_VAR = "MS_PROFILER_OPTIONS"


class OptionsError(ValueError):
    """A setting we refuse; its message is the one line the user sees."""


def _bool(key, value):
    if isinstance(value, bool):
        return value
    raise OptionsError(f'key "{key}": got {value!r} ({type(value).__name__}); accepted: true or false (JSON booleans, not strings)')


def _int_in(low, high=None):
    def check(key, value):
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionsError(f'key "{key}": got {value!r} ({type(value).__name__}); accepted: an integer'
                               + (f" from {low}" if low is not None else "") + (f" to {high}" if high is not None else ""))
        if (low is not None and value < low) or (high is not None and value > high):
            raise OptionsError(f'key "{key}": got {value}; accepted: an integer from {low}' + (f" to {high}" if high is not None else " up"))
        return value
    return check


def _path(key, value):
    if not isinstance(value, str) or not value.strip():
        raise OptionsError(f'key "{key}": got {value!r}; accepted: a non-empty path string')
    return os.path.abspath(os.path.expanduser(value))


def _profile_framework(key, value):
    if value in (None, "all", "time"):
        return value
    raise OptionsError(f'key "{key}": got {value!r}; accepted: "all", "time" or null')


def _stop_step(key, value):
    if value in (None, -1):
        return None
    return _int_in(1)(key, value)


CAPTURE_ACCEPTED = ('accepted: {"every": N, "steps": M, "first": F} (periodic windows F..F+M-1, F+N.., ...) or '
                    '{"slow_step": X, "steps": M, "max_windows": K} (the M steps after a step slower than X times the running '
                    'median), each with optional "max_windows" and "max_trace_mb"')
CAPTURE_KEYS = {"every": ("every", "steps", "first", "max_windows", "max_trace_mb"),
                "slow_step": ("slow_step", "steps", "warmup", "max_windows", "max_trace_mb")}


def _capture(key, value):
    """A capture policy, with its defaults filled in (steps 3; first = every; warmup 5; max_windows 5 for slow steps)."""
    if value is None:
        return None
    if not isinstance(value, dict) or ("every" in value) == ("slow_step" in value):
        raise OptionsError(f'key "{key}": got {value!r}; {CAPTURE_ACCEPTED}')
    kind = "every" if "every" in value else "slow_step"
    unknown = [k for k in value if k not in CAPTURE_KEYS[kind]]
    if unknown:
        raise OptionsError(f'key "{key}": unknown key "{unknown[0]}" in a {kind} policy; accepted keys: {", ".join(CAPTURE_KEYS[kind])}')
    policy = {"steps": 3, "max_windows": None if kind == "every" else 5, "max_trace_mb": None}
    if kind == "every":
        policy["first"] = value.get("every")
    else:
        policy["warmup"] = 5
    policy.update(value)
    for name in ("every", "steps", "first", "max_windows", "warmup"):
        if name in policy and policy[name] is not None:
            _int_in(1)(f"{key}.{name}", policy[name])
    for name, low in (("slow_step", 1.0), ("max_trace_mb", 0.0)):
        number = policy.get(name)
        if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float)) or number <= low):
            raise OptionsError(f'key "{key}.{name}": got {number!r}; accepted: a number above {low:g}')
    if kind == "every" and policy["steps"] > policy["every"]:
        raise OptionsError(f'key "{key}.steps": got {policy["steps"]}, more than "every" {policy["every"]}; accepted: steps <= every (windows never overlap)')
    return policy


@dataclass
class Options:
    """One session's settings. Defaults are the seed guide's (Method 2), plus our step window keys."""

    start: bool = False
    output_path: str = field(default_factory=lambda: os.path.abspath("./data"))
    op_time: bool = True
    profile_memory: bool = False
    profile_communication: bool = False
    aicore_metrics: int = 0
    l2_cache: bool = False
    timeline_limit: int = 500
    data_process: bool = False
    parallel_strategy: bool = False
    profile_framework: object = None
    with_stack: bool = False
    record_shapes: bool = True
    start_step: int = 1
    stop_step: object = None
    cpu_sampling_interval: int = 1000
    capture: object = None  # a capture policy (periodic or slow-step windows) instead of start_step..stop_step
    # From the environment, not from the JSON object.
    fp_start: object = None
    bp_end: object = None
    rank_id: int = 0
    device_id: int = 0
    world_size: int = 1

    def to_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}


def not_applicable(options, device_target):
    """Settings accepted but without effect on this device: reported, never silently dropped."""
    if device_target == "Ascend":
        return []
    notes = []
    if options.get("l2_cache"):
        notes.append(f"l2_cache needs an Ascend device; not applicable on {device_target}")
    if options.get("aicore_metrics") not in (0, -1, None):
        notes.append(f"aicore_metrics={options['aicore_metrics']} needs an Ascend device; not applicable on {device_target}")
    return notes


CHECKS = {
    "start": _bool,
    "output_path": _path,
    "op_time": _bool,
    "profile_memory": _bool,
    "profile_communication": _bool,
    "aicore_metrics": _int_in(-1, 5),
    "l2_cache": _bool,
    "timeline_limit": _int_in(1),
    "data_process": _bool,
    "parallel_strategy": _bool,
    "profile_framework": _profile_framework,
    "with_stack": _bool,
    "record_shapes": _bool,
    "start_step": _int_in(1),
    "stop_step": _stop_step,
    "cpu_sampling_interval": _int_in(10, 60_000),
    "capture": _capture,
}
NEEDS_OP_TIME = ("profile_memory", "profile_communication", "with_stack")


def _closest(key):
    import difflib  # only on the error path

    match = difflib.get_close_matches(key, CHECKS, n=1, cutoff=0.5)
    return f' (did you mean "{match[0]}"?)' if match else ""


def from_mapping(values, environ=None):
    """Validate a dict of option keys (the variable's object or Profiler(**kwargs)) into Options."""
    if not isinstance(values, dict):
        raise OptionsError(f"expected a JSON object such as {{\"start\": true}}; got {type(values).__name__} {values!r}")
    unknown = [k for k in values if k not in CHECKS]
    if unknown:
        key = unknown[0]
        raise OptionsError(f'unknown key "{key}"{_closest(key)}; accepted keys: {", ".join(CHECKS)}')
    opts = Options()
    for key, value in values.items():
        setattr(opts, key, CHECKS[key](key, value))
    if not opts.op_time:
        for key in NEEDS_OP_TIME:
            if getattr(opts, key):
                raise OptionsError(f'key "{key}": true needs "op_time": true (the seed\'s rule); got "op_time": false')
    if opts.capture is not None and ("start_step" in values or "stop_step" in values):
        raise OptionsError('key "capture": the policy chooses its own windows; accepted: "capture" or "start_step"/"stop_step", not both')
    if opts.stop_step is not None and opts.stop_step < opts.start_step:
        raise OptionsError(f'key "stop_step": got {opts.stop_step}, before "start_step" {opts.start_step}; '
                           'accepted: stop_step >= start_step, or -1 for the end of training')
    _apply_environment(opts, os.environ if environ is None else environ)
    return opts


def _env_int(environ, *names):
    for name in names:
        raw = environ.get(name)
        if raw not in (None, ""):
            try:
                value = int(raw)
            except ValueError:
                raise OptionsError(f"environment variable {name}: got {raw!r}; accepted: a non-negative integer") from None
            if value < 0:
                raise OptionsError(f"environment variable {name}: got {raw!r}; accepted: a non-negative integer")
            return value
    return None


def _apply_environment(opts, environ):
    """Rank, device and FP/BP names come from the launcher's variables, as the seed and torchrun set them."""
    opts.rank_id = _env_int(environ, "RANK_ID", "RANK") or 0
    opts.device_id = _env_int(environ, "DEVICE_ID", "LOCAL_RANK") or 0
    opts.world_size = _env_int(environ, "RANK_SIZE", "WORLD_SIZE") or 1
    opts.fp_start = environ.get("PROFILING_FP_START") or None
    opts.bp_end = environ.get("PROFILING_BP_END") or None


def parse_text(text, environ=None):
    """Parse the variable's text; invalid JSON says where it broke."""
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        snippet = text[max(0, exc.pos - 15): exc.pos + 15]
        raise OptionsError(f"{ENV_VAR} is not valid JSON: {exc.msg} at column {exc.colno} (near {snippet!r})") from None
    return from_mapping(values, environ)
