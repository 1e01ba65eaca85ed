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


@contextmanager
def operator_errors() -> Iterator[None]:
    """Turn the errors an operator can cause into one-line messages."""
    try:
        yield
    except CorruptionError as exc:
        err = CliError(str(exc))
        err.exit_code = EXIT_CORRUPT
        raise err from None
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
@click.pass_context
def run(ctx: click.Context) -> None:
    """Prepare and start KFS on the embedded default (a local directory store)."""
    settings = _settings(ctx)
    with operator_errors():
        store = _store(ctx)
        Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
        from kfs_core.catalog.topics import TopicRegistry

        topics = TopicRegistry(store, settings.namespace).list_topics()
    click.echo(f"KFS {__version__}")
    click.echo(f"  store      {settings.store_url} (namespace {settings.namespace!r})")
    click.echo(f"  data dir   {settings.data_dir}")
    click.echo(f"  topics     {len(topics)}")
    click.echo("Ready: formats, object stores and the catalog are in place.")
    click.echo("Not there yet: the Kafka-protocol daemon (`kfs serve`), the Spark")
    click.echo("maintenance jobs and the Airflow DAGs and UI; see README.md.")
    click.echo("Try: kfs topics create demo-events --partitions 3 && kfs topics list")


# --- kfs segment ----------------------------------------------------------------


@main.group()
def segment() -> None:
    """Inspect segment files."""


def _read_object(ctx: click.Context, path_or_key: str) -> tuple[bytes, str, Callable[[], bytes | None]]:
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
    index_key = path_or_key.removesuffix(".kfs") + ".index" if path_or_key.endswith(".kfs") else None

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
                raise CorruptIndex(first.message, object_name=first.object_name,
                                   offset=first.offset)
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
        info = TopicRegistry(store, settings.namespace).get_topic(topic)
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
    """Create, list, describe and delete topics."""


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
        info = registry.create_topic(name, partitions, _parse_configs(configs))
    click.echo(f"created topic {info.name} with {info.partitions} partition(s)")


@topics.command("list")
@click.pass_context
def topics_list(ctx: click.Context) -> None:
    """List topic names."""
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        for info in TopicRegistry(_store(ctx), _settings(ctx).namespace).list_topics():
            click.echo(info.name)


@topics.command("describe")
@click.argument("name")
@click.pass_context
def topics_describe(ctx: click.Context, name: str) -> None:
    """Show a topic's partitions and every config with its value."""
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        info = TopicRegistry(_store(ctx), _settings(ctx).namespace).get_topic(name)
    click.echo(f"topic {info.name}  partitions {info.partitions}")
    for key, value in sorted(info.config.items()):
        click.echo(f"  {key} = {value}")


@topics.command("delete")
@click.argument("name")
@click.pass_context
def topics_delete(ctx: click.Context, name: str) -> None:
    """Delete topic NAME from the registry (retention removes its data)."""
    from kfs_core.catalog.topics import TopicRegistry

    with operator_errors():
        TopicRegistry(_store(ctx), _settings(ctx).namespace).delete_topic(name)
    click.echo(f"deleted topic {name}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
