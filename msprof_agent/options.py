"""The options a profiling session runs with, read strictly from MS_PROFILER_OPTIONS or keyword arguments.

Standard library only: the hook imports this before deciding whether to load anything heavy.
Every rejection names the key, the value received and what is accepted, because the person
reading it is looking at a CI log, not at our source.

Two generations of keys are accepted, alone or mixed: the MindSpore Profiler guide's (``op_time``,
``aicore_metrics``, ``profile_framework``, ``timeline_limit``, ...) and MindSpore 2.5+'s
(``activities``, ``profiler_level``, ``aic_metrics``, ``host_sys``, ``mstx``, ``export_type``, ...).
Both are read through one table, ``KEYS``: each key's check, its documented default, and the
features it asks for **in our meanings**:

==================  ==========================================  =======================================
feature (here)      guide's keys                                MindSpore 2.5+ keys
==================  ==========================================  =======================================
ops (op time)       op_time                                     activities (any of CPU/NPU/GPU; [] off),
                                                                profiler_level LevelNone off, Level0-2 on
communication       profile_communication                       profiler_level Level1, Level2
shapes              record_shapes                               record_shapes; profiler_level Level1, Level2
memory              profile_memory                              profile_memory; profiler_level Level2
stack sampler       with_stack, profile_framework "all"/"time"  with_stack
data pipeline       data_process                                data_process
AI Core metrics     aicore_metrics -1..5 (Ascend only)          aic_metrics (Ascend only)
host samplers       (cpu and mem always)                        host_sys cpu, mem (always on), disk, network
user marks/ranges   -                                           mstx, mstx_domain_include / _exclude
export              (text)                                      export_type text, db
==================  ==========================================  =======================================

A key written at its documented default asks for nothing (so a copied block of defaults never
fights a real setting); a feature nobody asks keeps our default. Two keys asking one feature
differently (``op_time: false`` with ``activities: ["CPU"]``) is a contradiction: one line and
profiling off. Combinations MindSpore resets with a warning (``_handle_compatibility``) are reset
here the same way, with one line each.
"""
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

from . import environment, log

Check = Callable[[str, Any], Any]


class OptionsError(ValueError):
    """A setting we refuse; its message is the one line the user sees."""


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise OptionsError(f'key "{key}": got {value!r} ({type(value).__name__}); accepted: true or false (JSON booleans, not strings)')


