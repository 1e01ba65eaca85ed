"""What every KFS maintenance job shares: options, Spark, descriptors, executors, reports.

A job is a module ``spark_jobs/<job>.py`` with three entry points::

    def build_parser() -> argparse.ArgumentParser      # job_parser(...) + the job's own flags
    def run(options, spark=None) -> dict               # tests call this with their session
    def main(argv=None) -> int                         # return common.main(run, build_parser(), argv)

    if __name__ == "__main__":
        from spark_jobs.<job> import main as _main   # by reference, not as __main__,
        exit_driver(_main())                          # so executors unpickle it cleanly

so ``spark-submit spark_jobs/<job>.py --store-url URL --namespace NS`` and
``python -m spark_jobs.<job> ...`` take the same arguments.  ``run`` accepts a
`JobOptions` (or a subclass the job defines for its own flags), an argv list or
an ``argparse.Namespace``, and does its work inside `execute`, which owns the
life cycle and returns the run summary.

Executors import ``kfs_core`` and ``spark_jobs``: in local mode they run this
interpreter; on a cluster, install the ``kfs`` package on the nodes or ship it
with ``--py-files``.

Public API (kept small and stable; other jobs build on it):

Options and command line
    `JobOptions`                 store_url, namespace, topics, dry_run, master,
                                 s3_endpoint_url, paused_exit_code, run_id; ``open_store()``.
                                 Jobs subclass it (frozen dataclass, fields with defaults).
    `job_parser(job, description)`  argparse parser with the shared flags.
    `coerce_options(options, parser, cls)`  JobOptions from options | argv | Namespace.
    `main(run, parser, argv)`    parse, run, print, map the summary to an exit code.

Spark
    `get_spark(app_name, master=None)`  the active session, or a new one
                                 (``local[*]`` unless spark-submit or ``master`` says otherwise).

Catalog on the driver
    `SegmentDescriptor`          one live segment: its catalog `SegmentEntry`, topic, partition.
    `list_partitions(store, ns, topics)`       [(topic, partition)] from the topic registry.
    `load_partitions(store, ns, topics)`       [PartitionState] (catalog loads, threaded).
    `read_descriptors(store, ns, topics)`      [SegmentDescriptor] of every live segment.
    `descriptors_dataframe(spark, descriptors)`  the same as a DataFrame (`DESCRIPTOR_SCHEMA`).

Executors
    `map_in_executors(spark, store, items, fn)`  ``[fn(store, item) for item in items]``
                                 computed in Spark tasks; the store travels pickled (its
                                 URL reopens it), so no Hadoop S3 connector is involved.

Life cycle and reports
    `execute(job, options, body, spark=None)`  pause check, session, timing, summary
                                 JSON at ``{ns}/_reports/<job>/<run-id>.json``, one-line
                                 print.  ``body(ctx: JobContext) -> JobResult``.
    `JobContext`                 job, options, store, run_id, spark (lazy), ``phase(name)``
                                 timer, ``report_prefix``, ``check_paused()``.
    `JobResult`                  status, message, counts, details.
    `UsageError`                 raised for impossible requests (exit 2).
    `new_run_id()`, `report_key(ns, job, run_id)`, `write_json(store, key, doc)`.
    Status values `STATUS_OK`, `STATUS_FAILED`, `STATUS_PAUSED`, `STATUS_ERROR`;
    exit codes `EXIT_OK` 0, `EXIT_FAILED` 1 (the job ran and found or left
    problems), `EXIT_USAGE` 2 (bad arguments), `EXIT_ERROR` 3 (the job itself
    broke).  A paused job exits ``--paused-exit-code`` (default 0: it stopped
    cleanly; its summary says ``"status": "paused"``).

Statuses, exit codes, run ids and report keys are `kfs_core.reports`'s (the
Airflow plugin reads the same contract); they are re-exported here.  The
summary every job returns (as a dict) and stores is a
`kfs_core.reports.RunSummary`, built in one place (`_summary`); jobs add theirs
under ``details``.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import dataclasses
import datetime as _dt
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar, cast

from kfs_core.catalog import PartitionCatalog, PartitionState, SegmentEntry, TopicRegistry, layout
from kfs_core.errors import KfsError, UnknownTopic
from kfs_core.maintenance_pause import emergency_pause_key, is_paused
from kfs_core.namespace import REPORTS_DIR
from kfs_core.reports import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    RUN_ID_PATTERN,
    STATUS_ERROR,
    STATUS_FAILED,
    STATUS_OK,
    STATUS_PAUSED,
    RunSummary,
    SparkInfo,
    exit_code_for,
    new_run_id,
    redact_url,
    report_key,
    run_files_prefix,
)
from kfs_core.storage import ObjectStore, open_store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "DESCRIPTOR_SCHEMA",
    "EXIT_ERROR",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "JOB_OUTPUT",
    "REPORTS_DIR",
    "STATUS_ERROR",
    "STATUS_FAILED",
    "STATUS_OK",
    "STATUS_PAUSED",
    "JobContext",
    "JobOptions",
    "JobResult",
    "SegmentDescriptor",
    "UsageError",
    "coerce_options",
    "descriptors_dataframe",
    "execute",
    "exit_driver",
    "get_spark",
    "job_parser",
    "list_partitions",
    "load_partitions",
    "main",
    "map_in_executors",
    "new_run_id",
    "read_descriptors",
    "report_key",
    "say",
    "summary_line",
    "write_json",
]


class UsageError(ValueError):
    """The job was asked for something impossible (a bad store URL, say): exit 2."""


_CATALOG_THREADS = 16

T = TypeVar("T")
R = TypeVar("R")
OptionsT = TypeVar("OptionsT", bound="JobOptions")


# --- options and the command line -------------------------------------------


@dataclass(frozen=True)
class JobOptions:
    """The flags every job takes.  Jobs with more flags subclass this (with defaults)."""

    store_url: str
    namespace: str
    topics: tuple[str, ...] | None = None
    dry_run: bool = False
    master: str | None = None
    s3_endpoint_url: str | None = None
    paused_exit_code: int = EXIT_OK
    run_id: str | None = None  # None: a fresh `new_run_id()`

    def __post_init__(self) -> None:
        if not self.store_url:
            raise ValueError("--store-url is required")
        if self.run_id is not None and not RUN_ID_PATTERN.fullmatch(self.run_id):
            raise ValueError(f"run id {self.run_id!r} must match {RUN_ID_PATTERN.pattern}")
        if self.topics is not None:
            object.__setattr__(self, "topics", tuple(self.topics))

    def open_store(self) -> ObjectStore:
        """The store the URL names (``--s3-endpoint-url`` applies to ``s3://`` URLs only)."""
        if self.store_url.lower().startswith("s3://"):
            return open_store(self.store_url, endpoint_url=self.s3_endpoint_url)
        return open_store(self.store_url)

    @classmethod
    def from_namespace(cls: type[OptionsT], args: argparse.Namespace) -> OptionsT:
        """Options from parsed arguments; flags map to fields by name."""
        values = vars(args)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{name: values[name] for name in names if name in values})

    def as_dict(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["store_url"] = redact_url(self.store_url)
        doc["topics"] = list(self.topics) if self.topics is not None else None
        return doc


def _topic_list(value: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in value.split(",") if t.strip())
    if not topics:
        raise argparse.ArgumentTypeError("--topics needs at least one topic name")
    return topics


def _run_id(value: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"must match {RUN_ID_PATTERN.pattern}")
    return value


def job_parser(job: str, description: str | None = None) -> argparse.ArgumentParser:
    """A parser with the shared flags; the job adds its own before parsing."""
    parser = argparse.ArgumentParser(
        prog=f"spark_jobs.{job}",
        description=(description or "").strip().splitlines()[0] if description else None,
    )
    parser.add_argument(
        "--store-url",
        default=os.environ.get("KFS_STORE_URL"),
        help="object store: file:///path, a directory or s3://bucket/prefix [KFS_STORE_URL]",
    )
    parser.add_argument(
        "--namespace",
        default=os.environ.get("KFS_NAMESPACE", "default"),
        help="KFS namespace [KFS_NAMESPACE, default 'default']",
    )
    parser.add_argument(
        "--topics",
        type=_topic_list,
        default=None,
        help="comma-separated topics (default: every topic of the namespace)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="report what would change, change nothing"
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master (default: spark-submit's, else local[*])",
    )
    parser.add_argument(
        "--s3-endpoint-url",
        default=os.environ.get("KFS_S3_ENDPOINT_URL"),
        help="S3 endpoint for s3:// stores (MinIO, moto) [KFS_S3_ENDPOINT_URL]",
    )
    parser.add_argument(
        "--paused-exit-code",
        type=int,
        default=EXIT_OK,
        help="exit status when the emergency pause flag stops the job (default 0)",
    )
    parser.add_argument(
        "--run-id",
        type=_run_id,
        default=None,
        help="id of this run, so a scheduler finds its summary at "
        "{ns}/_reports/<job>/<run-id>.json (default: UTC time and random bits)",
    )
    return parser


def coerce_options(
    options: JobOptions | argparse.Namespace | Sequence[str] | None,
    parser: argparse.ArgumentParser,
    cls: type[OptionsT],
) -> OptionsT:
    """A ``cls`` from whatever `run` was given: options, parsed args or an argv list."""
    if isinstance(options, cls):
        return options
    if isinstance(options, JobOptions):
        # A base JobOptions handed to a job with more flags: take the job's defaults.
        return cls(**{f.name: getattr(options, f.name) for f in dataclasses.fields(JobOptions)})
    if isinstance(options, argparse.Namespace):
        args = options
    else:
        args = parser.parse_args(list(options) if options is not None else None)
    if not args.store_url:
        parser.error("--store-url is required (or set KFS_STORE_URL)")
    return cls.from_namespace(args)


# --- Spark -----------------------------------------------------------------


def get_spark(app_name: str, master: str | None = None) -> SparkSession:
    """The active SparkSession if there is one (tests inject theirs), else a new one.

    The master is ``master`` if given, else whatever spark-submit configured
    (a driver that spark-submit launched finds its gateway in
    ``PYSPARK_GATEWAY_PORT``), else ``local[*]``.  For a local master the
    executors' Python defaults to this interpreter, so they import the same
    ``kfs_core``.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    launched_by_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master or not launched_by_spark_submit:
        effective = master or "local[*]"
        builder = builder.master(effective)
        if effective.startswith("local"):
            # Executors run this interpreter (same kfs_core), and a local run
            # talks to itself over loopback only, whatever the hostname says.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.host", "127.0.0.1").config(
                "spark.driver.bindAddress", "127.0.0.1"
            )
    return builder.getOrCreate()


# --- catalog on the driver ----------------------------------------------------


@dataclass(frozen=True)
class SegmentDescriptor:
    """One live segment: the catalog's `SegmentEntry` and the partition it belongs to.

    Small and picklable (the entry is a frozen pydantic model), so it crosses
    into Spark executors as is.  The entry's fields read through (``d.key``,
    ``d.base_offset``, ...); ``key`` and ``index_key`` are relative to the
    namespace (as in the catalog), `segment_object_key` / `index_object_key`
    are store keys.
    """

    namespace: str
    topic: str
    partition: int
    entry: SegmentEntry

    @property
    def base_offset(self) -> int:
        return self.entry.base_offset

    @property
    def last_offset(self) -> int:
        return self.entry.last_offset

    @property
    def record_count(self) -> int:
        return self.entry.record_count

    @property
    def size_bytes(self) -> int:
        return self.entry.size_bytes

    @property
    def index_size_bytes(self) -> int:
        return self.entry.index_size_bytes

    @property
    def min_timestamp(self) -> int:
        return self.entry.min_timestamp

    @property
    def max_timestamp(self) -> int:
        return self.entry.max_timestamp

    @property
    def codec(self) -> int:
        return self.entry.codec

    @property
    def created_ms(self) -> int:
        return self.entry.created_ms

    @property
    def key(self) -> str:
        return self.entry.key

    @property
    def index_key(self) -> str:
        return self.entry.index_key

    @property
    def segment_object_key(self) -> str:
        return layout.join(self.namespace, self.key)

    @property
    def index_object_key(self) -> str:
        return layout.join(self.namespace, self.index_key)

    @property
    def partition_prefix(self) -> str:
        """``{ns}/{topic}/{partition}/``: where the partition's objects live."""
        return layout.join(self.namespace, layout.partition_dir(self.topic, self.partition)) + "/"

    def as_row(self) -> dict[str, Any]:
        """A flat row in `DESCRIPTOR_SCHEMA`'s order: the partition, then the entry's fields."""
        return {
            "namespace": self.namespace,
            "topic": self.topic,
            "partition": self.partition,
            **self.entry.model_dump(),
        }


#: Spark schema of `descriptors_dataframe` (`SegmentDescriptor.as_row`, in order).
DESCRIPTOR_SCHEMA = (
    "namespace string, topic string, partition int, base_offset long, last_offset long, "
    "record_count long, size_bytes long, index_size_bytes long, min_timestamp long, "
    "max_timestamp long, codec int, created_ms long, key string, index_key string"
)


def list_partitions(
    store: ObjectStore, namespace: str, topics: Iterable[str] | None = None
) -> list[tuple[str, int]]:
    """``(topic, partition)`` pairs from the topic registry, sorted.

    ``topics`` restricts the list; a topic that does not exist raises
    `UnknownTopic` (a typo must not look like an empty, healthy namespace).
    """
    registry = TopicRegistry(store, namespace)
    names = list(topics) if topics is not None else registry.list_topics()
    pairs: list[tuple[str, int]] = []
    for name in sorted(set(names)):
        description = registry.describe(name)  # UnknownTopic if absent
        pairs.extend((name, p) for p in range(description.partitions))
    return pairs


def load_partitions(
    store: ObjectStore, namespace: str, topics: Iterable[str] | None = None
) -> list[PartitionState]:
    """The newest catalog state of every partition (loaded on a thread pool), sorted."""
    pairs = list_partitions(store, namespace, topics)

    def load(pair: tuple[str, int]) -> PartitionState:
        return PartitionCatalog(store, namespace, pair[0], pair[1]).load()

    if not pairs:
        return []
    with ThreadPoolExecutor(min(_CATALOG_THREADS, len(pairs))) as pool:
        return list(pool.map(load, pairs))


def read_descriptors(
    store: ObjectStore,
    namespace: str,
    topics: Iterable[str] | None = None,
    *,
    states: Sequence[PartitionState] | None = None,
) -> list[SegmentDescriptor]:
    """Every live segment of the namespace (or of ``topics``), in partition and offset order.

    Pass ``states`` from `load_partitions` to avoid loading the catalog twice.
    """
    if states is None:
        states = load_partitions(store, namespace, topics)
    return [
        SegmentDescriptor(namespace, s.topic, s.partition, entry)
        for s in states
        for entry in s.segments
    ]


def descriptors_dataframe(
    spark: SparkSession, descriptors: Sequence[SegmentDescriptor]
) -> DataFrame:
    """The descriptors as a DataFrame with `DESCRIPTOR_SCHEMA`."""
    rows = [tuple(d.as_row().values()) for d in descriptors]
    return spark.createDataFrame(rows, DESCRIPTOR_SCHEMA)


# --- executors --------------------------------------------------------------


def map_in_executors(
    spark: SparkSession,
    store: ObjectStore,
    items: Sequence[T],
    fn: Callable[[ObjectStore, T], R],
    *,
    num_slices: int | None = None,
) -> list[R]:
    """``[fn(store, item) for item in items]``, computed in Spark tasks, in input order.

    ``store`` is pickled into each task (stores carry only their settings;
    an S3 store builds its client on first use in the executor).  ``fn`` and
    ``items`` must be picklable; a module-level function is best.  ``fn``
    should catch the errors it can describe and return them in its result:
    an exception fails the whole Spark job.
    """
    if not items:
        return []
    slices = num_slices or min(len(items), max(1, spark.sparkContext.defaultParallelism * 4))
    indexed = list(enumerate(items))

    def run_partition(part: Iterable[tuple[int, T]]) -> Iterator[tuple[int, R]]:
        try:
            for i, item in part:
                yield i, fn(store, item)
        finally:
            store.close()

    results = spark.sparkContext.parallelize(indexed, slices).mapPartitions(run_partition).collect()
    results.sort(key=lambda pair: pair[0])
    return [result for _, result in results]


# --- life cycle and reports ---------------------------------------------------


def write_json(store: ObjectStore, key: str, doc: Mapping[str, Any]) -> None:
    store.put(key, json.dumps(doc, indent=2, sort_keys=True, default=str).encode("utf-8"))


@dataclass
class JobResult:
    """What a job's body returns: ``status`` is `STATUS_OK` or `STATUS_FAILED`."""

    status: str = STATUS_OK
    message: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


def conclude(
    message: str,
    counts: dict[str, int],
    details: dict[str, Any],
    *,
    paused: bool = False,
    failed_partitions: int = 0,
    first_failure: str = "",
    conflicts: int = 0,
) -> JobResult:
    """The `JobResult` of a partition-by-partition job, with the usual message tails.

    Conflicts (a partition changed meanwhile) are reported but not a failure:
    the next run retries them.  A pause wins over failures.
    """
    if conflicts:
        message += f"; {conflicts} partitions changed meanwhile (next run retries)"
    if paused:
        return JobResult(STATUS_PAUSED, message + "; paused by the emergency flag", counts, details)
    if failed_partitions:
        tail = f" ({first_failure})" if first_failure else ""
        return JobResult(
            STATUS_FAILED,
            f"{message}; {failed_partitions} partitions failed{tail}",
            counts,
            details,
        )
    return JobResult(STATUS_OK, message, counts, details)


class JobContext:
    """One run of a job: its options, store, run id, Spark session and phase timings."""

    def __init__(
        self,
        job: str,
        options: JobOptions,
        store: ObjectStore,
        run_id: str,
        spark: SparkSession | None = None,
    ) -> None:
        self.job = job
        self.options = options
        self.store = store
        self.run_id = run_id
        self.namespace = options.namespace
        self.timings: dict[str, float] = {}
        self._spark = spark

    @property
    def spark(self) -> SparkSession:
        """The session (created on first use, so a paused or empty run starts no JVM)."""
        if self._spark is None:
            self._spark = get_spark(f"kfs-{self.job}", self.options.master)
        return self._spark

    @property
    def report_prefix(self) -> str:
        """``{ns}/_reports/{job}/{run_id}/``: for a job's extra report files."""
        return run_files_prefix(self.namespace, self.job, self.run_id)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a step; the seconds land in the summary's ``timings``."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.timings[name] = round(self.timings.get(name, 0.0) + time.monotonic() - start, 3)

    def spark_info(self) -> SparkInfo | None:
        """Master and application id of the session this run used (None: it used none)."""
        if self._spark is None:
            return None
        context = self._spark.sparkContext
        # pyspark types ``master`` Optional, but SparkContext raises MASTER_URL_NOT_SET
        # unless spark.master is set, so a live context's master is always a str.
        master = cast(str, context.master)
        return SparkInfo(master=master, app_id=context.applicationId)

    def check_paused(self) -> bool:
        """True if the daemon's emergency pause flag is set (mutating jobs re-check it)."""
        return is_paused(self.store, self.namespace)


def _isoformat(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.UTC).isoformat(timespec="milliseconds")


def execute(
    job: str,
    options: JobOptions,
    body: Callable[[JobContext], JobResult],
    spark: SparkSession | None = None,
    *,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Run ``body`` as one job run and return (and store) its summary.

    Order: open the store; if the emergency pause flag is set, stop with
    status ``paused`` (nothing else is read or written besides the summary);
    otherwise call ``body``.  If ``body`` raises, an ``error`` summary is
    stored and printed and the exception propagates.  The Spark session is
    created lazily by `JobContext.spark` unless ``spark`` is given.
    """
    try:
        store = options.open_store()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ctx = JobContext(job, options, store, run_id or options.run_id or new_run_id(), spark)
    started = time.time()
    t0 = time.monotonic()
    try:
        try:
            if ctx.check_paused():
                result = JobResult(
                    status=STATUS_PAUSED,
                    message=f"emergency pause flag {emergency_pause_key(options.namespace)} "
                    "is set; nothing done",
                )
            else:
                result = body(ctx)
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}"
            summary = _summary(ctx, JobResult(STATUS_ERROR, message), started, t0)
            with contextlib.suppress(Exception):
                _publish(store, summary)
            raise
        summary = _summary(ctx, result, started, t0)
        _publish(store, summary)
        return summary.model_dump()
    finally:
        store.close()


def _summary(ctx: JobContext, result: JobResult, started: float, t0: float) -> RunSummary:
    duration = round(time.monotonic() - t0, 3)
    options = ctx.options
    return RunSummary(
        job=ctx.job,
        run_id=ctx.run_id,
        status=result.status,
        message=result.message,
        exit_code=exit_code_for(result.status, paused_exit_code=options.paused_exit_code),
        namespace=options.namespace,
        store_url=redact_url(options.store_url),
        topics=list(options.topics) if options.topics is not None else None,
        dry_run=options.dry_run,
        options=options.as_dict(),
        started_at=_isoformat(started),
        finished_at=_isoformat(started + duration),
        duration_s=duration,
        timings=dict(ctx.timings),
        counts=dict(result.counts),
        spark=ctx.spark_info(),
        details=dict(result.details),
        report_key=report_key(options.namespace, ctx.job, ctx.run_id),
    )


#: Where a job's own lines go, ``(stdout, stderr)``: its summary and dry-run lines on
#: the first, its one-line errors on the second.  The process's streams, unless a
#: caller running jobs on threads (the job server, `spark_jobs.server`) collects
#: each run's lines itself.
JOB_OUTPUT: contextvars.ContextVar[tuple[TextIO, TextIO] | None] = contextvars.ContextVar(
    "kfs_job_output", default=None
)


def say(line: str, *, error: bool = False) -> None:
    """Print one of the job's own lines (see `JOB_OUTPUT`)."""
    streams = JOB_OUTPUT.get()
    if streams is None:
        stream = sys.stderr if error else sys.stdout
    else:
        stream = streams[1] if error else streams[0]
    print(line, file=stream, flush=True)


def summary_line(summary: RunSummary) -> str:
    """The one line a run prints: status, message, counts, run id, duration, report key."""
    counts = " ".join(f"{k}={v}" for k, v in sorted(summary.counts.items()))
    return (
        f"kfs {summary.job} {summary.status.upper()}: {summary.message}"
        f"{' [' + counts + ']' if counts else ''} "
        f"(run {summary.run_id}, {summary.duration_s:.1f}s, report {summary.report_key})"
    )


def _publish(store: ObjectStore, summary: RunSummary) -> None:
    store.put(summary.report_key, summary.to_json())
    say(summary_line(summary))


def exit_driver(code: int) -> NoReturn:
    """End a job file's process with ``code``; under spark-submit, without Python's teardown.

    A driver that imported Great Expectations spends about a second of CPU
    finalizing its modules and objects at exit, a tenth of a scheduled
    validation task on a small namespace.  Nothing is left for that teardown to
    do: `execute` has closed the store and published the summary, the job's
    thread pools and temporary directories are closed, and the SparkContext is
    stopped by the JVM's shutdown hook once this process ends, as before.  Logs
    and standard streams are flushed here.  Run outside spark-submit (the
    JVM is then this process's child), it exits the ordinary way.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(
    run: Callable[..., dict[str, Any]],
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
) -> int:
    """The body of every job's ``main``: parse, `run`, turn the summary into an exit code.

    Bad arguments exit 2 (argparse); an unknown topic or a store that cannot
    be opened is a one-line message and exit 2; anything else unexpected is
    a one-line message on stderr and exit 3 (its summary is stored when the
    store was reachable).
    """
    args = parser.parse_args(list(argv) if argv is not None else None)
    if not args.store_url:
        parser.error("--store-url is required (or set KFS_STORE_URL)")
    try:
        summary = run(args)
    except (UnknownTopic, UsageError) as exc:
        say(f"{parser.prog}: error: {exc}", error=True)
        return EXIT_USAGE
    except KfsError as exc:
        say(f"{parser.prog}: failed: {exc}", error=True)
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - the operator gets one line, not a traceback
        say(f"{parser.prog}: failed: {type(exc).__name__}: {exc}", error=True)
        return EXIT_ERROR
    return int(summary["exit_code"])
