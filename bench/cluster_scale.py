"""`msprof-agent analyse` over N ranks grown from a real 2-rank gloo job, on the process pool and on Dask.

A real torchrun job (examples/torch_cnn.py, 2 ranks on gloo, rank 1 sleeping --sleep-ms a step) leaves
its raw store; it is grown to N ranks, 8 a node: every rank a copy of rank 0 (rank 1 of its slowed
self), each with its own per-rank offset and per-step noise added to its steps' ends (own work), and,
with two nodes or more, every rank of one node (the middle one) --node-ms slower. For each N the
analysis runs in a fresh process per engine, interleaved; printed: wall time, per-rank cost, peak
memory of the whole process tree (sampled every 50 ms), and whether cluster_summary.json names the
slowed rank and the slow node and nothing else. At the largest N: the Cluster page's served size and
its draw time in headless Chromium (bench/viewer_overview.py's measure), and the same of the roll-up's
cluster_report.html opened from disk.

    .venv/bin/python bench/cluster_scale.py [--ranks 8,32,128,1024] [--engines pool,dask] [--keep DIR]
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
PER_NODE = 8
SLOW_RANK = 1
META_MAX = 1 << 16  # a line this long or longer is an ops batch: copied as it is


def real_job(out, steps, sleep_ms):
    """The source store: a real 2-rank gloo job profiled by the agent."""
    env = dict(os.environ, MS_PROFILER_OPTIONS=json.dumps({"start": True, "output_path": out}), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "sitecustomize_hook"), ROOT]))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", os.path.join(ROOT, "examples", "torch_cnn.py"),
                           "--steps", str(steps), "--sleep-rank", str(SLOW_RANK), "--sleep-ms", str(sleep_ms)],
                          env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode:
        raise SystemExit(f"the source job failed: {proc.stderr[-2000:]}")
    return os.path.join(out, "profiler")


def grow(source, target, ranks, node_ms, seed=0):
    """TARGET/profiler/raw/rank_{r} for r < RANKS from SOURCE's two ranks; returns (slowed rank, slow node or None)."""
    import orjson

    from msprof_agent.contract.names import RAW_FOLDER, RAW_RANK_FOLDER

    noise = random.Random(seed)
    nodes = (ranks + PER_NODE - 1) // PER_NODE
    slow_node = nodes // 2 if nodes > 1 else None
    for rank in range(ranks):
        origin = os.path.join(source, RAW_FOLDER, RAW_RANK_FOLDER.format(rank=SLOW_RANK if rank == SLOW_RANK else 0))
        folder = os.path.join(target, RAW_FOLDER, RAW_RANK_FOLDER.format(rank=rank))
        os.makedirs(folder)
        offset_ms = noise.gauss(0, 0.5) + (node_ms if rank // PER_NODE == slow_node else 0.0)
        for name in os.listdir(origin):
            with open(os.path.join(origin, name), "rb") as src, open(os.path.join(folder, name), "wb") as dst:
                for line in src:
                    if len(line) < META_MAX and b'"k":"meta"' in line:
                        record = orjson.loads(line)
                        record.update(rank_id=rank, device_id=rank % PER_NODE, rank_size=ranks, host=f"node{rank // PER_NODE:03d}")
                        line = orjson.dumps(record) + b"\n"
                    elif len(line) < META_MAX and b'"k":"step"' in line:
                        record = orjson.loads(line)
                        record["end"] += int((offset_ms + noise.gauss(0, 0.5)) * 1e6)
                        line = orjson.dumps(record) + b"\n"
                    dst.write(line)
    return SLOW_RANK, (f"node{slow_node:03d}" if slow_node is not None else None)


def measured(command):
    """(wall s, peak RSS of the process tree in bytes, stderr) of one command."""
    began = time.perf_counter()
    proc = psutil.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            try:
                tree = [proc] + proc.children(recursive=True)
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree if p.is_running()))
            except psutil.Error:
                pass
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    stop.set()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(command)} failed: {err.decode()[-2000:]}")
    return time.perf_counter() - began, peak[0], err.decode()


