"""The `kfs` command: operator tools over segments, the catalog and topics.

Every command reads its settings from `KFS_*` variables (kfs_core.config) and
takes `--store-url` / `--namespace` flags that override them.  Errors an
operator can cause (a corrupt file, an unknown topic, a bad value) end with a
one-line ``kfs: error: …`` on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from kfs_core import __version__
from kfs_core.config import Settings
from kfs_core.errors import CorruptIndex, CorruptionError, KfsError, ObjectNotFound
from kfs_core.storage import ObjectStore, open_store

EXIT_CORRUPT = 3


class CliError(click.ClickException):
    """A one-line operator error: ``kfs: error: <message>``."""

    def format_message(self) -> str:
        return self.message

    def show(self, file: Any = None) -> None:
        click.echo(f"kfs: error: {self.format_message()}", err=True)


class CorruptFileError(CliError):
    """Corrupt stored bytes: exit status 3, so scripts can tell it from a usage error."""

    exit_code = EXIT_CORRUPT


@contextmanager
def operator_errors() -> Iterator[None]:
    """Turn the errors an operator can cause into one-line messages."""
    try:
        yield
    except CorruptionError as exc:
        raise CorruptFileError(str(exc)) from None
    except (KfsError, ValueError, OSError) as exc:
        raise CliError(str(exc) or type(exc).__name__) from None


def _settings(ctx: click.Context) -> Settings:
    obj: Settings = ctx.obj
    return obj


def _store(ctx: click.Context) -> ObjectStore:
    settings = _settings(ctx)
    return open_store(settings.store_url, endpoint_url=settings.s3_endpoint_url or None)


def _ms(ts: int) -> str:
    if ts < 0:
        return str(ts)
    return dt.datetime.fromtimestamp(ts / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kfs")
@click.option("--store-url", envvar="KFS_STORE_URL", help="file:///dir or s3://bucket/prefix")
@click.option("--namespace", envvar="KFS_NAMESPACE", help="namespace inside the store")
@click.pass_context
def main(ctx: click.Context, store_url: str | None, namespace: str | None) -> None:
    """KFS: a Kafka-compatible streaming log on object storage."""
    with operator_errors():
        ctx.obj = Settings.from_env(store_url=store_url, namespace=namespace)


# --- kfs run ------------------------------------------------------------------


@main.command()
@click.option(
    "--airflow/--no-airflow",
    default=True,
    show_default=True,
    envvar="KFS_AIRFLOW",
    help="start Airflow (api-server, scheduler, dag-processor, triggerer) [KFS_AIRFLOW]",
)
@click.option(
    "--airflow-port",
    type=click.IntRange(1, 65535),
    default=8080,
    show_default=True,
    envvar="KFS_AIRFLOW_PORT",
    help="port of Airflow's UI and API [KFS_AIRFLOW_PORT]",
)
@click.option(
    "--airflow-host",
    default="127.0.0.1",
    show_default=True,
    envvar="KFS_AIRFLOW_HOST",
    help="address Airflow's api-server listens on [KFS_AIRFLOW_HOST]",
)
@click.option(
    "--demo/--no-demo",
    default=True,
    show_default=True,
    envvar="KFS_DEMO",
    help="produce the demo-events stream, a JSON event a second [KFS_DEMO=0 turns it off]",
)
@click.pass_context
def run(
    ctx: click.Context, airflow: bool, airflow_port: int, airflow_host: str, demo: bool
) -> None:
    """Start KFS on the embedded default: the daemon, Airflow and a demo stream.

    Everything lives under KFS_HOME (.kfs/): the store, the WAL, Airflow's
    home and SQLite database, and a log per process in .kfs/logs/.  Ctrl-C or
    SIGTERM stops it all and flushes the daemon (see kfs_core.embedded).
    """
    from kfs_core.embedded import RunOptions, Supervisor

    with operator_errors():
        options = RunOptions(
            _settings(ctx),
            airflow=airflow,
            airflow_host=airflow_host,
            airflow_port=airflow_port,
            demo=demo,
        )
        code = Supervisor(options).run()
    ctx.exit(code)


# --- kfs segment ----------------------------------------------------------------


@main.group()
def segment() -> None:
    """Inspect segment files."""


def _read_object(
    ctx: click.Context, path_or_key: str
) -> tuple[bytes, str, Callable[[], bytes | None]]:
    """The bytes of a file or store object, its name, and a reader for its index."""
    path = Path(path_or_key)
    if path.is_file():
        data = path.read_bytes()
        index_path = path.with_suffix(".index")

        def read_index_file() -> bytes | None:
            return index_path.read_bytes() if index_path.is_file() else None

        return data, str(path), read_index_file
    store = _store(ctx)
    try:
        data = store.get(path_or_key)
    except ObjectNotFound:
        raise CliError(f"{path_or_key}: no such file or object in {store.url}") from None
    index_key = (
        path_or_key.removesuffix(".kfs") + ".index" if path_or_key.endswith(".kfs") else None
    )

    def read_index_object() -> bytes | None:
        if index_key is None:
            return None
        try:
            return store.get(index_key)
        except ObjectNotFound:
            return None

    return data, path_or_key, read_index_object


@segment.command("dump")
@click.argument("path_or_key")
@click.option("--no-index", is_flag=True, help="do not look for the .index beside the segment")
@click.pass_context
def segment_dump(ctx: click.Context, path_or_key: str, no_index: bool) -> None:
    """Print a segment's header, each batch and its index.

    Exits 3 with a one-line message when the segment or index is corrupt.
    """
    from kfs_core.formats.index import IndexReader, check_index
    from kfs_core.formats.segment import SegmentReader
    from kfs_core.records.codecs import codec_name
    from kfs_core.records.header import batch_crc

    with operator_errors():
        data, name, read_index = _read_object(ctx, path_or_key)
        reader = SegmentReader(data, name, verify=False)
        h, f = reader.header, reader.footer
        click.echo(f"segment {name}  ({len(data)} bytes)")
        click.echo(
            f"  header: version {h.version}  flags {h.flags:#06x} (codec {codec_name(h.codec)})  "
            f"base offset {h.base_offset}  messages {h.message_count}  created {_ms(h.created_ms)}"
        )
        click.echo(f"  footer: body crc {f.body_crc:#010x}  last offset {f.last_offset}")
        click.echo(
            f"  {'position':>10} {'base':>12} {'last':>12} {'count':>6} {'codec':<6} "
            f"{'first timestamp':<24} {'max timestamp':<24} crc"
        )
        bad_batches = 0
        for position, b in reader.iter_batches():
            ok = batch_crc(data, position, b.total_size) == b.crc
            bad_batches += not ok
            flags = (" ctl" if b.is_control else "") + (" txn" if b.is_transactional else "")
            click.echo(
                f"  {position:>10} {b.base_offset:>12} {b.last_offset:>12} {b.record_count:>6} "
                f"{codec_name(b.codec):<6} {_ms(b.first_timestamp):<24} {_ms(b.max_timestamp):<24} "
                f"{'ok' if ok else 'BAD'}{flags}"
            )
        index_data = None if no_index else read_index()
        if index_data is not None:
            index = IndexReader(index_data, name.removesuffix(".kfs") + ".index")
            click.echo(f"  index: {len(index)} entries, interval {index.interval}")
            for entry in index.entries:
                click.echo(f"    offset {entry.offset:>12} -> position {entry.position}")
        # Now the full checks: body CRC, batch CRCs, header/footer agreement.
        reader = SegmentReader(data, name, verify=True)
        reader.verify()
        if index_data is not None:
            problems = check_index(reader, index)
            if problems:
                first = problems[0]
                raise CorruptIndex(
                    first.message, object_name=first.object_name, offset=first.offset
                )
        if bad_batches:
            raise CliError(f"{name}: {bad_batches} batch(es) failed their CRC")
        click.echo("  verify: ok")


# --- kfs catalog ----------------------------------------------------------------


@main.group()
def catalog() -> None:
    """Inspect the catalog."""


@catalog.command("show")
@click.argument("topic")
@click.argument("partition", type=int, required=False)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@click.pass_context
def catalog_show(ctx: click.Context, topic: str, partition: int | None, as_json: bool) -> None:
    """Print the live segments of TOPIC (all partitions, or one)."""
    from kfs_core.catalog.partition import PartitionCatalog
    from kfs_core.catalog.topics import TopicRegistry

    settings = _settings(ctx)
    with operator_errors():
        store = _store(ctx)
        info = TopicRegistry(store, settings.namespace).get(topic)
        partitions = [partition] if partition is not None else list(range(info.partitions))
        for p in partitions:
            if not 0 <= p < info.partitions:
                raise CliError(f"topic {topic!r} has partitions 0..{info.partitions - 1}, not {p}")
        report = []
        for p in partitions:
            state = PartitionCatalog(store, settings.namespace, topic, p).load()
            report.append((p, state))
    if as_json:
        out = [
            {
                "partition": p,
                "version": s.version,
                "log_start_offset": s.log_start_offset,
                "high_watermark": s.high_watermark,
                "segments": [seg.model_dump() for seg in s.segments],
            }
            for p, s in report
        ]
        click.echo(json.dumps(out, indent=2))
        return
    for p, s in report:
        total = sum(seg.size_bytes for seg in s.segments)
        click.echo(
            f"{topic}/{p}: version {s.version}  log start {s.log_start_offset}  "
            f"high watermark {s.high_watermark}  {len(s.segments)} live segments, {total} bytes"
        )
        for seg in s.segments:
            click.echo(
                f"  {seg.key:<60} offsets {seg.base_offset}..{seg.last_offset}  "
                f"records {seg.record_count}  bytes {seg.size_bytes}  "
                f"timestamps {_ms(seg.min_timestamp)} .. {_ms(seg.max_timestamp)}"
            )


@catalog.command("snapshots")
@click.pass_context
def catalog_snapshots(ctx: click.Context) -> None:
    """List the namespace's catalog snapshots, oldest first."""
    from kfs_core.catalog.snapshots import list_snapshots

    with operator_errors():
        manifests = list_snapshots(_store(ctx), _settings(ctx).namespace)
    if not manifests:
        click.echo("no snapshots (the checkpoint job takes them: --snapshot NAME)")
    for m in manifests:
        click.echo(
            f"{m.name:<40} {_ms(m.created_ms)}  topics {len(m.topics)}  "
            f"partitions {m.partition_count}  segments {m.segment_count}  bytes {m.size_bytes}"
        )


