r"""Spark's own Kafka connector on KFS topics, and an incremental copy of a topic into Parquet.

KFS speaks the Kafka protocol, so Spark reads and writes its topics with the
connector Spark ships for Kafka, ``spark-sql-kafka-0-10`` (`KAFKA_PACKAGE`, of
the Spark release constraints.txt pins).  It is not among pyspark's jars:
``spark-submit --packages`` (or ``spark.jars.packages``, set before the JVM
starts) resolves it and its dependencies through Ivy from Maven Central into
``~/.ivy2.5.2``: 11 jars, 63 MB, downloaded once (5-7 s on a fast link); later
runs resolve from that cache in about a second, offline too.

- `kafka_options` - the source's and sink's ``kafka.*`` options for a daemon,
  from librdkafka-style settings (the ``kfs`` connection's, as
  `kfs_airflow.hooks.KfsAdminHook.daemon_security` returns them): TLS and SASL,
  with the PEM files' contents inline, so executors need no copies of them.
- `CopyOptions`, `start_parquet_copy` - a streaming query from a topic into
  Parquet files, with a checkpoint: the raw records (``key``, ``value``,
  ``topic``, ``partition``, ``offset``, ``timestamp``, ``timestampType``,
  ``headers``), exactly once across stops and restarts.  The file sink commits
  every micro-batch in ``<output>/_spark_metadata``; read the output with Spark,
  which lists only committed files (a batch cut short leaves files no commit
  names).
- `copy_available` - one incremental copy: whatever the topic holds that the
  checkpoint has not seen, then stop (``trigger(availableNow=True)``).  The
  ``kfs_stream_to_parquet`` DAG runs it on each run.
- the command line spark-submit runs (`run_cli`)::

      spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 \
          spark_jobs/kafka_source.py --bootstrap-servers 127.0.0.1:9092 --topic demo-events \
          [--output-path DIR] [--checkpoint-path DIR] [--starting-offsets earliest]

  The daemon's TLS/SASL settings, if any, come as a JSON object in
  ``KFS_KAFKA_CLIENT_CONFIG`` (the environment keeps the password out of the
  command line and the task log).

This is not a maintenance job: it writes no run summary to the store, and
``kfs jobs`` and ``python -m spark_jobs`` do not list it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfs_core.config import default_home
from kfs_core.reports import EXIT_ERROR, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = [
    "CLIENT_CONFIG_ENV",
    "KAFKA_PACKAGE",
    "CopyOptions",
    "CopyResult",
    "copy_available",
    "default_paths",
    "kafka_options",
    "read_topic_stream",
    "run_cli",
    "start_parquet_copy",
]

#: Spark's Kafka connector, of the pinned Spark release (Scala 2.13 build); it must match
#: the installed pyspark exactly (tests/compat/test_spark_kafka.py checks that it does).
KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"

#: The environment variable with the daemon's librdkafka-style TLS/SASL settings (JSON).
CLIENT_CONFIG_ENV = "KFS_KAFKA_CLIENT_CONFIG"

_SASL_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
#: librdkafka settings that mean the same to the Java client, under the same name.
_SAME_NAME = ("security.protocol", "sasl.mechanism", "ssl.endpoint.identification.algorithm")
#: librdkafka settings `kafka_options` turns into the Java client's.
_CONVERTED = (
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
)


# --- options ----------------------------------------------------------------------------


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def kafka_options(
    bootstrap_servers: str, client_config: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The ``kafka.*`` options of Spark's Kafka source and sink for one daemon.

    ``client_config`` holds librdkafka's names (``security.protocol``,
    ``sasl.mechanism``, ``sasl.username``, ``sasl.password``,
    ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``,
    ``ssl.key.password``), as KFS's clients and the ``kfs`` connection spell them; the
    Java client wants a JAAS line for SASL and PEM contents for TLS.  The client
    key must be PKCS#8 (``BEGIN PRIVATE KEY`` or ``BEGIN ENCRYPTED PRIVATE
    KEY`` with ``ssl.key.password``).  Any other setting is a `ValueError`.
    """
    servers = bootstrap_servers.strip()
    if not servers:
        raise ValueError("no bootstrap servers: the daemon's Kafka address is required")
    config = {k: str(v) for k, v in (client_config or {}).items() if v not in (None, "")}
    unknown = sorted(set(config) - {*_SAME_NAME, *_CONVERTED})
    if unknown:
        raise ValueError(f"unsupported Kafka client settings: {', '.join(unknown)}")
    options = {"kafka.bootstrap.servers": servers}
    options.update({f"kafka.{k}": config[k] for k in _SAME_NAME if k in config})
    if "sasl.username" in config or "sasl.password" in config:
        mechanism = config.get("sasl.mechanism", "PLAIN").upper()
        if mechanism not in _SASL_LOGIN_MODULES:
            raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
        options["kafka.sasl.mechanism"] = mechanism
        options["kafka.sasl.jaas.config"] = (
            f"{_SASL_LOGIN_MODULES[mechanism]} required "
            f"username={_jaas_quote(config.get('sasl.username', ''))} "
            f"password={_jaas_quote(config.get('sasl.password', ''))};"
        )
    if "ssl.ca.location" in config:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.certificates"] = Path(config["ssl.ca.location"]).read_text()
    if "ssl.certificate.location" in config or "ssl.key.location" in config:
        if not ("ssl.certificate.location" in config and "ssl.key.location" in config):
            raise ValueError(
                "a client certificate needs both ssl.certificate.location and ssl.key.location"
            )
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = Path(
            config["ssl.certificate.location"]
        ).read_text()
        options["kafka.ssl.keystore.key"] = Path(config["ssl.key.location"]).read_text()
        if "ssl.key.password" in config:
            options["kafka.ssl.key.password"] = config["ssl.key.password"]
    return options