ENGINES = {"pool": [], "dask": ["--scheduler", "local"]}


def page_numbers(base, run_id):
    """The Cluster page's served size (bytes) and its draw time in Chromium (s), or why not; the same of cluster_report.html."""
    from viewer_overview import browser_times, server_times

    from msprof_agent.contract.names import CLUSTER_REPORT
    from msprof_agent.viewer.server import make_server

    server = make_server(base, "127.0.0.1", 0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/run/cluster?" + urllib.parse.urlencode({"run": run_id, "rank": 0})
    try:

        with urllib.request.urlopen(url, timeout=120) as resp:
            size = len(resp.read())
        served = server_times(url, 3)
        drawn, why = browser_times(url, 3)
    finally:
        server.shutdown()
    static = os.path.join(base, run_id, "profiler", CLUSTER_REPORT)  # the roll-up's own cluster_report.html, opened from disk
    opened, _ = browser_times(pathlib.Path(static).as_uri(), 3)
    return {"page_bytes": size, "server_median_s": sorted(served)[1], "browser_median_s": sorted(drawn)[1] if drawn else None, "browser_skipped": why,
            "static_page_bytes": os.path.getsize(static), "static_browser_median_s": sorted(opened)[1] if opened else None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,32,128,1024")
    parser.add_argument("--engines", default="pool,dask")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sleep-ms", type=float, default=50.0, help="the slowed rank's extra work per step")
    parser.add_argument("--node-ms", type=float, default=25.0, help="the slow node's ranks' extra work per step")
    parser.add_argument("--source", help="a real job's profiler directory to grow (default: run one)")
    parser.add_argument("--keep", help="grow the stores here and keep them (default: a temporary directory, removed)")
    args = parser.parse_args(argv)
    work = args.keep or tempfile.mkdtemp(prefix="msprof-cluster-bench-")
    source = args.source or real_job(os.path.join(work, "source"), args.steps, args.sleep_ms)
    sizes = [int(n) for n in args.ranks.split(",")]
    rows = []
    try:
        for ranks in sizes:
            job = os.path.join(work, f"n{ranks}")
            shutil.rmtree(job, ignore_errors=True)
            slow_rank, slow_node = grow(source, os.path.join(job, "profiler"), ranks, args.node_ms)
            for engine in args.engines.split(","):
                wall, peak, err = measured([sys.executable, "-m", "msprof_agent", "analyse", job] + ENGINES[engine])
                with open(os.path.join(job, "profiler", "cluster_summary.json"), "rb") as handle:
                    cluster = json.loads(handle.read())
                named = (cluster["slow_ranks"] == [slow_rank], cluster["slow_nodes"] == ([slow_node] if slow_node else []))
                row = {"ranks": ranks, "engine": engine, "wall_s": round(wall, 2), "per_rank_s": round(wall / ranks, 3),
                       "peak_mb": round(peak / 2**20), "analysed": cluster["ranks_analysed"], "slow_ranks": cluster["slow_ranks"],
                       "slow_nodes": cluster["slow_nodes"], "named_right": all(named)}
                rows.append(row)
                print(json.dumps(row), flush=True)
        largest = os.path.join(work, f"n{sizes[-1]}")
        page = page_numbers(work, os.path.relpath(largest, work))
        print(json.dumps({"ranks": sizes[-1], **page}), flush=True)
        by = {(r["ranks"], r["engine"]): r for r in rows}
        for engine in args.engines.split(","):
            if (sizes[0], engine) in by and len(sizes) > 1:
                first, last = by[(sizes[0], engine)], by[(sizes[-1], engine)]
                print(f"{engine}: {sizes[-1]} ranks take {last['wall_s'] / first['wall_s']:.2f}x the time of {sizes[0]} "
                      f"(x{sizes[-1] / sizes[0]:g} ranks); peak memory {last['peak_mb'] / first['peak_mb']:.2f}x")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r["named_right"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