@catalog.command("snapshot")
@click.argument("name")
@click.option("--topics", help="comma-separated topics (default: all)")
@click.pass_context
def catalog_snapshot(ctx: click.Context, name: str, topics: str | None) -> None:
    """Take catalog snapshot NAME of the namespace (or of some topics)."""
    from kfs_core.catalog.snapshots import take_snapshot

    with operator_errors():
        manifest = take_snapshot(
            _store(ctx),
            _settings(ctx).namespace,
            name,
            topics=[t for t in topics.split(",") if t] if topics else None,
        )
    click.echo(
        f"snapshot {manifest.name}: {len(manifest.topics)} topic(s), "
        f"{manifest.segment_count} segment(s)"
    )


@catalog.command("restore")
@click.argument("topic")
@click.option("--snapshot", "snapshot_name", required=True, help="snapshot to restore from")
@click.option("--dry-run", is_flag=True, help="print the plan, change nothing")
@click.option(
    "--allow-partial",
    is_flag=True,
    help="restore what can be, skipping segments below the current log start",
)
@click.option("--keep-configs", is_flag=True, help="leave the topic's configs as they are now")
@click.pass_context
def catalog_restore(
    ctx: click.Context,
    topic: str,
    snapshot_name: str,
    dry_run: bool,
    allow_partial: bool,
    keep_configs: bool,
) -> None:
    """Restore TOPIC's catalog from a snapshot (its objects must still exist)."""
    from kfs_core.catalog.snapshots import restore_topic

    with operator_errors():
        result = restore_topic(
            _store(ctx),
            _settings(ctx).namespace,
            topic,
            snapshot_name,
            dry_run=dry_run,
            allow_partial=allow_partial,
            restore_configs=not keep_configs,
        )
    verb = "would" if dry_run else "will"
    for plan in result.plan.partitions:
        click.echo(
            f"{topic}/{plan.partition}: {verb} remove {len(plan.remove)} and restore "
            f"{len(plan.restore)} segment(s) (snapshot version {plan.snapshot_version})"
        )
    for outcome in result.outcomes:
        line = f"{topic}/{outcome.partition}: {outcome.status}"
        click.echo(line + (f" ({outcome.message})" if outcome.message else ""))
    if not result.ok:
        raise CliError(f"restore of {topic!r} lost a race to another writer; run it again")


