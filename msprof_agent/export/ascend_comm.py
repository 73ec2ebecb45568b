"""One rank's collectives in the shapes msprof-analyze 26.2's cluster analysis reads (text and database).

Groups: every process group the rank's collectives ran on, by the name the run recorded ("world": the
default group) with its global ranks, goes into ``parallel_group_info`` (``profiler_metadata.json`` and the
database's META_DATA), as Ascend PyTorch Profiler writes it. The communication tables key a group by
msprof-analyze's ``double_hash`` of that name (a decimal string): it joins the two on that hash, which
gives its communication group map the group's name and ranks, and maps a link's group-local ranks to
global ones.

Calls: ``communication.json`` and the database's CommAnalyzerTime / CommAnalyzerBandwidth hold each call
(``{name}__{step}_{i}``: the i-th call of that name on that group in the step, the same on every member);
``communication_matrix.json`` and CommAnalyzerMatrix hold per step, op name and group the calls of lowest
(``-top1``), median (``-middle``) and highest (``-bottom1``) bandwidth and their ``-total``, each link as
``src-dst`` group-local ranks, ``r-r`` the rank's own. The host cannot tell the wait for a slower peer from
the transfer inside one call, so Wait Time is 0 and Transit Time is the call's whole duration.
"""
from typing import Any

from ..analysis import GROUP, collectives, communication_groups

BANDWIDTH_LABEL = "RDMA"  # gloo's TCP traffic between processes: see ascend_text's docstring
LINK_TRANSPORT = "TCP"  # the real transport, in the matrix's Transport Type
SELF_TRANSPORT = "LOCAL"
P2P_NAMES = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})
COLLECTIVE, P2P = "collective", "p2p"
TOTAL = "Total Op Info"
MB = 1 << 20
TIME_FIELDS = ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)")
MATRIX_STATS = ("top1", "middle", "bottom1")  # by bandwidth, lowest first, as Ascend PyTorch Profiler names them


def double_hash(text: str) -> int:
    """msprof-analyze's hash of a group's name (``cluster_analyse.common_func.utils.double_hash``)."""
    low = high = 0
    for char in text:
        high = (high * 29 + ord(char)) & 0xFFFFFFFF
        low = (low * 131 + ord(char)) & 0xFFFFFFFF
    return (high << 32) | low


def group_key(group: str) -> str:
    """A group's key in the communication tables: the hash of its name, as msprof-analyze joins them."""
    return str(double_hash(group))


def group_members(data: Any) -> dict[str, list[int]]:
    """Each group's global ranks, sorted, as the run recorded them; the default group, where no call
    recorded its ranks, is every rank of the job."""
    members = {name: sorted(group["ranks"]) for name, group in communication_groups(data).items() if group["ranks"]}
    if GROUP not in members and any((c.get("group") or GROUP) == GROUP for c in data.comm):
        members[GROUP] = list(range(int(data.meta.get("rank_size") or 1)))
    return members


def parallel_group_info(data: Any) -> dict[str, dict[str, Any]]:
    """``parallel_group_info``: the groups this rank is a member of, by name, with its rank in each."""
    return {name: {"group_name": name, "group_rank": ranks.index(data.rank), "global_ranks": ranks}
            for name, ranks in group_members(data).items() if data.rank in ranks}


def _bandwidth(size_mb: float, ms: float) -> float:
    return round(size_mb / 1024 / (ms / 1000), 9) if ms else 0.0