def default_paths(topic: str, home: Path | None = None) -> tuple[str, str]:
    """``(output, checkpoint)`` when none is given: ``$KFS_HOME/exports/<topic>/{parquet,checkpoint}``."""
    root = (home or default_home()) / "exports" / topic
    return str(root / "parquet"), str(root / "checkpoint")


@dataclass(frozen=True)
class CopyOptions:
    """What one copy of a topic into Parquet reads and where it writes."""

    topic: str
    kafka: Mapping[str, str]  # `kafka_options`
    output_path: str
    checkpoint_path: str
    #: Where a query without a checkpoint starts: earliest, latest or Spark's JSON per partition.
    starting_offsets: str = "earliest"
    #: At most this many records per micro-batch (Spark's ``maxOffsetsPerTrigger``); None: all.
    max_records_per_batch: int | None = None
    #: Fail when records the checkpoint expects are gone (retention, deleted records).
    fail_on_data_loss: bool = True

    def __post_init__(self) -> None:
        for name in ("topic", "output_path", "checkpoint_path"):
            if not getattr(self, name):
                raise ValueError(f"{name} is required")
        if os.path.abspath(self.output_path) == os.path.abspath(self.checkpoint_path):
            raise ValueError("the output and the checkpoint need directories of their own")


@dataclass(frozen=True)
class CopyResult:
    """What `copy_available` did: micro-batches run and records written in this run."""

    batches: int
    records: int
    output_path: str
    checkpoint_path: str

    def line(self, topic: str) -> str:
        return (
            f"kfs kafka_source: copied {self.records} records of {topic} in {self.batches} "
            f"micro-batch(es) to {self.output_path} (checkpoint {self.checkpoint_path})"
        )


# --- Spark --------------------------------------------------------------------------------


def read_topic_stream(spark: SparkSession, copy: CopyOptions) -> DataFrame:
    """The topic as a streaming DataFrame of raw records, headers included."""
    reader = (
        spark.readStream.format("kafka")
        .options(**copy.kafka)
        .option("subscribe", copy.topic)
        .option("startingOffsets", copy.starting_offsets)
        .option("includeHeaders", "true")
        .option("failOnDataLoss", str(copy.fail_on_data_loss).lower())
    )
    if copy.max_records_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(copy.max_records_per_batch))
    return reader.load()