# --- kfs topics -----------------------------------------------------------------


def _parse_configs(pairs: tuple[str, ...]) -> dict[str, str]:
    configs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise CliError(f"--config {pair!r}: expected NAME=VALUE")
        configs[name.strip()] = value.strip()
    return configs


@main.group()
def topics() -> None:
    """Create, list, describe, alter, add partitions to and delete topics."""


@topics.command("create")
@click.argument("name")
@click.option("--partitions", type=int, default=1, show_default=True)
@click.option("--config", "configs", multiple=True, help="NAME=VALUE, Kafka config names")
@click.pass_context
def topics_create(ctx: click.Context, name: str, partitions: int, configs: tuple[str, ...]) -> None:
    """Create topic NAME."""
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        registry = TopicRegistry(_store(ctx), _settings(ctx).namespace)
        record = registry.create_topic(name, partitions, _parse_configs(configs))
    click.echo(f"created topic {record.name} with {record.partitions} partition(s)")


@topics.command("list")
@click.pass_context
def topics_list(ctx: click.Context) -> None:
    """List topic names."""
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        for topic_name in TopicRegistry(_store(ctx), _settings(ctx).namespace).list_topics():
            click.echo(topic_name)


@topics.command("describe")
@click.argument("name")
@click.pass_context
def topics_describe(ctx: click.Context, name: str) -> None:
    """Show a topic's partitions and every config with its value."""
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        info = TopicRegistry(_store(ctx), _settings(ctx).namespace).describe(name)
    click.echo(f"topic {info.name}  partitions {info.partitions}")
    for key, value in sorted(info.effective_configs.items()):
        source = "default" if info.is_default(key) else "set"
        click.echo(f"  {key} = {value}  ({source})")


