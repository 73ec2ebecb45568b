"""Host work injected into the step-boundary test loops, and the loop's own timing of it."""
import json
import time


class InjectedWork:
    def __init__(self):
        self.steps = []  # (start, end) ns of each step as the script sees it: previous step's end to this one's
        self.sleeps = []  # per step, how long each injected sleep really took (ms), by where it sat
        self._last = time.time_ns()

    def sleep(self, where, ms):
        """Sleep, and note how long it really took (a loaded machine wakes a sleeper late), by the step
        it belongs to: ``after`` by the step it follows."""
        start = time.perf_counter()
        time.sleep(ms / 1000)
        step = len(self.steps) - (where == "after")
        self.sleeps.extend({} for _ in range(step + 1 - len(self.sleeps)))
        self.sleeps[step][where] = self.sleeps[step].get(where, 0.0) + (time.perf_counter() - start) * 1000

    def step_done(self):
        now = time.time_ns()
        self.steps.append((self._last, now))
        self._last = now

    def report(self):
        print("script_steps " + json.dumps(self.steps), flush=True)
        print("script_sleeps " + json.dumps(self.sleeps), flush=True)