def start_parquet_copy(
    spark: SparkSession, copy: CopyOptions, trigger: Mapping[str, Any]
) -> StreamingQuery:
    """Start the streaming copy of ``copy.topic`` into Parquet; ``trigger`` as ``DataStreamWriter.trigger``.

    E.g. ``{"availableNow": True}`` (drain and stop) or ``{"processingTime": "1 second"}``.
    The same checkpoint resumes where the last run committed, whichever trigger.
    """
    return (
        read_topic_stream(spark, copy)
        .writeStream.format("parquet")
        .option("path", copy.output_path)
        .option("checkpointLocation", copy.checkpoint_path)
        .queryName(f"kfs-copy-{copy.topic}")
        .trigger(**trigger)
        .start()
    )


def copy_available(spark: SparkSession, copy: CopyOptions) -> CopyResult:
    """Copy what the topic has beyond the checkpoint, in one or more micro-batches, then stop.

    Raises the query's exception (a `StreamingQueryException`) when it failed.
    """
    query = start_parquet_copy(spark, copy, {"availableNow": True})
    query.awaitTermination()
    failure = query.exception()
    if failure is not None:
        raise failure
    progress = [p for p in query.recentProgress if p.numInputRows]
    return CopyResult(
        batches=len(progress),
        records=sum(p.numInputRows for p in progress),
        output_path=copy.output_path,
        checkpoint_path=copy.checkpoint_path,
    )


# --- the command line -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark_jobs.kafka_source",
        description="Copy what a topic holds beyond the checkpoint into Parquet, then stop.",
    )
    parser.add_argument("--bootstrap-servers", required=True, help="the daemon's Kafka address")
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        "--output-path", default="", help="Parquet directory [$KFS_HOME/exports/TOPIC/parquet]"
    )
    parser.add_argument(
        "--checkpoint-path",
        default="",
        help="the query's checkpoint [$KFS_HOME/exports/TOPIC/checkpoint]",
    )
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        help="without a checkpoint: earliest, latest or Spark's JSON [earliest]",
    )
    parser.add_argument("--max-records-per-batch", type=int, default=None)
    parser.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="go on when records the checkpoint expects were deleted (retention)",
    )
    parser.add_argument(
        "--master", default=None, help="Spark master [spark-submit's, else local[*]]"
    )
    return parser


def _options(args: argparse.Namespace, environ: Mapping[str, str]) -> CopyOptions:
    client_config = json.loads(environ.get(CLIENT_CONFIG_ENV) or "{}")
    if not isinstance(client_config, dict):
        raise ValueError(f"{CLIENT_CONFIG_ENV} must hold a JSON object")
    output, checkpoint = default_paths(args.topic)
    return CopyOptions(
        topic=args.topic,
        kafka=kafka_options(args.bootstrap_servers, client_config),
        output_path=args.output_path or output,
        checkpoint_path=args.checkpoint_path or checkpoint,
        starting_offsets=args.starting_offsets or "earliest",
        max_records_per_batch=args.max_records_per_batch,
        fail_on_data_loss=not args.allow_data_loss,
    )


def run_cli(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Parse, copy, print one line; exit 0, 2 (bad arguments) or 3 (the query failed)."""
    from spark_jobs.common import get_spark

    parser = _parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        copy = _options(args, os.environ if environ is None else environ)
    except (ValueError, OSError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    spark = get_spark(f"kfs-copy-{copy.topic}", args.master)
    try:
        result = copy_available(spark, copy)
    except Exception as exc:  # noqa: BLE001 - the task log gets one line, Spark's own log the rest
        print(f"{parser.prog}: failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return EXIT_ERROR
    print(result.line(copy.topic), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    from spark_jobs.common import exit_driver
    from spark_jobs.kafka_source import run_cli as _run_cli

    exit_driver(_run_cli())