@topics.command("alter")
@click.argument("name")
@click.option(
    "--config",
    "--add-config",
    "configs",
    multiple=True,
    help="NAME=VALUE to set, Kafka config names (repeatable)",
)
@click.option(
    "--delete-config",
    "deletes",
    multiple=True,
    help="NAME to reset to its default (repeatable, or comma-separated as kafka-configs)",
)
@click.pass_context
def topics_alter(
    ctx: click.Context, name: str, configs: tuple[str, ...], deletes: tuple[str, ...]
) -> None:
    """Set or reset configs of topic NAME, as kafka-configs --alter.

    A running kfs serve applies the change within its topic refresh (5 s);
    an admin client's IncrementalAlterConfigs applies at once.
    """
    from kfs_core.catalog.topics import TopicRegistry

    updates = _parse_configs(configs)
    resets = [key.strip() for item in deletes for key in item.split(",") if key.strip()]
    if not updates and not resets:
        raise click.UsageError("nothing to change: give --config NAME=VALUE or --delete-config")
    with operator_errors():
        registry = TopicRegistry(_store(ctx), _settings(ctx).namespace)
        registry.alter_configs(name, updates, resets)
        info = registry.describe(name)
    click.echo(f"altered topic {info.name}")
    for key in sorted({*updates, *resets}):
        source = "default" if info.is_default(key) else "set"
        click.echo(f"  {key} = {info.effective_configs[key]}  ({source})")


