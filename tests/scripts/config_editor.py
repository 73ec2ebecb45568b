"""Edits of profiler_config.json at chosen steps, as a person would make them mid-run (test helper).

``--edit STEP:TEXT`` (repeatable) writes TEXT over the file at the end of step STEP: in place
(truncate and write, as ``echo > file`` does), so only the mtime and size tell the change.
"""
import os
import time


def parse_edits(items):
    edits = {}
    for item in items or ():
        step, text = item.split(":", 1)
        edits.setdefault(int(step), []).append(text)
    return edits


def apply_edits(edits, step, cfg_dir):
    for text in edits.get(step, ()):
        path = os.path.join(cfg_dir, "profiler_config.json")
        before = os.stat(path).st_mtime_ns
        with open(path, "w") as handle:
            handle.write(text)
        while os.stat(path).st_mtime_ns == before:  # coarse file clocks: make the edit visible
            time.sleep(0.002)
            os.utime(path)
        print(f"edited at step {step}", flush=True)
