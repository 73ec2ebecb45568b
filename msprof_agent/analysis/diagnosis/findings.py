"""What a finding is, the thresholds the rules judge by, and the one way to make a finding (``make_finding``).

A finding is a dict: ``id``, ``category`` (one of ``CATEGORIES``), ``severity`` (high / medium / low),
``ms_per_step`` (what a steady step would save on average without the cause: the mean over the steady
steps; 0 where the cause costs no step time, e.g. memory growth), ``at_stake`` (that figure in words,
the one string every reader prints), ``evidence`` (the structured numbers, steps, ops, functions),
``evidence_text`` (the same in words) and ``action`` in the words of the framework in use, from the
run's recorded settings (``actions``); ``evidence["margin"]`` is how far a finding is over its trigger (1.0 on it).
The verdict is ``VERDICT_OF`` the first finding's category (``advice``).
"""
from __future__ import annotations

from typing import Any

from .words import stake_words

Finding = dict[str, Any]

CATEGORIES = ("data", "host", "compute", "runtime", "communication", "memory", "jitter", "warm-up", "straggler", "utilisation",
              "device", "launch", "sync")
VERDICT_OF = {"data": "data-bound", "host": "host-bound", "compute": "compute-bound", "runtime": "runtime-bound",
              "device": "GPU-bound", "launch": "launch-bound", "sync": "sync-bound",
              "communication": "communication-bound", "straggler": "straggler-bound", "jitter": "jittery", "memory": "memory-growth",
              "utilisation": "underutilised"}
# the finding each stage of ``breakdown.STAGES`` gives
STAGE_FINDING = {"wait": "data_wait", "compute": "hot_ops", "runtime": "runtime_overhead", "host": "host_work"}

MIN_STAKE_MS = 5.0  # below this a data, host or runtime cost is noise on a shared machine, whatever its share
MIN_SHARE = 0.10  # ... and below this share of the step it is not worth a change
JITTER_MIN_MS = 20.0  # a slow step is at least this much and 3 MADs above the median
JITTER_MIN_BEATS = 4  # slow steps on the period's beat
MEMORY_MIN_BYTES_PER_STEP = 256 << 10
MEMORY_MIN_GROWTH = 32 << 20
LOW_MFU = 0.10
MIN_LOADING_CORES = 0.5  # the CPU the data workers may always take, however busy the machine


def make_finding(finding_id: str, category: str, severity: str, ms: float, evidence: dict[str, Any], words: list[str],
                 text: str, act: str) -> Finding:
    """A finding as every rule gives one (the advisor's, the GPU's, the cluster's, the live view's): its time at stake
    rounded once, in figures and in words, and its evidence's ``words`` joined."""
    ms = round(float(ms), 1)  # the figure every reader shows, to the tenth of a ms
    return {"id": finding_id, "category": category, "severity": severity, "ms_per_step": ms, "at_stake": stake_words(ms),
            "evidence": evidence, "evidence_text": "; ".join(words), "text": text, "action": act}


def share_severity(share: float) -> str:
    """A time finding's severity by its share of the mean steady step."""
    return "high" if share >= 0.3 else "medium"