@topics.command("add-partitions")
@click.argument("name")
@click.option(
    "--partitions",
    type=int,
    required=True,
    help="the new total partition count (larger than now), as kafka-topics --alter",
)
@click.pass_context
def topics_add_partitions(ctx: click.Context, name: str, partitions: int) -> None:
    """Raise the partition count of topic NAME to --partitions.

    Partitions are only ever added: existing records keep their partition,
    and keyed producers map keys over the new count from then on.
    """
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        registry = TopicRegistry(_store(ctx), _settings(ctx).namespace)
        before = registry.get(name).partitions
        record = registry.create_partitions(name, partitions)
    click.echo(f"topic {record.name}: {before} -> {record.partitions} partitions")


@topics.command("delete")
@click.argument("name")
@click.pass_context
def topics_delete(ctx: click.Context, name: str) -> None:
    """Delete topic NAME from the registry (retention removes its data)."""
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        TopicRegistry(_store(ctx), _settings(ctx).namespace).delete_topic(name)
    click.echo(f"deleted topic {name}")


# --- kfs lifecycle --------------------------------------------------------------


@main.command()
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["json", "terraform"]),
    default="json",
    show_default=True,
    help="json: the document `aws s3api put-bucket-lifecycle-configuration` takes; "
    "terraform: an aws_s3_bucket_lifecycle_configuration resource",
)
@click.option("--topics", help="comma-separated topics (default: all)")
@click.pass_context
def lifecycle(ctx: click.Context, output_format: str, topics: str | None) -> None:
    """Print S3 lifecycle rules that expire segments after their topic's retention.

    One rule per partition of each topic, on its segment-* objects only (never
    the catalog), expiring after retention.ms + max(1 day, 10%), rounded up to
    whole days: a backstop under the retention DAG, never ahead of it.  Topics
    with retention.ms=-1 or a compact cleanup.policy get none.  S3 stores
    only; rerun after creating topics or partitions or changing retention.
    """
    from kfs_core.lifecycle import plan_for_store

    with operator_errors():
        plan = plan_for_store(
            _store(ctx),
            _settings(ctx).namespace,
            [t for t in topics.split(",") if t] if topics else None,
        )
    for skipped in plan.skipped:
        click.echo(f"kfs: note: no expiration for {skipped.name}: {skipped.reason}", err=True)
    click.echo(plan.to_json() if output_format == "json" else plan.to_terraform(), nl=False)


# --- kfs serve / produce / consume ----------------------------------------------


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


@main.command()
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
        settings = _settings(ctx).with_overrides(
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


def _bootstrap_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--bootstrap",
        "bootstrap",
        help="broker host:port [default: KFS_LISTEN]",
    )(func)


def _bootstrap(ctx: click.Context, bootstrap: str | None) -> str:
    return bootstrap or _settings(ctx).listen


def _confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise CliError("this command needs confluent-kafka: pip install 'kfs[dev]'") from None
    return confluent_kafka


