"""The job server: one long-lived, warm Spark driver that runs maintenance jobs on request.

A scheduled task that spark-submits its job pays for a JVM, a SparkSession,
the first Spark job's Python workers and (validation) Great Expectations'
import every time: 6-8 s on a small machine before any work.  The job server
pays that once.  It is an ordinary spark-submit application::

    kfs jobs serve [--listen 127.0.0.1:7079] [--max-jobs 2]    (spark-submit flags via --master ...)

and a task becomes one HTTP request (``kfs jobs run --server URL JOB [flags]``,
or the Airflow operator when the ``kfs`` connection's extra names
``jobs_server``), answered when the run ends.  The run itself is the job's
own `run`, on the server's session: same flags, same summary in the store,
same exit status.

HTTP, JSON bodies, loopback by default.  There is no authentication: bind it
where only the scheduler can reach it.  Requests from web pages are refused
(one with an ``Origin`` header, or a body not sent as ``application/json``), so
a page in a browser on the same machine cannot start a job::

    GET  /healthz           {"status": "ok", "running": [run ids], "jobs": [names]} (503: Spark stopped)
    POST /jobs              {"job": "validation", "args": ["--store-url", ...]}
                            -> {"exit_code": 0, "run_id": ..., "output": "kfs validation OK: ...",
                                "errors": ""}    (the run's stdout and stderr lines)
    POST /jobs/cancel       {"run_id": ...} -> {"cancelled": true}

A run's Spark jobs carry its run id as their job group, so a cancel (the
client's on SIGINT/SIGTERM, the operator's ``on_kill``) stops its tasks; the
run then ends as an error, its summary says so (a run cancelled while it
waited for a slot never started and writes none), and every job is safe to
run again.  At most ``--max-jobs`` runs at once; more wait their turn.  Bad
requests answer 400 (unknown job 404) with a one-line ``error``.

The server's runs use its own environment: its store credentials and Spark
settings, not the client's.  Under spark-submit, SIGTERM goes to the JVM,
which stops the SparkContext and exits (143); run directly
(``python -m spark_jobs.server``), SIGINT and SIGTERM close it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import io
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from kfs_core.reports import EXIT_ERROR, EXIT_USAGE, new_run_id
from spark_jobs import common

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_LISTEN", "JOBS", "JobServer", "main"]

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "127.0.0.1:7079"
#: The jobs the server runs (each module's ``run`` and ``build_parser``).
JOBS = ("checkpoint", "compaction", "index_rebuild", "retention", "tables", "validation")
MAX_BODY_BYTES = 1 << 20
#: How often a cancelled run's Spark job group is cancelled again, until the run ends.
CANCEL_EVERY_S = 0.2
#: How often the idle server checks that its SparkContext (and JVM) still runs.
HEALTH_EVERY_S = 2.0
#: How often the idle main thread looks for a stop signal.
STOP_POLL_S = 0.2
_PR_SET_PDEATHSIG = 1

# argparse prints its usage errors to sys.stderr: parsing is done one at a time,
# with that stream pointed at the run's own output.
_PARSE_LOCK = threading.Lock()


class JobServer:
    """Runs jobs on ``spark``, at most ``max_jobs`` at once, behind an HTTP server."""

    def __init__(self, spark: SparkSession, *, max_jobs: int = 2) -> None:
        self.spark = spark
        self._max_jobs = max(1, max_jobs)
        self._lock = threading.Lock()
        self._slot_free = threading.Condition(self._lock)  # or a waiting run cancelled
        self._active = 0  # runs holding a slot
        self._running: dict[str, _Run] = {}
        self._http: ThreadingHTTPServer | None = None

    # --- warming up -------------------------------------------------------------

    def warm_up(self) -> None:
        """Import every job (and Great Expectations) and start Spark's Python workers."""
        for job in JOBS:
            importlib.import_module(f"spark_jobs.{job}")
        from spark_jobs import validation

        validation.build_expectations(
            common.coerce_options(
                ["--store-url", "file:///nonexistent"],
                validation.build_parser(),
                validation.ValidationOptions,
            )
        )
        slots = max(1, self.spark.sparkContext.defaultParallelism)
        self.spark.sparkContext.parallelize(range(slots), slots).map(lambda x: x).count()

    # --- running ----------------------------------------------------------------

    @property
    def running(self) -> dict[str, str]:
        """Run id -> job of the runs under way (or waiting for a slot)."""
        with self._lock:
            return {run_id: run.job for run_id, run in self._running.items()}

    def run(self, job: str, args: Sequence[str]) -> dict[str, Any]:
        """Run ``job`` with ``args`` to its end: ``{"exit_code", "run_id", "output", "errors"}``.

        ``output`` and ``errors`` are the lines the run printed on its stdout and
        stderr (summary and dry-run lines; usage and one-line errors).
        """
        if job not in JOBS:
            raise KeyError(job)
        module = importlib.import_module(f"spark_jobs.{job}")
        args = [str(a) for a in args]
        out, err = io.StringIO(), io.StringIO()

        def answer(code: int, run_id: str) -> dict[str, Any]:
            return {"exit_code": code, "run_id": run_id,
                    "output": out.getvalue().rstrip("\n"), "errors": err.getvalue().rstrip("\n")}  # fmt: skip

        parser = module.build_parser()
        # argparse prints usage, errors and --help to the process's streams: parsing is
        # done one request at a time, with those pointed at this run's buffers.
        with _PARSE_LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                parsed = parser.parse_args(args)
                if not parsed.store_url:
                    parser.error("--store-url is required (or set KFS_STORE_URL)")
            except SystemExit as exc:
                return answer(int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE, "")
        # The run id as the job will see it (argparse: the last --run-id given).
        run_id = parsed.run_id or new_run_id()
        if not parsed.run_id:
            args += ["--run-id", run_id]
        run = _Run(job)
        with self._lock:  # registered while it waits for a slot, so a cancel finds it
            if run_id in self._running:
                raise RunIdInUse(run_id)
            self._running[run_id] = run
        started = False
        code = EXIT_ERROR
        try:
            with self._slot_free:
                while self._active >= self._max_jobs and not run.cancelled:
                    self._slot_free.wait()
                started = not run.cancelled
                self._active += int(started)
            if started:  # else: cancelled while it waited, nothing was started
                token = common.JOB_OUTPUT.set((out, err))
                try:
                    # The group is this request thread's: pyspark pins a JVM thread to it.
                    self.spark.sparkContext.setJobGroup(
                        run_id, f"kfs {job}", interruptOnCancel=True
                    )
                    code = self._main(module, parser, args)
                finally:
                    common.JOB_OUTPUT.reset(token)
        finally:
            with self._slot_free:
                self._active -= int(started)
                self._running.pop(run_id, None)
                self._slot_free.notify_all()
            run.done.set()
        if run.cancelled and code != 0:
            print(f"spark_jobs.server: run {run_id} was cancelled", file=err)
        return answer(code, run_id)

    def _main(self, module: Any, parser: argparse.ArgumentParser, args: list[str]) -> int:
        def run_here(options: Any) -> dict[str, Any]:
            return dict(module.run(options, spark=self.spark))

        try:
            return common.main(run_here, parser, args)
        except SystemExit as exc:  # belt and braces: the arguments parsed above
            return int(exc.code) if isinstance(exc.code, int) else EXIT_ERROR

    @property
    def healthy(self) -> bool:
        """Whether the SparkContext is still running (a stopped one runs nothing)."""
        try:
            return not self.spark.sparkContext._jsc.sc().isStopped()
        except Exception:  # noqa: BLE001 - the JVM gone: not healthy
            return False

    def cancel(self, run_id: str) -> bool:
        """Cancel the Spark jobs of run ``run_id``, now and until it ends; False if not running.

        A run between two Spark jobs (reading catalogs on the driver, say) has
        nothing to cancel at that instant, so the group is cancelled again every
        `CANCEL_EVERY_S` until the run is over: its next Spark job fails at once.
        """
        with self._slot_free:
            run = self._running.get(run_id)
            if run is None:
                return False
            first, run.cancelled = not run.cancelled, True
            self._slot_free.notify_all()  # a run waiting for a slot gives up
        if first:
            threading.Thread(
                target=self._keep_cancelling,
                args=(run_id, run),
                name="kfs-jobs-cancel",
                daemon=True,
            ).start()
        return True

    def _keep_cancelling(self, run_id: str, run: _Run) -> None:
        while True:
            with contextlib.suppress(Exception):  # the context stopping: nothing left to cancel
                self.spark.sparkContext.cancelJobGroup(run_id)
            if run.done.wait(CANCEL_EVERY_S):
                return

    # --- serving ----------------------------------------------------------------

    def serve(self, host: str, port: int) -> ThreadingHTTPServer:
        """Bind ``host:port`` (0: any free port) and answer requests on a thread; the server."""
        server = ThreadingHTTPServer((host, port), _handler(self))
        server.daemon_threads = True
        self._http = server
        threading.Thread(target=server.serve_forever, name="kfs-jobs-http", daemon=True).start()
        return server

    def close(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


@dataclass
class _Run:
    job: str
    done: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False


class RunIdInUse(ValueError):
    """A run with this id is already under way on the server."""


class BadRequest(ValueError):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def _handler(server: JobServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "kfs-jobs"

        def log_message(self, format: str, *args: Any) -> None:  # the base's name
            log.info("%s %s", self.address_string(), format % args)

        def _answer(self, status: HTTPStatus, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                log.info("%s hung up before the answer", self.address_string())

        def _refuse_browsers(self) -> None:
            """Only programs may post here, never a web page (the server has no login).

            A browser sends ``Origin`` with every POST, a rebound DNS name included,
            and can only send a JSON content type after a CORS preflight, which this
            server never grants.  Neither the CLI nor the operator sends ``Origin``.
            """
            if self.headers.get("Origin") is not None:
                raise BadRequest(HTTPStatus.FORBIDDEN, "requests from web pages are refused")
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if content_type.lower() != "application/json":
                raise BadRequest(
                    HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "the body must be application/json"
                )

        def _body(self) -> dict[str, Any]:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                raise BadRequest(HTTPStatus.BAD_REQUEST, "bad Content-Length") from None
            if not 0 < length <= MAX_BODY_BYTES:
                raise BadRequest(HTTPStatus.BAD_REQUEST, "a JSON body is required (at most 1 MiB)")
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError as exc:
                raise BadRequest(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {exc}") from None
            if not isinstance(body, dict):
                raise BadRequest(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
            return body

        def do_GET(self) -> None:  # http.server's name
            if self.path != "/healthz":
                self._answer(HTTPStatus.NOT_FOUND, {"error": f"no such resource: {self.path}"})
                return
            running = sorted(server.running)
            if not server.healthy:
                self._answer(HTTPStatus.SERVICE_UNAVAILABLE, {"status": "spark stopped",
                             "running": running, "jobs": list(JOBS)})  # fmt: skip
                return
            self._answer(HTTPStatus.OK, {"status": "ok", "running": running, "jobs": list(JOBS)})

        def do_POST(self) -> None:  # http.server's name
            try:
                self._refuse_browsers()
                if self.path == "/jobs":
                    self._answer(HTTPStatus.OK, self._run(self._body()))
                elif self.path == "/jobs/cancel":
                    run_id = self._body().get("run_id")
                    if not isinstance(run_id, str) or not run_id:
                        raise BadRequest(HTTPStatus.BAD_REQUEST, "run_id must be a string")
                    self._answer(HTTPStatus.OK, {"cancelled": server.cancel(run_id)})
                else:
                    self._answer(HTTPStatus.NOT_FOUND, {"error": f"no such resource: {self.path}"})
            except BadRequest as exc:
                self._answer(exc.status, {"error": str(exc)})
            except Exception as exc:  # the caller gets one line, the log the rest
                log.exception("%s %s failed", self.command, self.path)
                self._answer(
                    HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"}
                )

        def _run(self, body: dict[str, Any]) -> dict[str, Any]:
            job, args = body.get("job"), body.get("args", [])
            if not isinstance(job, str) or not job:
                raise BadRequest(HTTPStatus.BAD_REQUEST, "job must be a job name")
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise BadRequest(HTTPStatus.BAD_REQUEST, "args must be a list of strings")
            name = job.replace("-", "_")
            if name not in JOBS:
                raise BadRequest(
                    HTTPStatus.NOT_FOUND, f"unknown job {job!r}; jobs: {', '.join(JOBS)}"
                )
            try:
                return server.run(name, args)
            except RunIdInUse as exc:
                raise BadRequest(HTTPStatus.CONFLICT, f"run {exc} is already running") from None

    return Handler


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark_jobs.server",
        description="Serve the KFS maintenance jobs from one warm Spark driver.",
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help=f"HOST:PORT to answer on (default {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--max-jobs", type=int, default=2, help="runs at once; more wait (default 2)"
    )
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    host, _, port_text = args.listen.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        print(
            f"spark_jobs.server: error: --listen {args.listen!r} is not HOST:PORT", file=sys.stderr
        )
        return EXIT_USAGE
    # Its own lines at INFO (requests, start, stop); the libraries' (GX is chatty) at WARNING.
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    log.setLevel(logging.INFO)
    spark = common.get_spark("kfs-jobs-server", args.master)
    server = JobServer(spark, max_jobs=args.max_jobs)
    server.warm_up()
    try:
        http = server.serve(host or "127.0.0.1", port)
    except OSError as exc:
        print(f"spark_jobs.server: error: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    bound_host, bound_port = http.server_address[:2]
    if isinstance(bound_host, bytes):
        bound_host = bound_host.decode()
    print(f"kfs jobs server ready on http://{bound_host}:{bound_port}", flush=True)
    log.info("serving %s at most %d at a time", ", ".join(JOBS), args.max_jobs)
    # The handler only flips a flag: taking a lock there (Event.set) deadlocks when the
    # signal lands while this thread holds that lock itself, waiting on the Event.
    signals: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, _frame: signals.append(signum))
    _stop_with_parent()
    # Under spark-submit this process is the JVM's child: when the JVM goes (a TERM
    # to spark-submit, a crash), so must the server, or it would keep the port.
    parent = os.getppid()
    next_check = time.monotonic() + HEALTH_EVERY_S
    while not signals:
        time.sleep(STOP_POLL_S)
        if time.monotonic() < next_check:
            continue
        next_check = time.monotonic() + HEALTH_EVERY_S
        if os.getppid() != parent or not server.healthy:
            log.warning("the SparkContext or its JVM is gone: stopping")
            break
    with contextlib.suppress(Exception):  # a dead JVM's pipes may be gone too
        server.close()
        print("kfs jobs server stopped", flush=True)
    return 0


def _stop_with_parent() -> None:
    """Under spark-submit on Linux, have the kernel send this process SIGTERM when the JVM dies."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ or not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(Exception):  # without it the health check still notices
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the call took effect
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    # Run the importable module, not this __main__ copy (executors unpickle by reference).
    from spark_jobs.server import main as _main

    common.exit_driver(_main())