def calls(data: Any) -> list[dict[str, Any]]:
    """The rank's collectives in time order, each with its step, kind, op id, group (name and key), time
    (µs, ms), size (MB) and, for a collective on a group the rank is a member of, its links (``src-dst`` in
    group-local ranks, to each member, to their transport)."""
    members = group_members(data)
    out = []
    for step, key, call in collectives(data):
        op, group = key.split("@", 1)
        name = call.get("name", "comm")
        index = op.rsplit("_", 1)[1]
        ranks = members.get(group)
        kind = P2P if name in P2P_NAMES else COLLECTIVE
        links = {}
        if kind == COLLECTIVE and ranks and data.rank in ranks:  # a send or receive's peer is not recorded: no links
            me = ranks.index(data.rank)
            links = {f"{me}-{peer}": SELF_TRANSPORT if peer == me else LINK_TRANSPORT for peer in range(len(ranks))}
        ms, size_mb = call["dur"] / 1e6, (call.get("bytes") or 0) / MB
        out.append({"step": f"step{step}", "kind": kind, "name": name, "op": f"{name}__{step}_{index}",
                    "group": group, "key": group_key(group), "start_ns": call["start"], "end_ns": call["start"] + call["dur"],
                    "start_us": round(call["start"] / 1000.0, 3), "ms": round(ms, 6), "size_mb": round(size_mb, 9),
                    "bandwidth": _bandwidth(size_mb, ms), "links": links, "bytes": call.get("bytes") or 0, "dtype": call.get("dtype")})
    return out


def _time_info(call: dict[str, Any]) -> dict[str, float]:
    return {"Start Timestamp(us)": call["start_us"], "Elapse Time(ms)": call["ms"], "Transit Time(ms)": call["ms"], "Wait Time(ms)": 0.0,
            "Synchronization Time(ms)": 0.0, "Idle Time(ms)": 0.0, "Wait Time Ratio": 0.0, "Synchronization Time Ratio": 0.0}


