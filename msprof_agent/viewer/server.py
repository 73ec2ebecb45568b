"""``msprof-agent view``: a read-only web server over the analysed runs under one directory.

The standard library's ThreadingHTTPServer, no web framework. It never opens a path taken from a request: a run id must
be one the scan found under the base directory, a rank one of that run's ranks, and files are named
from fixed patterns; static files come from a fixed table. Every request is handled inside a guard, so
a bad file shows as an error on its page and the server keeps serving.
"""
from __future__ import annotations

import ipaddress
import os
import sys
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from ..analysis import live as live_rules
from ..contract import live as live_record
from ..contract.names import MERGED_SUFFIX, MERGED_TIMELINE
from . import documents, merged_timeline, pages, sections
from .assets import INSTALL_VIEWER, STATIC_DIR, plotly_js_path, template_engine_missing

Response = tuple[int, str, str | bytes, dict[str, str]]  # (status, content type, body, extra headers)
Query = dict[str, list[str]]  # parse_qs's

CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


class HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Handler(BaseHTTPRequestHandler):
    server_version = "msprof-agent-viewer"
    index: sections.RunIndex  # set by make_server's subclass
    quiet = False

    def log_message(self, fmt: str, *args: Any) -> None:
        if not self.quiet:
            sys.stderr.write("msprof-agent view: " + (fmt % args) + "\n")

    def do_HEAD(self) -> None:
        self.do_GET(head=True)

    def do_GET(self, head: bool = False) -> None:
        status: int
        ctype: str
        body: str | bytes
        extra: dict[str, str]
        try:
            status, ctype, body, extra = self.route()
        except HTTPError as exc:
            status, ctype, body, extra = exc.status, "text/html; charset=utf-8", documents.error_page(exc.status, str(exc)), {}
        except Exception as exc:  # one page's failure must not stop the server
            traceback.print_exc()
            status, ctype, body, extra = 500, "text/html; charset=utf-8", documents.error_page(500, f"{type(exc).__name__}: {exc}"), {}
        if isinstance(body, str):
            body = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("Referrer-Policy", "no-referrer")
        extra.setdefault("Cache-Control", "no-store")
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _refuse(self) -> None:
        self.send_error(405, "read-only viewer")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    # ---- routing -----------------------------------------------------------------------------------

    def route(self) -> Response:
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        path = url.path
        if path in ("/", "/index.html"):
            running = {job: self.live_view(job) for job in sections.running_jobs(self.index.base)}
            return 200, "text/html; charset=utf-8", documents.index_page(self.index.base, self.index.runs(fresh=True), running), {}
        if path in ("/live", "/api/live"):
            job = (query.get("job") or [""])[0]
            view = self.live_view(job)
            if path.startswith("/api/"):
                return 200, "application/json", orjson.dumps(view), {}
            return 200, "text/html; charset=utf-8", documents.live_page(job, view), {}
        if path == "/favicon.ico":
            return 204, "image/x-icon", b"", {}
        if path.startswith("/static/"):
            return self.static(path[len("/static/"):])
        if path == "/api/runs":
            runs = [r.as_dict() for _, r in sorted(self.index.runs(fresh=True).items())]
            return 200, "application/json", orjson.dumps(runs), {}
        if path == "/timeline":
            return self.timeline(query)
        if path.startswith("/run/") or path.startswith("/api/page/"):
            page_name = path.rsplit("/", 1)[1]
            if page_name not in pages.views():
                raise HTTPError(404, f"no such page: {page_name}")
            run, rank = self.run_and_rank(query)
            loaded = pages.load_page(run, rank, page_name)
            if path.startswith("/api/"):
                return 200, "application/json", orjson.dumps(loaded, option=orjson.OPT_NON_STR_KEYS), {}
            return 200, "text/html; charset=utf-8", documents.run_page(run, rank, page_name, loaded), {}
        raise HTTPError(404, "not found")

    def live_view(self, job: str) -> dict[str, Any]:
        """The running job JOB's view (``analysis.live.job_view``): only a job the scan found under the base directory."""
        directory = sections.running_jobs(self.index.base).get(job) or self._ended_job(job)
        if directory is None:
            raise HTTPError(404, f"no job {job!r} with live records under the summary directory")
        return live_rules.job_view(live_record.job_records(directory), time.time_ns())

    def _ended_job(self, job: str) -> str | None:
        """A job that has just ended is still shown (its records say so), where the scan finds its folder."""
        run = self.index.get(job)
        return os.path.join(self.index.base, job) if run is not None and live_record.job_records(os.path.join(self.index.base, job)) else None

    def run_and_rank(self, query: Query) -> tuple[sections.Run, int]:
        """The run named in the query, only if the scan found it under the base directory."""
        run_id = (query.get("run") or [""])[0]
        run = self.index.get(run_id)
        if run is None:
            raise HTTPError(404, f"no profiled run {run_id!r} under the summary directory")
        raw_rank = (query.get("rank") or [""])[0]
        if raw_rank == "":
            return run, min(run.ranks)
        try:
            rank = int(raw_rank)
        except ValueError:
            raise HTTPError(400, "rank must be an integer") from None
        if rank not in run.ranks:
            run = self.index.runs(fresh=True).get(run_id, run)  # a rank that just finished its analysis
        if rank not in run.ranks:
            raise HTTPError(404, f"run {run_id!r} has no rank {rank}")
        return run, rank

    def static(self, name: str) -> Response:
        files: dict[str, tuple[str, str | None]] = {"viewer.js": ("application/javascript; charset=utf-8", os.path.join(STATIC_DIR, "viewer.js")),
                 "viewer.css": ("text/css; charset=utf-8", os.path.join(STATIC_DIR, "viewer.css")),
                 "plotly.min.js": ("application/javascript; charset=utf-8", plotly_js_path())}
        if name not in files:
            raise HTTPError(404, "not found")
        ctype, path = files[name]
        if path is None:
            raise HTTPError(404, f"plotly is not installed: {INSTALL_VIEWER}")
        with open(path, "rb") as handle:
            return 200, ctype, handle.read(), {"Cache-Control": "max-age=3600"}

    def timeline(self, query: Query) -> Response:
        """The budgeted download (``merged_timeline.download``): every rank's lanes, and op detail for ``ranks``
        (``ranks=0,77`` or ``ranks=0&ranks=77``; none: the slow ranks and the lowest)."""
        run = self.index.get((query.get("run") or [""])[0])
        if run is None:
            raise HTTPError(404, "no such run")
        try:
            asked = {int(r) for value in query.get("ranks") or [] for r in value.split(",") if r.strip()}
        except ValueError:
            raise HTTPError(400, "ranks must be integers") from None
        if not asked <= set(run.ranks):
            raise HTTPError(404, "unknown rank")
        kind = (query.get("kind") or ["detail"])[0]
        if kind not in ("summary", "detail"):
            raise HTTPError(400, "kind is summary or detail")
        merge = (query.get("merge") or ["0"])[0] in ("1", "true", "on")
        if asked:
            ranks = sorted(asked)
        else:
            cluster = sections.cluster_summary(run)
            data = cluster["data"] if cluster["status"] == "ok" and isinstance(cluster["data"], dict) else {}
            ranks = merged_timeline.default_ranks(run, data.get("slow_ranks") or [])
        body, problems = merged_timeline.download(run, ranks, kind=kind, merge=merge)
        if not body:
            raise HTTPError(404, "; ".join(problems) or "nothing to download")
        shown = "-".join(map(str, ranks[:8])) + (f"-and-{len(ranks) - 8}-more" if len(ranks) > 8 else "")
        name = MERGED_TIMELINE.format(kind=kind, ranks=shown, merged=MERGED_SUFFIX if merge else "")
        extra = {"Content-Disposition": f'attachment; filename="{name}"'}
        if problems:
            extra["X-Msprof-Left-Out"] = "; ".join(problems).encode("ascii", "replace").decode("ascii")[:1000]
        return 200, "application/json", body, extra


