"""`kfs serve`: the Kafka-protocol daemon (kfs_core.server) with a flag for every KFS_* setting."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from kfs_core.cli.common import cli_settings, operator_errors


def _size(value: str | None) -> int | None:
    if value is None:
        return None
    from kfs_core.config import parse_size

    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _size_option(name: str, help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(name, callback=lambda ctx, param, value: _size(value), help=help_text)


@click.command()
@click.option("--listen", help="Kafka listener host:port [KFS_LISTEN, 127.0.0.1:9092]")
@click.option("--advertised-host", help="host named in Metadata [KFS_ADVERTISED_HOST]")
@click.option("--store-url", "serve_store_url", help="file:///dir or s3://bucket/prefix")
@click.option("--namespace", "serve_namespace", help="namespace inside the store")
@click.option("--data-dir", help="local directory of the WAL [KFS_DATA_DIR]")
@click.option(
    "--durability",
    type=click.Choice(["cautious", "normal", "emergency"]),
    help="WAL mode [KFS_DURABILITY, cautious]",
)
@_size_option("--segment-bytes", "seal partition buffers at this size [KFS_SEGMENT_BYTES]")
@click.option(
    "--flush-interval-ms", type=int, help="seal buffers this often [KFS_FLUSH_INTERVAL_MS]"
)
@_size_option("--pool-bytes", "memory for partition buffers [KFS_POOL_BYTES]")
@_size_option("--cache-size", "L1 segment cache [KFS_CACHE_SIZE]")
@_size_option("--index-cache-size", "L2 index cache [KFS_INDEX_CACHE_SIZE]")
@click.option("--readahead-segments", type=int, help="[KFS_READAHEAD_SEGMENTS]")
@click.option(
    "--compression-codec",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    help="recompress batches producers left uncompressed at flush [KFS_COMPRESSION_CODEC, none]",
)
@click.option("--s3-endpoint-url", help="S3 endpoint, e.g. MinIO [KFS_S3_ENDPOINT_URL]")
@click.option(
    "--producer-id-expiration-ms",
    type=int,
    help="forget idle idempotent producers [KFS_PRODUCER_ID_EXPIRATION_MS, 1 day]",
)
@click.option(
    "--group-initial-rebalance-delay-ms",
    type=int,
    help="wait for more members before a new group's first rebalance "
    "[KFS_GROUP_INITIAL_REBALANCE_DELAY_MS, 300]",
)
@click.option(
    "--group-min-session-timeout-ms", type=int, help="[KFS_GROUP_MIN_SESSION_TIMEOUT_MS, 6000]"
)
@click.option(
    "--group-max-session-timeout-ms", type=int, help="[KFS_GROUP_MAX_SESSION_TIMEOUT_MS, 1800000]"
)
@click.option(
    "--offsets-retention-minutes",
    type=int,
    help="expire an empty group's committed offsets [KFS_OFFSETS_RETENTION_MINUTES, 10080]",
)
@click.option(
    "--offsets-retention-check-interval-ms",
    type=int,
    help="[KFS_OFFSETS_RETENTION_CHECK_INTERVAL_MS, 600000]",
)
@click.option(
    "--offsets-topic-num-partitions",
    type=int,
    help="partitions of __consumer_offsets when it is created [KFS_OFFSETS_TOPIC_NUM_PARTITIONS, 4]",
)
@click.option("--metrics-listen", help="ops HTTP host:port [KFS_METRICS_LISTEN, 127.0.0.1:9644]")
@click.option(
    "--auto-create-topics/--no-auto-create-topics",
    default=True,
    show_default=True,
    envvar="KFS_AUTO_CREATE_TOPICS",
    help="create unknown topics on Metadata and Produce, as auto.create.topics.enable",
)
@click.option(
    "--default-partitions",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    envvar="KFS_DEFAULT_PARTITIONS",
    help="partitions of auto-created topics, as num.partitions",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    envvar="KFS_LOG_LEVEL",
)
@click.pass_context
def serve(
    ctx: click.Context,
    /,
    serve_store_url: str | None,
    serve_namespace: str | None,
    auto_create_topics: bool,
    default_partitions: int,
    log_level: str,
    **overrides: Any,
) -> None:
    """Run the Kafka-protocol daemon until SIGTERM or SIGINT.

    Every KFS_* setting has a flag here; a flag wins over the variable.
    """
    import logging

    from kfs_core.server.app import ServeOptions
    from kfs_core.server.app import serve as run_daemon

    with operator_errors():
        settings = cli_settings(ctx).with_overrides(
            store_url=serve_store_url, namespace=serve_namespace, **overrides
        )
        options = ServeOptions(
            settings, auto_create_topics=auto_create_topics, default_partitions=default_partitions
        )
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    ctx.exit(run_daemon(options))
