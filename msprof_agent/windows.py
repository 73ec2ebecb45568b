"""The window registry: a session's collections (the run and its windows), their folders and states.

A *collection* is one output folder with a raw store of its own:

- the *run* is ``output_path/profiler``: it receives every step record (step timing is always on)
  and, on the variable's path, the ops of the ``start_step..stop_step`` window;
- a *window* (dynamic monitor, capture policy) is ``output_path/window_{start}_{stop}/profiler``,
  holding the records of its steps only; the run's summary lists it once it is analysed.

A collection goes IDLE -> RECORDING -> STOPPED (-> RECORDING again on a new start) -> ANALYSED, and
one records at a time (``owner``). The Profiler API, the dynamic monitor and the capture policies act
on collections through these methods, never by setting their fields.
"""
import os
import shutil
import time
from typing import TYPE_CHECKING, Any

from . import records
from .contract.names import RunFolders, run_folders, window_name
from .options import PROCESS_FIELDS, Options
from .store import EventWriter

if TYPE_CHECKING:
    from .contract.summary import Summary

IDLE, RECORDING, STOPPED, ANALYSED = "idle", "recording", "stopped", "analysed"
SYNC, ASYNC = "sync", "async"
ANALYSE_MODES = (SYNC, ASYNC, None)  # None: raw data only, for ``msprof-agent analyse``

Record = dict[str, Any]


def window_folder(output_path: str, start: int, stop: int) -> str:
    return os.path.join(output_path, window_name(start, stop))


def with_process_keys(options: Options, process: Options) -> Options:
    """OPTIONS (a window's settings) with the rank, device and FP/BP names of PROCESS."""
    for key in PROCESS_FIELDS:  # who this process is: a window's settings never change it
        setattr(options, key, getattr(process, key))
    return options


class Collection:
    """One output folder: its raw store, the intervals it recorded, and how it is analysed."""

    def __init__(self, meta: Record, options: Options, folders: RunFolders, origin: str,
                 analyse_mode: str | None = SYNC, info: Record | None = None) -> None:
        self.options = options
        self.folders = folders
        self.profiler_dir = folders.profiler
        self.folder = folders.folder  # the folder the collection owns, holding ``profiler_dir``
        self.origin = origin
        self.analyse_mode = analyse_mode
        self.state = IDLE
        self.explicit = False  # calls drive the window (Profiler, capture policy), not start_step/stop_step
        self.intervals: list[tuple[int, int | None]] = []  # (start_ns, stop_ns or None) per recording
        self.summary: Summary | None = None
        self.info: Record = dict(info or {})  # what the opener wants listed (trigger, steps)
        self.collected: set[int] = set()  # numbers of the steps recorded here
        self.first_step = 0  # no step numbered below it belongs here (see ``contains``)
        self.writer = EventWriter(self.profiler_dir, options.rank_id, time.time_ns())
        self.writer.add({**meta, records.KIND: records.META, "origin": origin, "options": options.to_dict()})

    @property
    def analysed(self) -> bool:
        return self.state == ANALYSED

    @property
    def recorded(self) -> bool:
        """True once recording was ever on."""
        return bool(self.intervals)

    def claim(self) -> None:
        """Calls (Profiler start/stop, a capture policy) drive this collection; start_step/stop_step no longer do."""
        self.explicit = True

    def skip_steps_before(self, n: int) -> None:
        """Steps numbered below N are not this collection's, whenever recording began."""
        self.first_step = n

    def analyse_as(self, mode: str | None) -> None:
        if mode not in ANALYSE_MODES:
            raise ValueError(f"analyse mode: got {mode!r}; accepted: {SYNC!r}, {ASYNC!r} or None")
        self.analyse_mode = mode

    def contains(self, step: Record) -> bool:
        """True when recording was on during the step, between the start of its work and its end.

        A start anywhere in the step (even after its work, before it closes) takes the step whole: its
        timing, and its ops from the start on. A stop keeps the steps whose work began before it, so a stop
        after step m's work, in the host time that opens step m+1, leaves m+1 out. The step's work begins
        at its forward start where the integration marks one, else at its first data fetch, else at its
        opening; an open step (no end yet) reaches to now. Steps numbered below ``first_step`` never belong
        (a window asked for from the next step while the framework still holds the current one open)."""
        if not self.intervals or step["n"] < self.first_step:  # never recorded: the run between windows
            return False
        waits = step.get("waits")
        work = step.get("fp") or (waits[0][0] if waits else step["start"])
        end = step.get("end")
        return any((end is None or start < end) and (stop is None or work < stop) for start, stop in self.intervals)

    def listing(self) -> Record:
        """The run summary's entry for this window."""
        return dict(self.info, dir=self.folder, analyse_mode=self.analyse_mode, steps=sorted(self.collected))