def _int_in(low: int | None, high: int | None = None) -> Check:
    def check(key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionsError(f'key "{key}": got {value!r} ({type(value).__name__}); accepted: an integer'
                               + (f" from {low}" if low is not None else "") + (f" to {high}" if high is not None else ""))
        if (low is not None and value < low) or (high is not None and value > high):
            raise OptionsError(f'key "{key}": got {value}; accepted: an integer from {low}' + (f" to {high}" if high is not None else " up"))
        return value
    return check


def _choice(allowed: tuple[Any, ...]) -> Check:
    """One of ALLOWED exactly (True is not 1: booleans are refused where integers are expected)."""
    def check(key: str, value: Any) -> Any:
        if isinstance(value, bool) or value not in allowed:
            raise OptionsError(f'key "{key}": got {value!r}; accepted: ' + ", ".join(json.dumps(a) for a in allowed))
        return value
    return check


def _list_of(allowed: tuple[str, ...] | None) -> Check:
    """A JSON list of strings from ALLOWED (any non-empty string if None), duplicates dropped, order kept."""
    def check(key: str, value: Any) -> list[str]:
        what = ("strings from " + ", ".join(json.dumps(a) for a in allowed)) if allowed else "non-empty strings"
        if not isinstance(value, list) or not all(isinstance(v, str) and v and (allowed is None or v in allowed) for v in value):
            raise OptionsError(f'key "{key}": got {value!r}; accepted: a list of {what}')
        return list(dict.fromkeys(value))
    return check


def _coded(names: Check, codes: Mapping[int, Any]) -> Check:
    """NAMES' form, or (in the dynamic config, as MindSpore reads it there) one of CODES' integers."""
    def check(key: str, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            if value in codes:
                return codes[value]
            raise OptionsError(f'key "{key}": got {value}; accepted: ' + ", ".join(f"{c} ({json.dumps(v)})" for c, v in codes.items())
                               + " or the names")
        return names(key, value)
    return check


def _path(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise OptionsError(f'key "{key}": got {value!r}; accepted: a non-empty path string')
    return os.path.abspath(os.path.expanduser(value))


def _profile_framework(key: str, value: Any) -> str | None:
    if value in (None, "all", "time"):
        return value  # type: ignore[no-any-return]
    raise OptionsError(f'key "{key}": got {value!r}; accepted: "all", "time" or null')


def _stop_step(key: str, value: Any) -> int | None:
    if value in (None, -1):
        return None
    return _int_in(1)(key, value)  # type: ignore[no-any-return]


CAPTURE_ACCEPTED = ('accepted: {"every": N, "steps": M, "first": F} (periodic windows F..F+M-1, F+N.., ...) or '
                    '{"slow_step": X, "steps": M, "max_windows": K} (the M steps after a step slower than X times the running '
                    'median), each with optional "max_windows" and "max_trace_mb"')
CAPTURE_KEYS = {"every": ("every", "steps", "first", "max_windows", "max_trace_mb"),
                "slow_step": ("slow_step", "steps", "warmup", "max_windows", "max_trace_mb")}


def _capture(key: str, value: Any) -> dict[str, Any] | None:
    """A capture policy, with its defaults filled in (steps 3; first = every; warmup 5; max_windows 5 for slow steps)."""
    if value is None:
        return None
    if not isinstance(value, dict) or ("every" in value) == ("slow_step" in value):
        raise OptionsError(f'key "{key}": got {value!r}; {CAPTURE_ACCEPTED}')
    kind = "every" if "every" in value else "slow_step"
    unknown = [k for k in value if k not in CAPTURE_KEYS[kind]]
    if unknown:
        raise OptionsError(f'key "{key}": unknown key "{unknown[0]}" in a {kind} policy; accepted keys: {", ".join(CAPTURE_KEYS[kind])}')
    policy: dict[str, Any] = {"steps": 3, "max_windows": None if kind == "every" else 5, "max_trace_mb": None}
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


# MindSpore's enum values (mindspore/profiler/common/constant.py) and the dynamic config's integer codes
# (mindspore/profiler/dynamic_profile/dynamic_profiler_config_context.py).
PROFILER_LEVELS = ("LevelNone", "Level0", "Level1", "Level2")
ACTIVITIES = ("CPU", "NPU", "GPU")
AIC_METRICS = ("None", "PipeUtilization", "ArithmeticUtilization", "Memory", "MemoryL0", "MemoryUB",
               "ResourceConflictRatio", "L2Cache", "MemoryAccess")
HOST_SYS = ("cpu", "mem", "disk", "network", "osrt")
EXPORT_TYPES = ("text", "db")
LEVEL_CODES = {-1: "LevelNone", 0: "Level0", 1: "Level1", 2: "Level2"}
AIC_CODES = dict(enumerate(AIC_METRICS[1:]))  # 0 = PipeUtilization ... 7 = MemoryAccess
ACTIVITY_CODES = {0: ["CPU", "NPU"], 1: ["CPU"], 2: ["NPU"]}
EXPORT_CODES = {0: ["text"], 1: ["db"], 2: ["text", "db"]}
GUIDE_AICORE_NAMES = {-1: "None", **dict(enumerate(AIC_METRICS[1:7]))}  # the guide's aicore_metrics -1..5


def _aic_metrics(key: str, value: Any) -> str:
    """MindSpore's names; "AiCoreNone" (the enum member's name, used in MindSpore's dynamic config) is "None"."""
    return str(_choice(AIC_METRICS + ("AiCoreNone",))(key, value)).replace("AiCoreNone", "None")


def _level_asks(level: str) -> dict[str, Any]:
    if level == "LevelNone":
        return {"ops": False}
    more = {"communication": True, "shapes": True} if level in ("Level1", "Level2") else {}
    return dict({"ops": True}, **more, **({"memory": True} if level == "Level2" else {}))


class Key(NamedTuple):
    """One accepted key: its check (variable form), its form with integer codes (dynamic config), its
    documented default (asks for nothing), and the features its value asks for."""

    check: Check
    default: Any
    asks: Callable[[Any], dict[str, Any]] = lambda value: {}
    coded: Check | None = None


def _feature(name: str) -> Callable[[Any], dict[str, Any]]:
    return lambda value: {name: value}


KEYS: dict[str, Key] = {
    # both generations
    "start": Key(_bool, False),
    "output_path": Key(_path, None),
    "profile_memory": Key(_bool, False, _feature("memory")),
    "l2_cache": Key(_bool, False),
    "data_process": Key(_bool, False, _feature("data_pipeline")),
    "parallel_strategy": Key(_bool, False),
    "with_stack": Key(_bool, False, lambda on: {"stacks": True} if on else {}),
    "record_shapes": Key(_bool, None, _feature("shapes")),  # the guide's default true, MindSpore's false: both ask
    # the MindSpore Profiler guide's
    "op_time": Key(_bool, True, _feature("ops")),
    "profile_communication": Key(_bool, False, _feature("communication")),
    "aicore_metrics": Key(_int_in(-1, 5), 0, lambda code: {"aic_metrics": GUIDE_AICORE_NAMES[code]}),
    "timeline_limit": Key(_int_in(1), 500),
    "profile_framework": Key(_profile_framework, None, lambda on: {"stacks": True} if on else {}),
    # MindSpore 2.5+'s
    "profiler_level": Key(_choice(PROFILER_LEVELS), "Level0", _level_asks, _coded(_choice(PROFILER_LEVELS), LEVEL_CODES)),
    "activities": Key(_list_of(ACTIVITIES), ["CPU", "NPU"], lambda acts: {"ops": bool(acts)},
                      _coded(_list_of(ACTIVITIES), ACTIVITY_CODES)),
    "aic_metrics": Key(_aic_metrics, "None", _feature("aic_metrics"), _coded(_aic_metrics, AIC_CODES)),
    "start_profile": Key(_bool, True),
    "hbm_ddr": Key(_bool, False),
    "pcie": Key(_bool, False),
    "sys_io": Key(_bool, False),
    "sys_interconnection": Key(_bool, False),
    "host_sys": Key(_list_of(HOST_SYS), []),
    "sync_enable": Key(_bool, True),
    "data_simplification": Key(_bool, True),
    "export_type": Key(_list_of(EXPORT_TYPES), ["text"], coded=_coded(_list_of(EXPORT_TYPES), EXPORT_CODES)),
    "mstx": Key(_bool, False),
    "mstx_domain_include": Key(_list_of(None), []),
    "mstx_domain_exclude": Key(_list_of(None), []),
    # ours
    "start_step": Key(_int_in(1), 1),
    "stop_step": Key(_stop_step, None),
    "cpu_sampling_interval": Key(_int_in(10, 60_000), 1000),
    "capture": Key(_capture, None),
}
# Where each feature lands in Options (the fields the collectors read).
FEATURE_FIELDS = {"ops": "op_time", "communication": "profile_communication", "shapes": "record_shapes",
                  "memory": "profile_memory", "data_pipeline": "data_process", "aic_metrics": "aic_metrics"}
NEEDS_OP_TIME = ("profile_memory", "profile_communication", "with_stack")
ASCEND_ONLY = ("l2_cache", "hbm_ddr", "pcie", "sys_io", "sys_interconnection")
# MindSpore 2.5+'s keys kept as written; their effect lands in the fields of FEATURE_FIELDS.
AS_WRITTEN = ("profiler_level", "activities")
# Keys accepted for MindSpore's sake that change nothing here, and why (noted when written).
WITHOUT_EFFECT = {
    "sync_enable": "timestamps here are the host clock's; there is no device clock to synchronise",
    "data_simplification": "msprof-agent keeps no intermediate device files to simplify",
    "start_profile": 'in the variable "start" decides; start_profile is Profiler()\'s argument',
}


@dataclass
class Options:
    """One session's settings: a field per key of ``KEYS`` (a unit test holds them equal), plus ``PROCESS_FIELDS``
    and ``keys_given``. Defaults are the MindSpore Profiler guide's (Method 2), plus our step window keys."""

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
    profile_framework: str | None = None
    with_stack: bool = False
    record_shapes: bool = True
    start_step: int = 1
    stop_step: int | None = None
    cpu_sampling_interval: int = 1000
    capture: dict[str, Any] | None = None  # a capture policy (periodic or slow-step windows) instead of start_step..stop_step
    # MindSpore 2.5+'s keys, as written (None: not written; the features above carry their effect).
    profiler_level: str | None = None
    activities: list[str] | None = None
    aic_metrics: str | None = None
    start_profile: bool = True
    hbm_ddr: bool = False
    pcie: bool = False
    sys_io: bool = False
    sys_interconnection: bool = False
    host_sys: list[str] = field(default_factory=list)  # cpu and mem are sampled always; disk, network on request
    sync_enable: bool = True
    data_simplification: bool = True
    export_type: list[str] = field(default_factory=lambda: ["text"])
    mstx: bool = False
    mstx_domain_include: list[str] = field(default_factory=list)
    mstx_domain_exclude: list[str] = field(default_factory=list)
    keys_given: list[str] = field(default_factory=list)  # what the user wrote, for the not-applicable notes
    # From the environment, not from the JSON object.
    fp_start: str | None = None
    bp_end: str | None = None
    rank_id: int = 0
    device_id: int = 0
    world_size: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def in_effect(self) -> dict[str, Any]:
        """The settings this run acts on (what ``doctor`` shows): MindSpore 2.5+'s keys as written and the
        keys without effect left out (the feature fields carry what they ask), ``export_type`` as the exports written."""
        left_out = set(AS_WRITTEN) | set(WITHOUT_EFFECT) | {WRITTEN_FIELD}
        settings = {key: value for key, value in self.to_dict().items() if key not in left_out}
        settings["export_type"] = self.exports()
        return settings

    def exports(self) -> list[str]:
        """The exports this run writes: ``export_type`` when the user wrote it; its documented default asks for none
        here (a second timeline on every run costs disk and time)."""
        return list(self.export_type) if "export_type" in self.keys_given else []

    @classmethod
    def from_record(cls, meta: Mapping[str, Any]) -> "Options":
        """The options a raw store's ``meta`` record holds (``to_dict`` of the checked ones the window ran
        with); the analysis and exports read these, never the dict with defaults of their own."""
        recorded = meta.get("options") or {}
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in recorded.items() if key in known})


# Options' fields beside KEYS: who this process is (the launcher's variables) and what the user wrote.
PROCESS_FIELDS = ("rank_id", "device_id", "world_size", "fp_start", "bp_end")
WRITTEN_FIELD = "keys_given"


def not_applicable(options: Options, device_target: str) -> list[str]:
    """Settings accepted but without effect on this run: reported, never silently dropped."""
    notes = []
    given = options.keys_given
    if device_target != "Ascend":
        for key in ASCEND_ONLY:
            if getattr(options, key):
                notes.append(f"{key} needs an Ascend device; not applicable on {device_target}")
        if options.aic_metrics not in (None, "None"):  # aicore_metrics lands here too
            notes.append(f"AI Core metrics {options.aic_metrics} need an Ascend device; not applicable on {device_target}")
    for activity, target in (("NPU", "Ascend"), ("GPU", "GPU")):
        if "activities" in given and activity in (options.activities or []) and device_target != target:
            notes.append(f"activities {activity}: no {target} device in this run; not applicable on {device_target}")
    if "osrt" in options.host_sys:
        notes.append("host_sys osrt (OS runtime API tracing) needs msprof on Ascend; not collected by msprof-agent")
    notes += [f"{key}: {why}; not applicable" for key, why in WITHOUT_EFFECT.items() if key in given]
    return notes


def _closest(key: str) -> str:
    import difflib  # only on the error path

    match = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.5)
    return f' (did you mean "{match[0]}"?)' if match else ""


