"""`kfs segment dump`: a segment file's header, batches and index, and their checks.

PATH_OR_KEY is a file or an object key in the configured store; corrupt bytes
end the command with exit status 3 (`CorruptFileError`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from kfs_core.cli.common import CliError, cli_store, format_ms, operator_errors
from kfs_core.errors import CorruptIndex, ObjectNotFound


@click.group()
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
    store = cli_store(ctx)
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
    from kfs_core.formats.index import IndexReader
    from kfs_core.formats.index_check import check_index
    from kfs_core.formats.segment import SegmentReader
    from kfs_core.formats.segment_check import check_segment_bytes
    from kfs_core.records.codecs import codec_name

    with operator_errors():
        data, name, read_index = _read_object(ctx, path_or_key)
        reader = SegmentReader(data, name, verify=False)
        h, f = reader.header, reader.footer
        click.echo(f"segment {name}  ({len(data)} bytes)")
        click.echo(
            f"  header: version {h.version}  flags {h.flags:#06x} (codec {codec_name(h.codec)})  "
            f"base offset {h.base_offset}  messages {h.message_count}  created {format_ms(h.created_ms)}"
        )
        click.echo(f"  footer: body crc {f.body_crc:#010x}  last offset {f.last_offset}")
        click.echo(
            f"  {'position':>10} {'base':>12} {'last':>12} {'count':>6} {'codec':<6} "
            f"{'first timestamp':<24} {'max timestamp':<24} crc"
        )
        check = check_segment_bytes(data, name)
        for batch in check.batches:
            position, b, ok = batch.position, batch.header, batch.crc_ok
            flags = (" ctl" if b.is_control else "") + (" txn" if b.is_transactional else "")
            click.echo(
                f"  {position:>10} {b.base_offset:>12} {b.last_offset:>12} {b.record_count:>6} "
                f"{codec_name(b.codec):<6} {format_ms(b.first_timestamp):<24} {format_ms(b.max_timestamp):<24} "
                f"{'ok' if ok else 'BAD'}{flags}"
            )
        index_data = None if no_index else read_index()
        if index_data is not None:
            index = IndexReader(index_data, name.removesuffix(".kfs") + ".index")
            click.echo(f"  index: {len(index)} entries, interval {index.interval}")
            for entry in index.entries:
                click.echo(f"    offset {entry.offset:>12} -> position {entry.position}")
        # The listing above never stops at damage; the first problem ends the command
        # as a typed error naming its byte offset (exit status 3).
        reader = SegmentReader(data, name, verify=True)
        reader.verify()
        if index_data is not None:
            problems = check_index(reader, index)
            if problems:
                first = problems[0]
                raise CorruptIndex(
                    first.message, object_name=first.object_name, offset=first.offset
                )
        if check.crc_failures:
            raise CliError(f"{name}: {check.crc_failures} batch(es) failed their CRC")
        click.echo("  verify: ok")