@main.command()
@click.argument("topic")
@click.option("--partition", type=click.IntRange(min=0), help="partition (default: by key)")
@click.option("--key", help="key of every message")
@click.option("--value", "values", multiple=True, help="send this value (repeatable) not stdin")
@click.option("--acks", type=click.Choice(["0", "1", "all"]), default="all", show_default=True)
@click.option(
    "--compression",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
)
@_bootstrap_option
@click.pass_context
def produce(
    ctx: click.Context,
    topic: str,
    partition: int | None,
    key: str | None,
    values: tuple[str, ...],
    acks: str,
    compression: str,
    bootstrap: str | None,
) -> None:
    """Send each line of stdin (or each --value) to TOPIC as one message."""
    kafka = _confluent()
    producer = kafka.Producer(
        {
            "bootstrap.servers": _bootstrap(ctx, bootstrap),
            "acks": acks,
            "compression.type": compression,
            "linger.ms": 5,
            "client.id": "kfs-produce",
        }
    )
    failures: list[str] = []
    delivered = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            failures.append(str(err))
        else:
            delivered += 1

    extra = {} if partition is None else {"partition": partition}
    lines = values or (line.rstrip("\n").rstrip("\r") for line in sys.stdin)
    for line in lines:
        while True:
            try:
                producer.produce(
                    topic,
                    value=line.encode(),
                    key=None if key is None else key.encode(),
                    on_delivery=on_delivery,
                    **extra,
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(60)
    if left:
        failures.append(f"{left} message(s) not delivered within 60 s")
    if failures:
        raise CliError(f"{len(failures)} failure(s); first: {failures[0]}")
    click.echo(f"produced {delivered} message(s) to {topic}", err=True)


@main.command()
@click.argument("topic")
@click.option("--partition", type=click.IntRange(min=0), help="read one partition (default: all)")
@click.option("--from-beginning", is_flag=True, help="start at the earliest offset, not the end")
@click.option("--max-messages", type=click.IntRange(min=1), help="stop after this many messages")
@click.option(
    "--timeout",
    type=float,
    default=None,
    help="stop once no message has arrived for this many seconds (default: never)",
)
@click.option("--print-offsets", is_flag=True, help="prefix each value with partition:offset")
@_bootstrap_option
@click.pass_context
def consume(
    ctx: click.Context,
    topic: str,
    partition: int | None,
    from_beginning: bool,
    max_messages: int | None,
    timeout: float | None,
    print_offsets: bool,
    bootstrap: str | None,
) -> None:
    """Print the values of TOPIC's messages, one per line (partitions are assigned, no group)."""
    import time

    kafka = _confluent()
    consumer = kafka.Consumer(
        {
            # librdkafka insists on a group id; assign() never joins the group.
            "bootstrap.servers": _bootstrap(ctx, bootstrap),
            "group.id": "kfs-consume",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "client.id": "kfs-consume",
            "fetch.wait.max.ms": 100,
        }
    )
    out = sys.stdout.buffer
    try:
        if partition is None:
            metadata = consumer.list_topics(topic, timeout=10)
            info = metadata.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                reason = info.error if info is not None and info.error else "not found"
                raise CliError(f"topic {topic!r}: {reason}")
            partitions = sorted(info.partitions)
        else:
            partitions = [partition]
        start = kafka.OFFSET_BEGINNING if from_beginning else kafka.OFFSET_END
        consumer.assign([kafka.TopicPartition(topic, p, start) for p in partitions])
        count = 0
        last_message = time.monotonic()
        while max_messages is None or count < max_messages:
            msg = consumer.poll(0.2)
            if msg is None:
                if timeout is not None and time.monotonic() - last_message >= timeout:
                    break
                continue
            if msg.error() is not None:
                if msg.error().code() == kafka.KafkaError._PARTITION_EOF:
                    continue
                raise CliError(f"consume {topic}: {msg.error()}")
            last_message = time.monotonic()
            count += 1
            if print_offsets:
                out.write(f"{msg.partition()}:{msg.offset()}\t".encode())
            out.write((msg.value() or b"") + b"\n")
            out.flush()
    finally:
        consumer.close()


def _add_command_groups() -> None:
    """Command groups that live in their own modules (they use this module's helpers)."""
    from kfs_core.cli_groups import groups

    main.add_command(groups)


_add_command_groups()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