def make_server(summary_base_dir: str, host: str = "127.0.0.1", port: int = 8080, quiet: bool = False) -> ThreadingHTTPServer:
    """The server object (not yet serving); port 0 picks a free one. Used by serve() and the tests."""
    index = sections.RunIndex(summary_base_dir)
    handler = type("BoundHandler", (Handler,), {"index": index, "quiet": quiet})
    return ThreadingHTTPServer((host, port), handler)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(summary_base_dir: str, host: str = "127.0.0.1", port: int = 8080) -> int:
    """Serve until interrupted; returns the exit code."""
    if not os.path.isdir(summary_base_dir):
        sys.stderr.write(f"msprof-agent view: {summary_base_dir}: not a directory\n")
        return 2
    if not _is_loopback(host):
        sys.stderr.write(f"msprof-agent view: WARNING: listening on {host}, not only this machine: anyone who can reach "
                         f"port {port} can read the profiles under {os.path.abspath(summary_base_dir)}\n")
    if template_engine_missing():
        sys.stderr.write(f"msprof-agent view: jinja2 is not installed, the pages cannot be drawn ({INSTALL_VIEWER})\n")
        return 2
    if plotly_js_path() is None:
        sys.stderr.write(f"msprof-agent view: plotly is not installed, charts are off ({INSTALL_VIEWER})\n")
    try:
        server = make_server(summary_base_dir, host, port)
    except OSError as exc:
        sys.stderr.write(f"msprof-agent view: cannot listen on {host}:{port}: {exc}\n")
        return 1
    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"msprof-agent view: serving {os.path.abspath(summary_base_dir)} at http://{shown}:{server.server_address[1]}/ (Ctrl-C stops)\n")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
