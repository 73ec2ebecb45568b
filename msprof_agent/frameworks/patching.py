"""The wrapt wrappers an integration installs: each attribute is wrapped once, and unwrapped only
while it still holds our wrapper (someone may have wrapped it again on top of us).

wrapt does nothing against double wrapping, hence the marker attribute; arguments go positionally
because wrapt 2.0 renamed ``wrap_function_wrapper``'s first parameter. A method that runs several
times a step takes a plain function instead (``replace``): wrapt binds a new wrapper object at every
call of a wrapped method.
"""
import functools
from collections.abc import Callable
from typing import Any

import wrapt

from .. import log

# wrapt's wrapper: (the wrapped callable, the instance or None, args, kwargs) -> the call's result.
Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]


def after_call(action: Callable[[Any], object], what: str) -> Wrapper:
    """A wrapper that makes the call, then runs ``action(instance)``; an error in ACTION is reported
    once as WHAT failing, and the caller gets the call's result all the same."""
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        result = wrapped(*args, **kwargs)
        try:
            action(instance)
        except Exception as exc:
            log.report_error(what, exc)
        return result
    return wrapper


class _OurFunctionWrapper(wrapt.FunctionWrapper):
    """Our FunctionWrapper, marked so: wrapt does nothing against double wrapping."""

    _self_msprof = True


class Patches:
    def __init__(self) -> None:
        self._applied: list[tuple[Any, str, Any]] = []  # (owner, attribute, our wrapper or replacement)

    def wrap(self, owner: Any, attribute: str, wrapper: Wrapper) -> None:
        current = getattr(owner, attribute, None)
        if isinstance(vars(owner).get(attribute), staticmethod):  # wrapt binds the descriptor as a static method
            current = vars(owner)[attribute]
        if current is None:  # another framework version: say what is not measured, patch the rest
            log.warn_once(f"{getattr(owner, '__name__', owner)} has no {attribute}; that part of the run loop is not instrumented")
            return
        if isinstance(current, wrapt.FunctionWrapper) and getattr(current, "_self_msprof", False):
            return  # already ours (installed twice, or a module reloaded)
        wrapped = _OurFunctionWrapper(current, wrapper)
        setattr(owner, attribute, wrapped)
        self._applied.append((owner, attribute, wrapped))

    def replace(self, owner: Any, attribute: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Put ``make(method)``, a plain function taking the method's arguments, in place of a class's
        own method (once; ``remove_all`` puts the method back while ours is still there)."""
        current = vars(owner).get(attribute)
        if current is None:
            log.warn_once(f"{owner.__name__} has no {attribute}; that part of the run loop is not instrumented")
            return
        if getattr(current, "_msprof", False):
            return
        replacement = functools.wraps(current)(make(current))  # sets __wrapped__, which remove_all restores
        replacement.__dict__["_msprof"] = True  # the function's own attribute (typeshed's functools.wraps result declares none)
        setattr(owner, attribute, replacement)
        self._applied.append((owner, attribute, replacement))

    def __bool__(self) -> bool:
        return bool(self._applied)

    def remove_all(self) -> None:
        while self._applied:
            owner, attribute, wrapped = self._applied.pop()
            if vars(owner).get(attribute) is wrapped:
                setattr(owner, attribute, wrapped.__wrapped__)