def unknown_key_message(key: str) -> str:
    return f'unknown key "{key}"{_closest(key)}; accepted keys: {", ".join(KEYS)}'


def _reset_as_mindspore_does(values: dict[str, Any], source: str) -> None:
    """MindSpore's ``_handle_compatibility`` resets, with one line each (VALUES are checked ones)."""
    def reset(key: str, to: Any, because: str) -> None:
        log.warn_once(f'{source}: key "{key}": {because}; reset to {json.dumps(to)}, as MindSpore does')
        values[key] = to

    if values.get("profiler_level") == "LevelNone" and not values.get("mstx"):
        reset("profiler_level", "Level0", '"LevelNone" collects only mstx marks and needs "mstx": true')
    if not values.get("mstx"):
        for key in ("mstx_domain_include", "mstx_domain_exclude"):
            if values.get(key):
                reset(key, [], 'domain filters need "mstx": true')
    if values.get("mstx_domain_include") and values.get("mstx_domain_exclude"):
        reset("mstx_domain_exclude", [], '"mstx_domain_include" and "mstx_domain_exclude" cannot be set together')
    if values.get("record_shapes") and "activities" in values and "CPU" not in values["activities"]:
        reset("record_shapes", False, 'shapes are recorded with the host ops and need "CPU" in "activities"')