def communication_json(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """communication.json: per step, each call under its kind as ``{op}@{group key}``, and per kind the step's ``Total Op Info``."""
    comm: dict[str, Any] = {}
    for call in rows:
        per_kind = comm.setdefault(call["step"], {COLLECTIVE: {}, P2P: {}})[call["kind"]]
        per_kind[f"{call['op']}@{call['key']}"] = {"Communication Time Info": _time_info(call), "Communication Bandwidth Info": {BANDWIDTH_LABEL: {
            "Transit Size(MB)": call["size_mb"], "Transit Time(ms)": call["ms"], "Bandwidth(GB/s)": call["bandwidth"],
            "Large Packet Ratio": 1.0 if call["size_mb"] >= 1 else 0.0, "Size Distribution": {str(call["size_mb"]): [1, call["ms"]]}}}}
        total = per_kind.setdefault(TOTAL, {"Communication Time Info": dict(_time_info(call), **dict.fromkeys(TIME_FIELDS, 0.0)),
                                            "Communication Bandwidth Info": {}})["Communication Time Info"]
        total["Start Timestamp(us)"] = min(total["Start Timestamp(us)"], call["start_us"])  # the step's first call
        for field in TIME_FIELDS:
            total[field] = round(total[field] + per_kind[f"{call['op']}@{call['key']}"]["Communication Time Info"][field], 6)
    return comm


def _link(call: dict[str, Any], transport: str, op_name: str) -> dict[str, Any]:
    return {"Transport Type": transport, "Transit Size(MB)": call["size_mb"], "Transit Time(ms)": call["ms"],
            "Bandwidth(GB/s)": call["bandwidth"], "Op Name": op_name}


def matrix_json(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """communication_matrix.json: per step, kind, op name and group the calls of lowest, median and highest
    bandwidth (``{name}-top1``, ``-middle``, ``-bottom1``) and the ``-total`` of the step's calls, by link."""
    grouped: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for call in rows:
        if call["links"]:
            grouped.setdefault((call["step"], call["kind"], call["name"], call["key"]), []).append(call)
    matrix: dict[str, Any] = {}
    for (step, kind, name, key), group in grouped.items():
        per_kind = matrix.setdefault(step, {COLLECTIVE: {}, P2P: {}})[kind]
        ordered = sorted(group, key=lambda c: c["bandwidth"])
        for stat, call in zip(MATRIX_STATS, (ordered[0], ordered[len(ordered) // 2], ordered[-1])):
            per_kind[f"{name}-{stat}@{key}"] = {link: _link(call, transport, call["op"]) for link, transport in call["links"].items()}
        size, ms = round(sum(c["size_mb"] for c in group), 9), round(sum(c["ms"] for c in group), 6)
        per_kind[f"{name}-total@{key}"] = {link: {"Transport Type": transport, "Transit Size(MB)": size, "Transit Time(ms)": ms,
                                                  "Bandwidth(GB/s)": _bandwidth(size, ms), "Op Name": ""}
                                           for link, transport in group[0]["links"].items()}
    return matrix


# The analysis database's tables (Ascend PyTorch Profiler's analysis.db: contract.names.ASCEND_COMM_*_TABLE), from the same rows
TIME_COLUMNS = ("hccl_op_name", "group_name", "start_timestamp", "elapse_time", "transit_time", "wait_time", "synchronization_time",
                "idle_time", "synchronization_time_ratio", "wait_time_ratio", "step", "type")
BANDWIDTH_COLUMNS = ("hccl_op_name", "group_name", "transport_type", "transit_size", "transit_time", "bandwidth", "large_packet_ratio",
                     "package_size", "count", "total_duration", "step", "type")
MATRIX_COLUMNS = ("hccl_op_name", "group_name", "src_rank", "dst_rank", "transport_type", "transit_size", "transit_time", "bandwidth",
                  "op_name", "step", "type")
CALL_MATRIX_COLUMNS = MATRIX_COLUMNS[:8]  # msprof's (MindSpore's): no op_name, step or type; msprof-analyze adds them itself


def time_rows(comm: dict[str, Any]) -> list[tuple[Any, ...]]:
    """CommAnalyzerTime: communication.json's calls (its totals are msprof-analyze's to compute)."""
    return [(op, key, info["Start Timestamp(us)"], info["Elapse Time(ms)"], info["Transit Time(ms)"], info["Wait Time(ms)"],
             info["Synchronization Time(ms)"], info["Idle Time(ms)"], info["Synchronization Time Ratio"], info["Wait Time Ratio"], step, kind)
            for step, kinds in comm.items() for kind, ops in kinds.items() for full, entry in ops.items() if full != TOTAL
            for op, key in [full.split("@", 1)] for info in [entry["Communication Time Info"]]]


def bandwidth_rows(comm: dict[str, Any]) -> list[tuple[Any, ...]]:
    """CommAnalyzerBandwidth: each call's transfer, one row per size of its Size Distribution."""
    return [(op, key, transport, band["Transit Size(MB)"], band["Transit Time(ms)"], band["Bandwidth(GB/s)"], band["Large Packet Ratio"],
             float(size), count, duration, step, kind)
            for step, kinds in comm.items() for kind, ops in kinds.items() for full, entry in ops.items() if full != TOTAL
            for op, key in [full.split("@", 1)] for transport, band in entry["Communication Bandwidth Info"].items()
            for size, (count, duration) in band["Size Distribution"].items()]


def call_matrix_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """CommAnalyzerMatrix as msprof writes it (MindSpore's communication_analyzer.db): a row per call and link, its
    ``hccl_op_name`` the call's op (``AllReduce__2_0``); msprof-analyze picks each step's top, middle and bottom itself."""
    return [(call["op"], call["key"], *link.split("-", 1), transport, call["size_mb"], call["ms"], call["bandwidth"])
            for call in rows for link, transport in call["links"].items()]


def matrix_rows(matrix: dict[str, Any]) -> list[tuple[Any, ...]]:
    """CommAnalyzerMatrix: communication_matrix.json's links."""
    return [(op, key, *link.split("-", 1), value["Transport Type"], value["Transit Size(MB)"], value["Transit Time(ms)"], value["Bandwidth(GB/s)"],
             value["Op Name"], step, kind)
            for step, kinds in matrix.items() for kind, ops in kinds.items() for full, links in ops.items()
            for op, key in [full.split("@", 1)] for link, value in links.items()]
