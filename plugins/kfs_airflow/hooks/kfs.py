"""`KfsHook`: where a KFS namespace lives, read from an Airflow connection.

Connection ``kfs_default`` (type ``kfs``)::

    extra     {"store_url": "s3://kfs-data/prod" | "file:///srv/kfs/store",
               "namespace": "default",
               "s3_endpoint_url": "http://minio:9000",     # MinIO, moto; optional
               "region_name": "eu-west-1",                 # optional
               "jobs_server": "http://127.0.0.1:7079",     # optional; else spark-submit
               "bootstrap_servers": "kfs:9092",            # the daemon: `KfsAdminHook`
               "broker_session_timeout_ms": 9000, ...}     # the daemons'; optional
    login     AWS access key id      (optional; else the usual AWS chain)
    password  AWS secret access key  (optional)

The extra may also hold ``aws_session_token`` (temporary credentials).  The
credentials go to the store client itself, never into ``os.environ``: a key
rotated in the connection is used by the next hook (every task and every page
request makes its own), and no other boto3 user in the process sees it.

As an environment variable, e.g. ``AIRFLOW_CONN_KFS_DEFAULT='{"conn_type": "kfs",
"extra": {"store_url": "file:///srv/kfs/store", "namespace": "default"}}'``.

The hook owns the store client and every read of the store the plugin makes,
and it runs the maintenance jobs (`run_job`: on the job server the connection
names, else through spark-submit).  Operators and sensors ask it for the
topics, the catalog, a job's run and its summary (`run_summary`); the KFS page
asks it for the catalog, the daemons' heartbeats (`heartbeats`) and store WAL
objects (`store_wal_headers`), the run history (`report_history`), the
data-quality reports (`validation_report`), the Data Docs files and its own
stored copy (`page_copy`).  The reports are `kfs_core.reports` models, the same the jobs
write.  The consumer groups live in the daemon, not in the store: the page asks
`kfs_airflow.hooks.admin.KfsAdminHook` for them.

A hook reads its connection once.  The readers share one store client
(`get_conn`), opened on first use and closed by `close` (or ``with KfsHook()
as hook:``); `get_store` opens a separate one the caller closes.  The KFS
page's cache (`kfs_airflow.overview_cache`) keeps one hook open per store
(`store_identity`) and the `PartitionCatalog` objects it hands out
(`partition_catalog`), so it can refresh them incrementally between requests.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from types import TracebackType
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from kfs_airflow.hooks.base import KfsBaseHook

if TYPE_CHECKING:
    # kfs_core is imported where it is used: DAG files import this module through the
    # operators, and parsing a DAG must stay cheap.
    from pyiceberg.catalog import Catalog

    from kfs_core.catalog import PartitionCatalog, PartitionState, TopicRegistry
    from kfs_core.cluster.view import NodeInfo
    from kfs_core.log.wal.store import WalObjectHeader
    from kfs_core.reports import RunSummary, StoredRun, ValidationReport
    from kfs_core.storage import ObjectInfo, ObjectStore

__all__ = ["JobRunFailed", "KfsConnectionError", "KfsHook", "SparkSubmit"]

#: Run summaries read at once by `report_history`.
_SUMMARY_THREADS = 8
#: Store WAL object headers read at once by `store_wal_headers`.
_WAL_HEADER_THREADS = 8

#: How `run_job` runs spark-submit: called with the job's arguments and the
#: environment the connection adds (the Spark provider's operator does the rest).
SparkSubmit = Callable[[list[str], dict[str, str]], None]


class KfsConnectionError(ValueError):
    """The ``kfs`` connection is missing a setting or names an unusable store."""


class JobRunFailed(AirflowException):
    """The job ran on the job server and ended with a non-zero ``exit_code``."""

    def __init__(self, job: str, exit_code: int, output: str) -> None:
        super().__init__(f"kfs {job} on the job server exited {exit_code}: {output}")
        self.job = job
        self.exit_code = exit_code
        self.output = output

    def __reduce__(self) -> tuple[type[JobRunFailed], tuple[str, int, str]]:
        # Rebuilt from its fields: task failures cross process boundaries pickled.
        return type(self), (self.job, self.exit_code, self.output)


class KfsHook(KfsBaseHook):
    """Store URL, namespace and S3 settings of a KFS namespace, from a ``kfs`` connection."""

    def __init__(self, kfs_conn_id: str = KfsBaseHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(kfs_conn_id, **kwargs)
        self._store: ObjectStore | None = None
        self._store_lock = threading.Lock()
        self._server_run: tuple[str, str] | None = None  # (job server, run id) of `run_job`

    def __enter__(self) -> KfsHook:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port", "host"],
            "relabeling": {"login": "AWS access key id", "password": "AWS secret access key"},
            "placeholders": {
                "extra": json.dumps(
                    {
                        "store_url": "s3://kfs-data/prod or file:///srv/kfs/store",
                        "namespace": "default",
                        "s3_endpoint_url": "http://minio:9000",
                        "bootstrap_servers": "kfs:9092",
                    }
                ),
            },
        }

    # --- settings -------------------------------------------------------------

    @cached_property
    def _settings(self) -> dict[str, Any]:
        conn = self._connection
        extra = self._extra
        store_url = extra.get("store_url") or ""
        if not store_url:
            raise KfsConnectionError(
                f"connection {self.kfs_conn_id!r} has no store_url in its extra "
                '(e.g. {"store_url": "file:///srv/kfs/store", "namespace": "default"})'
            )
        return {
            "store_url": str(store_url),
            "namespace": str(extra.get("namespace") or "default"),
            "s3_endpoint_url": str(extra.get("s3_endpoint_url") or ""),
            "region_name": str(extra.get("region_name") or ""),
            "aws_access_key_id": conn.login or "",
            "aws_secret_access_key": conn.password or "",
            "aws_session_token": str(extra.get("aws_session_token") or ""),
        }

    @property
    def store_url(self) -> str:
        return str(self._settings["store_url"])

    @property
    def namespace(self) -> str:
        return str(self._settings["namespace"])

    @property
    def jobs_server(self) -> str:
        """The job server the maintenance tasks use (extra ``jobs_server``); "": spark-submit."""
        return str(self._extra.get("jobs_server") or "").strip()

    @property
    def store_identity(self) -> str:
        """Which store this hook reads, as one opaque string: URL, namespace, endpoint, credentials.

        A digest, so a cache keyed by it (the KFS page's) neither holds nor logs
        the secret, yet a rotated key or a new endpoint gives a new identity and
        nothing read with the old settings is served for the new ones.
        """
        settings = self._settings
        fields = (
            "store_url",
            "namespace",
            "s3_endpoint_url",
            "region_name",
            "aws_access_key_id",
            "aws_secret_access_key",
            "aws_session_token",
        )
        text = json.dumps([settings[name] for name in fields])
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def session_timeout_ms(self) -> int | str:
        """The daemons' ``broker.session.timeout.ms`` (extra ``broker_session_timeout_ms``).

        The KFS page counts a running daemon dead once its heartbeat is older
        than this; default the daemons' default (`KFS_BROKER_SESSION_TIMEOUT_MS`).
        A value that is not a positive whole number comes back as the text it
        is, for the page to name.
        """
        from kfs_core.cluster.status import DEFAULT_SESSION_TIMEOUT_MS

        raw = self._extra.get("broker_session_timeout_ms")
        if raw is None or raw == "":
            return DEFAULT_SESSION_TIMEOUT_MS
        try:
            value = int(str(raw).strip())
        except ValueError:
            return str(raw)
        return value if value > 0 else str(raw)

    @property
    def is_s3(self) -> bool:
        return self.store_url.lower().startswith("s3://")

    # --- store clients ----------------------------------------------------------

    def get_conn(self) -> ObjectStore:
        """The hook's store client (Airflow's name for it): opened once, shared by the readers.

        Opening it checks the connection: a missing store URL or an unusable
        one raises `KfsConnectionError` here.  `close` closes it.
        """
        with self._store_lock:
            if self._store is None:
                self._store = self.get_store()
            return self._store

    def close(self) -> None:
        """Close the shared store client (a later read opens a new one)."""
        with self._store_lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()

    def get_store(self) -> ObjectStore:
        """A new client for the connection's store; the caller closes it.

        S3 credentials from the connection are handed to the store itself (as
        the amazon provider's hooks hand them to boto3), never put into
        ``os.environ``; without them the store uses the standard AWS chain
        (an instance profile, ``AWS_PROFILE`` ...).
        """
        from kfs_core.storage import open_store

        settings = self._settings
        try:
            if not self.is_s3:
                return open_store(self.store_url)
            return open_store(
                self.store_url,
                endpoint_url=settings["s3_endpoint_url"] or None,
                region_name=settings["region_name"] or None,
                aws_access_key_id=settings["aws_access_key_id"] or None,
                aws_secret_access_key=settings["aws_secret_access_key"] or None,
                aws_session_token=settings["aws_session_token"] or None,
            )
        except ValueError as exc:
            raise KfsConnectionError(f"connection {self.kfs_conn_id!r}: {exc}") from None

    # --- the catalog ----------------------------------------------------------------

    def topics(self) -> TopicRegistry:
        """The namespace's topic registry, on the hook's store client."""
        from kfs_core.catalog import TopicRegistry

        return TopicRegistry(self.get_conn(), self.namespace)

    def list_topics(self) -> list[str]:
        """The namespace's topics, sorted."""
        return sorted(self.topics().list_topics())

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        """The newest catalog state of one partition."""
        from kfs_core.catalog import PartitionCatalog

        return PartitionCatalog(self.get_conn(), self.namespace, topic, partition).load()

    def partition_catalog(self, topic: str, partition: int) -> PartitionCatalog:
        """A `PartitionCatalog` on the hook's store client, for a reader that keeps it.

        Its ``refresh`` reads only the commits after the state it holds, so a
        long-lived reader (the KFS page's cache) pays a full load once.  It is
        usable while the hook is open (`close` closes the client under it).
        """
        from kfs_core.catalog import PartitionCatalog

        return PartitionCatalog(self.get_conn(), self.namespace, topic, partition)

    def partition_states(self, topics: Iterable[str] | None = None) -> list[PartitionState]:
        """The newest catalog state of every partition of ``topics`` (default: all), sorted.

        A topic that does not exist raises `kfs_core.errors.UnknownTopic`.
        """
        from kfs_core.catalog import PartitionCatalog, TopicRegistry

        store = self.get_store()
        try:
            registry = TopicRegistry(store, self.namespace)
            names = sorted(set(topics)) if topics is not None else registry.list_topics()
            return [
                PartitionCatalog(store, self.namespace, name, partition).load()
                for name in names
                for partition in range(registry.describe(name).partitions)
            ]
        finally:
            store.close()

    # --- the daemons: heartbeats and the store WAL --------------------------------------

    def heartbeats(self) -> tuple[list[tuple[NodeInfo, int]], list[str]]:
        """Every daemon's heartbeat with the wall clock it carries, and the corrupt ones' messages.

        As `kfs cluster status` reads them (`kfs_core.cluster.status.read_heartbeats`).
        """
        from kfs_core.cluster.status import read_heartbeats

        return read_heartbeats(self.get_conn(), self.namespace)

    def store_wal_headers(
        self, known: dict[str, WalObjectHeader] | None = None
    ) -> tuple[list[tuple[ObjectInfo, WalObjectHeader]], list[str]]:
        """Every ``durability=store`` WAL object of the namespace with its header; and the damaged ones.

        The objects hold what the daemons acknowledged and have not yet
        sealed into segments (`kfs_core.log.wal.store`; a writer deletes each
        once its frames are in the catalog).  One ranged GET per object whose
        header ``known`` (key -> header, from an earlier call) does not hold:
        objects never change.  An object deleted since the listing is left
        out; a damaged one is one message in the second list.
        """
        from kfs_core.errors import CorruptWal, ObjectNotFound
        from kfs_core.log.wal.store import StoreWalReader

        known = known or {}
        reader = StoreWalReader(self.get_conn(), self.namespace)
        objects = [info for info, _node, _incarnation, _seq in reader.objects()]

        def read(info: ObjectInfo) -> WalObjectHeader | str | None:
            cached = known.get(info.key)
            if cached is not None:
                return cached
            try:
                return reader.header(info)
            except ObjectNotFound:
                return None
            except CorruptWal as exc:
                return str(exc)

        results: list[WalObjectHeader | str | None] = []
        if objects:
            with ThreadPoolExecutor(min(_WAL_HEADER_THREADS, len(objects))) as pool:
                results = list(pool.map(read, objects))
        found: list[tuple[ObjectInfo, WalObjectHeader]] = []
        damaged: list[str] = []
        for info, result in zip(objects, results, strict=True):
            if isinstance(result, str):
                damaged.append(result)
            elif result is not None:
                found.append((info, result))
        return found, damaged

    # --- the jobs' reports ------------------------------------------------------------

    def _read_json(self, key: str) -> dict[str, Any]:
        doc = json.loads(self.get_conn().get(key))
        if not isinstance(doc, dict):
            raise ValueError(f"{key} holds a JSON {type(doc).__name__}, not an object")
        return doc

    def run_summary(self, job: str, run_id: str) -> RunSummary | None:
        """The summary run ``run_id`` of ``job`` stored; None when it stored none.

        A summary that cannot be read or parsed raises.
        """
        from kfs_core.errors import ObjectNotFound
        from kfs_core.reports import RunSummary, report_key

        try:
            doc = self._read_json(report_key(self.namespace, job, run_id))
        except ObjectNotFound:
            return None
        return RunSummary.model_validate(doc)

    def run_ids(self, job: str) -> list[str]:
        """The ids of the runs of ``job`` that stored a summary, newest first."""
        from kfs_core.reports import reports_prefix, run_id_of

        prefix = reports_prefix(self.namespace, job)
        found = (run_id_of(self.namespace, job, info.key) for info in self.get_conn().list(prefix))
        return sorted((run_id for run_id in found if run_id is not None), reverse=True)

    def report_history(self, job: str, *, max_runs: int = 20) -> list[StoredRun]:
        """The newest ``max_runs`` runs of ``job``, newest first (the page's tables and trend).

        Listing errors raise; a summary that cannot be read or parsed is a
        `StoredRun` with its ``error``, so one bad object hides nothing else.
        """
        from kfs_core.reports import RunSummary, StoredRun, report_key

        def read(run_id: str) -> StoredRun:
            try:
                doc = self._read_json(report_key(self.namespace, job, run_id))
                return StoredRun(run_id, RunSummary.model_validate(doc))
            except Exception as exc:  # noqa: BLE001 - the reader shows it
                return StoredRun(run_id, error=exc)

        run_ids = self.run_ids(job)[:max_runs]
        if not run_ids:
            return []
        with ThreadPoolExecutor(min(_SUMMARY_THREADS, len(run_ids))) as pool:
            return list(pool.map(read, run_ids))

    def read_validation_report(self, key: str) -> ValidationReport:
        """The data-quality report stored at ``key`` (a summary's ``details.report_key``)."""
        from kfs_core.reports import ValidationReport

        return ValidationReport.model_validate(self._read_json(key))

    def validation_report(self, summary: RunSummary) -> ValidationReport | None:
        """The data-quality report of a validation run; None when the run made none.

        It is the summary's ``details.report``, else the ``report.json`` that
        ``details.report_key`` names (`kfs_core.errors.ObjectNotFound` when that
        object is missing).  Paused runs and dry runs' failures to start have neither.
        """
        from kfs_core.reports import ValidationReport

        embedded = summary.details.get("report")
        if isinstance(embedded, dict) and embedded:
            return ValidationReport.model_validate(embedded)
        key = summary.detail_str("report_key")
        return self.read_validation_report(key) if key else None

    def latest_validation_report(
        self, *, max_runs: int = 20
    ) -> tuple[RunSummary, ValidationReport] | None:
        """The newest of the last ``max_runs`` validation runs that has a report, with it."""
        from kfs_core.reports import VALIDATION_JOB

        for run in self.report_history(VALIDATION_JOB, max_runs=max_runs):
            if run.summary is None:
                continue
            try:
                report = self.validation_report(run.summary)
            except Exception:  # noqa: BLE001 - an unreadable report is no report
                continue
            if report is not None:
                return run.summary, report
        return None

    def validation_page(self, run_id: str) -> str | None:
        """Path inside the run's ``data_docs/`` of its validation result page (one per run)."""
        from kfs_core.reports import data_docs_prefix

        prefix = data_docs_prefix(self.namespace, run_id)
        for info in self.get_conn().list(prefix + "validations/"):
            if info.key.endswith(".html"):
                return info.key[len(prefix) :]
        return None

    def data_docs_file(self, run_id: str, path: str) -> bytes | None:
        """A file of a validation run's Data Docs; None if ``run_id``/``path`` leave them.

        ``path`` is relative to the run's ``data_docs/`` (`kfs_core.reports.data_docs_key`
        refuses anything else); a missing file raises `kfs_core.errors.ObjectNotFound`.
        """
        from kfs_core.reports import data_docs_key

        key = data_docs_key(self.namespace, run_id, path)
        return None if key is None else self.get_conn().get(key)

    def table_docs_file(self, run_id: str, table: str, commit: str, path: str) -> bytes | None:
        """A file of a table snapshot's Data Docs; None if the request names anything else.

        (`kfs_core.reports.table_docs_key`); a missing file raises
        `kfs_core.errors.ObjectNotFound`.
        """
        from kfs_core.reports import table_docs_key

        key = table_docs_key(self.namespace, run_id, table, commit, path)
        return None if key is None else self.get_conn().get(key)

    # --- tables of topics -----------------------------------------------------------

    def table_catalog(self) -> Catalog:
        """The namespace's Iceberg table catalog (`kfs_core.tables.open_catalog`)."""
        from kfs_core.tables import open_catalog

        settings = self._settings
        return open_catalog(
            self.store_url,
            self.namespace,
            s3_endpoint_url=settings["s3_endpoint_url"] or None,
            s3_credentials=(
                settings["aws_access_key_id"] or None,
                settings["aws_secret_access_key"] or None,
                settings["aws_session_token"] or None,
            ),
        )

    def table_report(self, key: str) -> dict[str, Any]:
        """A table snapshot's data-quality report (``report.json``)."""
        return self._read_json(key)

    # --- the KFS page's copy --------------------------------------------------------

    @property
    def page_copy_key(self) -> str:
        """``{ns}/_page/overview.json``: the KFS page's last overview (`kfs_airflow.overview_cache`)."""
        from kfs_core.catalog.layout import join
        from kfs_core.namespace import PAGE_DIR

        return join(self.namespace, PAGE_DIR, "overview.json")

    def page_copy(self) -> bytes | None:
        """The stored copy of the KFS page's overview; None if there is none yet."""
        from kfs_core.errors import ObjectNotFound

        try:
            return self.get_conn().get(self.page_copy_key)
        except ObjectNotFound:
            return None

    def save_page_copy(self, data: bytes) -> None:
        """Replace the stored copy of the KFS page's overview."""
        self.get_conn().put(self.page_copy_key, data)

    # --- Spark jobs -----------------------------------------------------------

    def job_args(
        self, *, topics: Sequence[str] | str | None = None, dry_run: bool = False
    ) -> list[str]:
        """The shared ``spark_jobs`` arguments for this namespace (see `spark_jobs.common`)."""
        args = ["--store-url", self.store_url, "--namespace", self.namespace]
        if self._settings["s3_endpoint_url"]:
            args += ["--s3-endpoint-url", self._settings["s3_endpoint_url"]]
        if isinstance(topics, str):
            topics = [t.strip() for t in topics.split(",") if t.strip()]
        if topics:
            args += ["--topics", ",".join(topics)]
        if dry_run:
            args.append("--dry-run")
        return args

    def job_env(self) -> dict[str, str]:
        """Environment a job process needs for S3 credentials the connection holds."""
        env: dict[str, str] = {}
        if self._settings["aws_access_key_id"]:
            env["AWS_ACCESS_KEY_ID"] = self._settings["aws_access_key_id"]
        if self._settings["aws_secret_access_key"]:
            env["AWS_SECRET_ACCESS_KEY"] = self._settings["aws_secret_access_key"]
        if self._settings["aws_session_token"]:
            env["AWS_SESSION_TOKEN"] = self._settings["aws_session_token"]
        if self._settings["region_name"]:
            env["AWS_DEFAULT_REGION"] = self._settings["region_name"]
        return env

    def run_job(
        self,
        job: str,
        *,
        run_id: str,
        topics: Sequence[str] | str | None = None,
        dry_run: bool = False,
        extra_args: Sequence[str] = (),
        spark_submit: SparkSubmit,
    ) -> None:
        """Run ``job`` as run ``run_id``: on the connection's job server, else by ``spark_submit``.

        The job gets `job_args` (store, namespace, ``topics``, ``dry_run``), its
        own flags (``extra_args``) and ``--run-id``, which names the run's
        summary object ``{ns}/_reports/<job>/<run-id>.json`` (`run_summary`).

        With a job server (extra ``jobs_server``, `spark_jobs.server`, started by
        ``kfs jobs serve``) the arguments go there over HTTP and the call waits
        for the run's end: no spark-submit, JVM, session or Great Expectations
        import per task.  The server runs the job with its own environment (its
        store credentials, its Spark master); a non-zero exit raises
        `JobRunFailed`, and `cancel_job` cancels the run's Spark jobs there.
        Without one, ``spark_submit`` gets the arguments and the environment the
        connection adds (`job_env`) and raises what spark-submit's failure raises.
        """
        args = [*self.job_args(topics=topics, dry_run=dry_run), *extra_args, "--run-id", run_id]
        server = self.jobs_server
        if not server:
            spark_submit(args, self.job_env())
            return
        from kfs_core.jobs_client import run_on_server

        self._server_run = (server, run_id)
        self.log.info("running kfs %s on the job server %s", job, server)
        finished = run_on_server(server, job, args)
        for line in finished.output.splitlines():
            self.log.info("%s", line)
        for line in finished.errors.splitlines():
            self.log.warning("%s", line)
        if finished.exit_code != 0:
            text = "; ".join(t for t in (finished.errors, finished.output) if t)
            raise JobRunFailed(job, finished.exit_code, text)

    def cancel_job(self) -> bool:
        """Cancel the run `run_job` sent to the job server; False if it sent none there.

        A run through spark-submit is the caller's to stop (the Spark provider's ``on_kill``).
        """
        if self._server_run is None:
            return False
        from kfs_core.jobs_client import JobServerError, cancel_on_server

        server, run_id = self._server_run
        try:
            cancelled = cancel_on_server(server, run_id)
        except JobServerError as exc:
            self.log.warning("could not cancel run %s: %s", run_id, exc)
        else:
            self.log.info("run %s cancelled on the job server: %s", run_id, cancelled)
        return True

    def test_connection(self) -> tuple[bool, str]:
        try:
            topics = self.list_topics()
        except Exception as exc:  # noqa: BLE001 - Airflow shows the message in the connection form
            return False, str(exc)
        finally:
            self.close()
        return True, f"{self.store_url} namespace {self.namespace!r}: {len(topics)} topics"
