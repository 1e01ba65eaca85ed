"""# KFS topic to Parquet, an example to copy.

An incremental copy of one topic into Parquet files: Spark's own Kafka
connector reads the daemon as it would any Kafka broker, in a Structured
Streaming query with a checkpoint and `trigger(availableNow=True)`.  Each run
copies what the topic received since the last run, then stops; every record
lands in the output exactly once, however often runs fail, are killed or are
retried.  The Spark side is `spark_jobs/kafka_source.py`.

Not a maintenance DAG: it is paused on creation and has no schedule.  Copy this
file, pick a topic and paths, and give it a schedule (e.g. `"*/15 * * * *"`;
`max_active_runs=1` keeps two runs off one checkpoint).

**Tasks**

1. `copy` - `spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0
   spark_jobs/kafka_source.py ...`, in the `kfs_spark` pool, through the Apache
   Spark provider as the maintenance DAGs do without a job server: Spark from
   the `spark_default` connection (`local[*]` when there is none).  Not on the
   job server: its warm driver has no Kafka connector, and `--packages` must be
   given before a JVM starts.  The first run on a machine downloads the
   connector and its dependencies (63 MB) from Maven Central into
   `~/.ivy2.5.2`, a few seconds on a fast link; later runs resolve from there.

**Params** (Trigger DAG w/ config):

- `topic` - default `demo-events`, the topic `kfs run` feeds.
- `output_path`, `checkpoint_path` - the Parquet directory and the query's
  checkpoint; empty: `$KFS_HOME/exports/<topic>/parquet` and `.../checkpoint`
  where the driver runs (`KFS_HOME` as `kfs` reads it, default `.kfs` in the
  working directory).  On a cluster, use paths every executor shares.  Another
  pair of paths starts another, independent copy.
- `starting_offsets` - where the first run starts: `earliest` (the default),
  `latest` or Spark's JSON per partition; later runs go on from the checkpoint.

The daemon is the `kfs_default` connection's `bootstrap_servers`, with its
TLS/SASL settings (`security_protocol`, `sasl_mechanism`, `sasl_username`,
`sasl_password`, `ssl_ca_location`, ...) handed to the job in its environment,
never on its command line.

**Reading the outcome.** The task log has a line such as `kfs
kafka_source: copied 120 records of demo-events in 1 micro-batch(es) to ...`.
Read the output with Spark - `spark.read.parquet(output_path)` - which lists
only the files of committed micro-batches (`_spark_metadata`): a run killed
mid-batch leaves files no commit names, and the next run writes those records
again.  Each row is one record: `key`, `value` (binary), `topic`, `partition`,
`offset`, `timestamp`, `timestampType`, `headers`; (`partition`, `offset`) is
unique.  A run fails when records the checkpoint expects were deleted
(retention ran ahead of the copies).
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param
from airflow.sdk.exceptions import AirflowFailException
from kfs_airflow import dags_support as kfs
from kfs_airflow.hooks import KfsAdminHook
from kfs_airflow.hooks.spark_submit import for_kfs_job, spark_connection_exists

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk import Context

#: Spark's Kafka connector of the pinned Spark release (the job's KAFKA_PACKAGE).
KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
#: Where the job reads the daemon's TLS/SASL settings (the job's CLIENT_CONFIG_ENV).
CLIENT_CONFIG_ENV = "KFS_KAFKA_CLIENT_CONFIG"


def copy_application() -> str:
    """``kafka_source.py`` of the installed spark_jobs package (found, not imported)."""
    spec = importlib.util.find_spec("spark_jobs")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the spark_jobs package is not installed")
    return str(Path(next(iter(spec.submodule_search_locations))) / "kafka_source.py")


class TopicToParquetOperator(SparkSubmitOperator):
    """spark-submit of the copy, the daemon's address and settings from a ``kfs`` connection."""

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "topic",
        "output_path",
        "checkpoint_path",
        "starting_offsets",
    )

    def __init__(
        self,
        *,
        topic: str,
        output_path: str = "",
        checkpoint_path: str = "",
        starting_offsets: str = "earliest",
        kfs_conn_id: str = KfsAdminHook.default_conn_name,
        conn_id: str = "spark_default",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("application", copy_application())
        kwargs.setdefault("packages", KAFKA_PACKAGE)
        super().__init__(conn_id=conn_id, **kwargs)
        self.topic = topic
        self.output_path = output_path
        self.checkpoint_path = checkpoint_path
        self.starting_offsets = starting_offsets
        self.kfs_conn_id = kfs_conn_id

    def _get_hook(self) -> SparkSubmitHook:
        # As the maintenance tasks: spark_default, else local[*] with this interpreter.
        found = spark_connection_exists(self._conn_id)
        return for_kfs_job(super()._get_hook(), connection_found=found)

    def execute(self, context: Context) -> None:
        daemon = KfsAdminHook(kfs_conn_id=self.kfs_conn_id)
        if not daemon.bootstrap_servers:
            raise AirflowFailException(
                f"connection {self.kfs_conn_id!r} names no daemon: add bootstrap_servers to its extra"
            )
        paths = {"--output-path": self.output_path, "--checkpoint-path": self.checkpoint_path}
        self.application_args = [
            *("--bootstrap-servers", daemon.bootstrap_servers, "--topic", self.topic),
            *("--starting-offsets", self.starting_offsets or "earliest"),
            *(arg for flag, path in paths.items() if path for arg in (flag, path)),
        ]
        security = daemon.daemon_security()
        if security:
            self.env_vars = {**(self.env_vars or {}), CLIENT_CONFIG_ENV: json.dumps(security)}
        self._hook = None  # built with the arguments and environment above
        super().execute(context)


with DAG(
    dag_id="kfs_stream_to_parquet",
    schedule=None,
    start_date=kfs.START_DATE,
    catchup=False,
    max_active_runs=1,  # one query per checkpoint at a time
    is_paused_upon_creation=True,
    default_args=kfs.default_args(),
    params={
        "topic": Param("demo-events", type="string", minLength=1, title="Topic"),
        "output_path": Param(
            "",
            type="string",
            title="Output path",
            description="Parquet directory; empty: $KFS_HOME/exports/<topic>/parquet.",
        ),
        "checkpoint_path": Param(
            "",
            type="string",
            title="Checkpoint path",
            description="The query's checkpoint; empty: $KFS_HOME/exports/<topic>/checkpoint.",
        ),
        "starting_offsets": Param(
            "earliest",
            type="string",
            title="Starting offsets",
            description="Where the first run starts: earliest, latest or Spark's JSON.",
        ),
    },
    tags=["kfs", "example"],
    doc_md=__doc__,
):
    TopicToParquetOperator(
        task_id="copy",
        name="kfs-stream-to-parquet",
        topic="{{ params.topic }}",
        output_path="{{ params.output_path }}",
        checkpoint_path="{{ params.checkpoint_path }}",
        starting_offsets="{{ params.starting_offsets }}",
        pool=kfs.SPARK_POOL,
        conf=dict(kfs.SPARK_CONF),
        execution_timeout=_dt.timedelta(hours=1),
    )
