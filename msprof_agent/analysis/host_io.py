"""Host disk and network I/O (``host_sys`` "disk" / "network"): one page each and counter tracks on the timeline.

The sampler records the machine's counters (and the process's own disk bytes) as deltas per CPU
sample; a page lists the samples with their MB/s and totals, so "this job wrote 2 GB while step 40
ran" can be read off directly.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..contract.names import HOST_DISK, HOST_NETWORK
from ..contract.pages import File, Page
from ..writers import write_json

if TYPE_CHECKING:
    from .run import Context
    from .rundata import RunData

# page -> (record field, the page's name for it); bytes fields also get a MB/s series
DISK_FIELDS = (("disk_read", "read_bytes"), ("disk_write", "write_bytes"), ("disk_reads", "read_count"),
               ("disk_writes", "write_count"), ("proc_read", "process_read_bytes"), ("proc_write", "process_write_bytes"))
NETWORK_FIELDS = (("net_sent", "sent_bytes"), ("net_recv", "received_bytes"), ("net_psent", "sent_packets"),
                  ("net_precv", "received_packets"))
PAGES = ((HOST_DISK, DISK_FIELDS, "Disk I/O"), (HOST_NETWORK, NETWORK_FIELDS, "Network I/O"))


def _seconds_between(samples: Sequence[dict[str, Any]], interval_ms: float) -> list[float]:
    """Each sample's span in s (the first one's is the sampling interval)."""
    spans: list[float] = []
    previous: int | None = None
    for sample in samples:
        spans.append(max((sample["ts"] - previous) / 1e9 if previous is not None else interval_ms / 1000.0, 1e-3))
        previous = sample["ts"]
    return spans


def write(data: RunData, ctx: Context) -> dict[str, dict[str, int]]:
    """The disk and network pages of the kinds that were sampled; returns their totals by page."""
    totals: dict[str, dict[str, int]] = {}
    for page, columns, _ in PAGES:
        samples = _sampled(data, columns)
        if not samples:
            continue
        spans = _seconds_between(samples, ctx.sampling_interval_ms)
        series = {name: [s.get(field, 0) for s in samples] for field, name in columns}
        rates = {name.replace("_bytes", "_mb_per_s"): [round(v / 1e6 / t, 3) for v, t in zip(values, spans)]
                 for name, values in series.items() if name.endswith("_bytes")}
        total = {name: sum(values) for name, values in series.items()}
        write_json(ctx.path(page.format(rank=ctx.rank)), {
            "sampling_interval": ctx.sampling_interval_ms, "time_stamp": [s["ts"] // 1_000_000 for s in samples],
            **series, **rates, "total": total,
            "peak_mb_per_s": {name: max(values) for name, values in rates.items()},
        }, ctx.pretty)
        totals[page.format(rank=ctx.rank)] = total
    return totals


def _sampled(data: RunData, columns: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    return [s for s in data.host_io if columns[0][0] in s]


def counter_events(data: RunData, pid: int, interval_ms: float, base: int = 0) -> list[dict[str, Any]]:
    """Counter tracks (machine MB/s per sample) for the timeline's PID, ``ts`` in us from ``base`` (epoch ns)."""
    events = []
    for _, columns, title in PAGES:
        byte_fields = [(field, name) for field, name in columns if name.endswith("_bytes") and not name.startswith("process")]
        samples = _sampled(data, columns)
        for sample, span in zip(samples, _seconds_between(samples, interval_ms)):
            events.append({"ph": "C", "name": f"{title} MB/s", "pid": pid, "tid": 0, "ts": round((sample["ts"] - base) / 1000.0, 3),
                           "args": {name.replace("_bytes", ""): round(sample.get(field, 0) / 1e6 / span, 3) for field, name in byte_fields}})
    return events


PAGE = Page("host_io", (File("host_disk", (HOST_DISK,)), File("host_network", (HOST_NETWORK,))), write, {})