class Windows:
    """The run, the windows opened beside it, which one records now, and which wait to be analysed."""

    def __init__(self, meta: Record, options: Options, origin: str) -> None:
        self.meta = meta  # the session's, shared: every new collection's store starts with it
        self.run = self._new_run(options, origin)
        self.owner: Collection | None = None
        self.awaiting: list[Collection] = []  # stopped, analysed once the open step they hold closes
        self.listed: list[Record] = []  # windows finished, for the run's summary

    def _new_run(self, options: Options, origin: str) -> Collection:
        return Collection(self.meta, options, run_folders(options.output_path), origin)

    def open_run(self, options: Options, origin: str) -> Collection:
        """A new run in a new folder (the API after an earlier run was analysed, or on a dynamic-only session)."""
        if not self.run.analysed:
            self.run.state = ANALYSED
            self.run.writer.close()
        self.run = self._new_run(options, origin)
        return self.run

    def open_window(self, output_path: str, start: int, stop: int, options: Options, origin: str,
                    analyse_mode: str | None, info: Record) -> Collection:
        """A collection of its own for steps START..STOP, in ``output_path/window_{start}_{stop}``."""
        folders = run_folders(window_folder(output_path, start, stop))
        return Collection(self.meta, options, folders, origin, analyse_mode, dict(info, start=start, stop=stop))

    def live(self) -> list[Collection]:
        """The collections a step record goes to: the run, the recording one, those awaiting analysis."""
        if self.owner is None and not self.awaiting:  # step timing only: the common case, once per step
            return [self.run] if not self.run.analysed else []
        out: list[Collection] = []
        for c in [self.run, self.owner] + self.awaiting:
            if c is not None and not c.analysed and c not in out:
                out.append(c)
        return out

    # -- the variable's step window on the run ----------------------------------------------------
    # Both run at every step: cheap tests first.
    def step_window_opens(self, n: int) -> bool:
        """True when step N opens the run's ``start_step..stop_step`` (nothing else records, no call drives it)."""
        run = self.run
        options = run.options
        if n < options.start_step or run.state != IDLE or run.explicit or not options.start or self.owner is not None:
            return False  # the steps before a later start_step: one comparison
        stop = options.stop_step  # None: the end of training
        return not isinstance(stop, int) or n <= stop

    def step_window_ends(self, n: int) -> bool:
        """True when closing step N ends the run's ``start_step..stop_step``."""
        run = self.run
        if self.owner is not run or run.explicit:
            return False
        stop = run.options.stop_step
        return isinstance(stop, int) and n >= stop

    # -- recording ----------------------------------------------------------------------------------
    def begin(self, c: Collection, at_ns: int, explicit: bool) -> None:
        """C records from AT_NS (the caller checked that nothing else records)."""
        c.explicit = c.explicit or explicit
        c.writer.settle()  # before the device session's profiler writes into the folder
        c.state = RECORDING
        c.intervals.append((at_ns, None))
        self.owner = c

    def end(self, at_ns: int) -> Collection | None:
        """The recording collection stops at AT_NS; returns it."""
        c, self.owner = self.owner, None
        if c is not None:
            c.intervals[-1] = (c.intervals[-1][0], at_ns)
            c.state = STOPPED
        return c

    def await_open_step(self, c: Collection) -> None:
        if c not in self.awaiting:
            self.awaiting.append(c)

    def take_awaiting(self) -> list[Collection]:
        out, self.awaiting = self.awaiting, []
        return out

    # -- the end of a collection --------------------------------------------------------------------
    def finish(self, c: Collection, end: Record) -> bool:
        """Close C's store with its END record; False (and nothing written) when it never recorded and
        has nothing to list: its store is dropped."""
        c.state = ANALYSED
        if not c.recorded and not (c is self.run and self.listed):
            c.writer.abandon()
            return False
        c.writer.add(end)
        c.writer.close()
        if c is not self.run:
            entry = c.listing()
            self.listed.append(entry)
            self.run.writer.add({**entry, records.KIND: records.WINDOW, "event": "collected"})  # the run's summary lists it, offline too
        return True

    def abandon(self, c: Collection) -> None:
        """Drop a window that never started (its store was never written)."""
        c.state = ANALYSED
        c.writer.abandon()

    def discard(self, c: Collection) -> None:
        """Drop a stopped window and its folder (a periodic window the job ended inside)."""
        c.state = ANALYSED
        c.writer.close()
        shutil.rmtree(c.folder, ignore_errors=True)

    def abandon_all(self) -> None:
        """A fork child: none of the inherited stores may be written."""
        for c in [self.run, self.owner] + self.awaiting:
            if c is not None:
                c.writer.abandon()
