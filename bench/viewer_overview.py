"""How long the viewer's overview of a 1 000-step run takes to load (the issue's bound: under 1 s).

Measures, on a run with --steps steps (default 1000):
  server: GET /run/overview (read the files, render the page), median and max of --repeat requests;
  browser: headless Chromium (when scripts/install_browser.sh has installed it) from navigation start until
           the page's script has drawn every chart, plotly.min.js included, median of --repeat loads.
The run is either a real profiled one (--summary-base-dir DIR --run ID) or, by default, the hand-made
fixture of tests/test_viewer.py written with that many steps and a 1 000-op operator table.

    .venv/bin/python bench/viewer_overview.py [--steps 1000] [--repeat 7] [--json out.json]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
BOUND_S = 1.0


def synthetic(steps):
    from test_viewer import make_fixture

    base = tempfile.mkdtemp(prefix="msprof-viewer-bench-")
    directory = os.path.join(base, "job", "profiler")
    make_fixture(directory, rank=0, steps=steps)
    with open(os.path.join(directory, "cpu_op_detail_info_0.csv"), "a") as handle:  # a realistic op table size
        for i in range(1000):
            handle.write(f"CPU,MatMul,MatMul-op{i + 100},Default/net/layer{i}/MatMul-op{i + 100},{steps},{i * 0.01},{i * 0.01 / steps},0.0001,Default,1\n")
    return base, "job"


def server_times(url, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as resp:
            resp.read()
        times.append(time.perf_counter() - start)
    return times


def browser_times(url, repeat):
    if not os.access("/usr/bin/chromium", os.X_OK):
        return None, "no /usr/bin/chromium"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None, "playwright not installed"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync"]
    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=flags)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url)  # first load warms the disk cache for plotly.min.js, as any second visit would be
        page.wait_for_selector("body[data-ready='1']")
        for _ in range(repeat):
            page.goto(url)
            page.wait_for_selector("body[data-ready='1']")
            times.append(page.evaluate("performance.now()") / 1000.0)  # ms since navigation start
        browser.close()
    return times, None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--summary-base-dir", help="a real profiled run's base directory instead of the fixture")
    parser.add_argument("--run", help="the run id under --summary-base-dir (see /api/runs)")
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args(argv)
    from msprof_agent.viewer.server import make_server

    base, run = (args.summary_base_dir, args.run) if args.summary_base_dir else synthetic(args.steps)
    server = make_server(base, "127.0.0.1", 0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/run/overview?" + urllib.parse.urlencode({"run": run, "rank": 0})
    try:
        srv = server_times(url, args.repeat)
        brw, why = browser_times(url, args.repeat)
    finally:
        server.shutdown()
    result = {"steps": args.steps if not args.summary_base_dir else None, "run": run, "bound_s": BOUND_S,
              "server_median_s": statistics.median(srv), "server_max_s": max(srv),
              "browser_median_s": statistics.median(brw) if brw else None, "browser_max_s": max(brw) if brw else None,
              "browser_skipped": why}
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    worst = result["browser_median_s"] if brw else result["server_median_s"]
    return 0 if worst < BOUND_S else 1


if __name__ == "__main__":
    sys.exit(main())
