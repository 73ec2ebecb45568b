"""The memory a growing job could still take: the machine's available memory and, where the process's
cgroup (v2 or v1, any level up to the root) has a limit, what that limit leaves. The advisor turns a
memory growth into the step it would exhaust the smaller of the two at (``analysis/diagnosis/verdict.py``).
"""
from __future__ import annotations

import os

import psutil

CGROUP_ROOT = "/sys/fs/cgroup"
UNLIMITED = 1 << 60  # v1 writes "no limit" as a page-rounded 2**63 - 1


def _read_int(path: str) -> int | None:
    try:
        with open(path, "rb") as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # v2 writes "max" for no limit


def _limited_cgroups() -> list[tuple[int, str]]:
    """(limit, usage file) of each cgroup of this process, itself and its ancestors, with a memory limit."""
    pairs: list[tuple[int, str]] = []
    try:
        with open("/proc/self/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return pairs
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one unified hierarchy
            base, limit, usage = CGROUP_ROOT, "memory.max", "memory.current"
        elif "memory" in controllers.split(","):
            base, limit, usage = os.path.join(CGROUP_ROOT, "memory"), "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):
            folder = os.path.join(base, *parts[:depth])
            value = _read_int(os.path.join(folder, limit))
            if value is not None and value < UNLIMITED:
                pairs.append((value, os.path.join(folder, usage)))
    return pairs


def _available() -> int:
    """The machine's available memory: /proc/meminfo's MemAvailable, the one line psutil's ``virtual_memory``
    reads among the forty it parses (a sample's every file read lets go of the GIL the training thread waits
    to have back); psutil's where that line is missing (old kernels, not Linux)."""
    try:
        with open("/proc/meminfo", "rb") as handle:
            text = handle.read()
        return int(text[text.index(b"MemAvailable:") + 13:].split(None, 1)[0]) * 1024
    except (OSError, ValueError):
        return int(psutil.virtual_memory().available)


class MemoryLeft:
    """``read()``: (the machine's available bytes, the tightest cgroup limit less its usage or None where no
    cgroup limits this process); the cgroups and their limits are read once (a job's limit does not move)."""

    def __init__(self) -> None:
        self._cgroups = _limited_cgroups()

    def read(self) -> tuple[int, int | None]:
        room = [limit - usage for limit, usage in ((limit, _read_int(path)) for limit, path in self._cgroups) if usage is not None]
        return _available(), max(min(room), 0) if room else None
