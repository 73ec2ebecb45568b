"""MindSpore's ``Profiler`` API (the guide's Method 1): ``Profiler`` in the training script, on the same session as the variable.

``Profiler(start_profile=True, output_path="./data", **options)`` takes the variable's option keys
(validated the same way; a bad one raises ``ValueError`` here, since the user called us). Without the
hook it creates the process's session and installs the framework integrations itself; when the
variable already started one, it says so and drives that session's window instead of starting a
second collection. ``start()`` / ``stop()`` act at once; ``start()`` during step k collects step k whole (its ops from the
start on), ``stop()`` after step m's work collects step m, and ``analyse()`` waits for a collected step
that is still open to close.
"""
from __future__ import annotations

from . import environment, log, online_analysis
from . import session as S
from .bootstrap import output_path_error
from .options import OptionsError, from_mapping
from .windows import ASYNC, SYNC

TYPE_CHECKING = False  # typing is not imported at run time
if TYPE_CHECKING:
    from typing import Any, Literal

    from .contract.summary import Summary


class Profiler:
    def __init__(self, start_profile: bool = True, output_path: str = "./data", **options: Any) -> None:
        if "capture" in options:
            raise OptionsError(f'key "capture": a capture policy is set in {environment.OPTIONS} (zero-code); '
                               "the Profiler API chooses its window with start() and stop()")
        self.options = from_mapping(dict(options, output_path=output_path), source="Profiler()")
        self._session = self._attach_session()
        self._run = self._session.run
        self._run.claim()
        if start_profile:
            self.start()

    def _writable_output(self) -> None:
        problem = output_path_error(self.options.output_path, source=None)
        if problem:
            raise OptionsError(problem)

    def _attach_session(self) -> S.Session:
        current = S.current()
        if current is None:
            self._writable_output()
            from .frameworks import install_post_import_hooks

            current = S.start(self.options, origin="api", analyse=online_analysis.analyse)
            install_post_import_hooks(current)  # fires at once for frameworks imported already
            return current
        run = current.run
        if run.analysed or (run.origin == "dynamic" and not run.recorded):
            self._writable_output()
            current.windows.open_run(self.options, "api")
        elif run.origin == "env" and not run.explicit:
            where = "" if run.options.output_path == self.options.output_path else \
                f" (output stays in {run.options.output_path}, not {self.options.output_path})"
            log.say(f"Profiler(): {environment.OPTIONS} already started a session; this Profiler takes over its "
                    f"start/stop/analyse instead of collecting twice{where}")
            if current.owner is run:
                current.stop_recording()
        return current

    def start(self) -> None:
        """Start collecting now; the step in progress counts whole."""
        if not self._session.start_recording(self._run, explicit=True):
            other = self._session.owner
            log.warn_once("Profiler.start(): " + (f"a {other.origin} window is recording; this start is ignored" if other
                                                   else "this Profiler has been analysed already; create a new one"))

    def stop(self) -> None:
        if self._session.owner is self._run:
            self._session.stop_recording()

    def analyse(self, mode: str = "sync") -> Summary | None:
        """Stop and analyse into ``output_path/profiler``: "sync" returns the summary (None while a collected
        step is still open), "async" analyses in a separate process."""
        if mode not in (SYNC, ASYNC):
            raise ValueError(f'analyse(mode=...): got {mode!r}; accepted: "sync" or "async"')
        return self._session.analyse(self._run, reason="analyse", mode=mode)

    @staticmethod
    def offline_analyse(path: str, pretty: bool = False, step_list: list[int] | None = None, data_simplification: bool = True) -> list[Summary]:
        from .pipeline import offline_analyse

        return offline_analyse(path, pretty=pretty, step_list=step_list, data_simplification=data_simplification)

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, *exc_info: object) -> Literal[False]:
        self.stop()
        self.analyse()
        return False