def _features(values: Mapping[str, Any]) -> dict[str, Any]:
    """What VALUES ask for in our meanings; a feature asked two ways is the one contradiction we refuse."""
    asked: dict[str, tuple[str, Any, Any]] = {}
    for key, value in values.items():
        spec = KEYS[key]
        if value == spec.default:
            continue
        for feature, wish in spec.asks(value).items():
            if feature in asked and asked[feature][2] != wish:
                other, other_value, _ = asked[feature]
                raise OptionsError(f'keys "{other}": {json.dumps(other_value)} and "{key}": {json.dumps(value)} ask for '
                                   f'{feature} both {json.dumps(asked[feature][2])} and {json.dumps(wish)}; accepted: '
                                   f'keys that agree (see the Options table in the README)')
            asked[feature] = (key, value, wish)
    return {feature: wish for feature, (_, _, wish) in asked.items()}


def from_mapping(values: Any, environ: Mapping[str, str] | None = None, codes: bool = False,
                 source: str = environment.OPTIONS) -> Options:
    """Validate a dict of option keys (the variable's object, Profiler(**kwargs), or a dynamic config's
    keys with CODES: MindSpore's integer forms allowed) into Options."""
    if not isinstance(values, dict):
        raise OptionsError(f"expected a JSON object such as {{\"start\": true}}; got {type(values).__name__} {values!r}")
    unknown = [k for k in values if k not in KEYS]
    if unknown:
        raise OptionsError(unknown_key_message(unknown[0]))
    checked = {key: ((codes and KEYS[key].coded) or KEYS[key].check)(key, value) for key, value in values.items()}
    _reset_as_mindspore_does(checked, source)
    opts = Options()
    for key, value in checked.items():
        setattr(opts, key, value)
    for feature, wish in _features(checked).items():
        if feature in FEATURE_FIELDS:  # the stack sampler reads with_stack / profile_framework themselves
            setattr(opts, FEATURE_FIELDS[feature], wish)
    opts.keys_given = list(values)
    if not opts.op_time:
        for key in NEEDS_OP_TIME:
            if getattr(opts, key):
                raise OptionsError(f'key "{key}": true needs "op_time": true (the MindSpore Profiler guide\'s rule); got "op_time": false')
    if opts.capture is not None and ("start_step" in values or "stop_step" in values):
        raise OptionsError('key "capture": the policy chooses its own windows; accepted: "capture" or "start_step"/"stop_step", not both')
    if opts.stop_step is not None and opts.stop_step < opts.start_step:
        raise OptionsError(f'key "stop_step": got {opts.stop_step}, before "start_step" {opts.start_step}; '
                           "accepted: stop_step >= start_step, or -1 for the end of training")
    _apply_environment(opts, os.environ if environ is None else environ)
    return opts


def _env_int(environ: Mapping[str, str], *names: str) -> int | None:
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


def _apply_environment(opts: Options, environ: Mapping[str, str]) -> None:
    """Rank, device and FP/BP names come from the launcher's variables, as MindSpore's launchers and torchrun set them."""
    opts.rank_id = _env_int(environ, *environment.RANK) or 0
    opts.device_id = _env_int(environ, *environment.DEVICE) or 0
    opts.world_size = _env_int(environ, *environment.WORLD_SIZE) or 1
    opts.fp_start = environ.get(environment.FP_START) or None
    opts.bp_end = environ.get(environment.BP_END) or None


def parse_text(text: str, environ: Mapping[str, str] | None = None) -> Options:
    """Parse the variable's text; invalid JSON says where it broke."""
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        snippet = text[max(0, exc.pos - 15): exc.pos + 15]
        raise OptionsError(f"{environment.OPTIONS} is not valid JSON: {exc.msg} at column {exc.colno} (near {snippet!r})") from None
    return from_mapping(values, environ)
