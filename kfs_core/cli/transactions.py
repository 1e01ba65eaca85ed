"""`kfs transactions`: open and hanging transactions of running daemons, as kafka-transactions.sh.

``list``, ``describe``, ``describe-producers``, ``abort`` and ``find-hanging``
take the flags of Kafka's tool and print its columns.  They talk to ``kfs
serve`` over the Kafka protocol (ListTransactions, DescribeTransactions,
DescribeProducers, WriteTxnMarkers; KIP-664) through kafka-python's admin
client, the one Python admin client that speaks them.  The daemon is found
as ``kfs groups`` finds it: ``--bootstrap-server``, else ``KFS_LISTEN``; TLS
or SASL through ``--command-config FILE`` (Kafka's client properties).

A transaction *hangs* when a partition holds it open (its last stable offset
stays there, ``read_committed`` consumers wait) though its coordinator no
longer counts the partition in it -- a marker lost to a bug, or a producer
of a client without KIP-890 whose AddPartitionsToTxn never came.
``find-hanging`` lists the open transactions older than
``--max-transaction-timeout`` whose coordinator does not have them ongoing
on that partition; ``abort`` writes the abort marker to the partition.

Mistakes (no daemon, an unknown topic, no transaction at ``--start-offset``)
end with one ``kfs: error: …`` line, never a traceback.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, NoReturn

import click

from kfs_core.cli.common import CliError, client_config, command_config_option, print_table
from kfs_core.config import Settings
from kfs_core.kafka_admin import kafka_python_security

__all__ = ["transactions"]

DEFAULT_TIMEOUT_S: Final = 10.0
_STATES: Final = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)


def _fail(message: str) -> NoReturn:
    raise CliError(message) from None


def _state(state: Any) -> str:
    """A state as the wire names it ("Ongoing"), whatever kafka-python wraps it in."""
    return str(getattr(state, "value", state))


def _kafka_python_config(path: str | None) -> dict[str, Any]:
    return kafka_python_security(client_config(path))


@contextlib.contextmanager
def _admin(ctx: click.Context) -> Iterator[Any]:
    """kafka-python's admin client on the group's options; its errors as one line."""
    import kafka.errors
    from kafka import KafkaAdminClient

    options = ctx.obj["transactions"]
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=options["bootstrap"],
            request_timeout_ms=int(options["timeout_s"] * 1000),
            client_id="kfs-transactions",
            **options["security"],
        )
    except kafka.errors.KafkaError:
        _fail(
            f"cannot reach the daemon at {options['bootstrap']}: is `kfs serve` running there? "
            "(give --bootstrap-server HOST:PORT or set KFS_LISTEN)"
        )
    try:
        yield admin
    except kafka.errors.UnknownTopicOrPartitionError:
        _fail("no such topic or partition")
    except kafka.errors.KafkaError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    finally:
        admin.close()


# --- commands ------------------------------------------------------------------------------


@click.group()
@click.option(
    "--bootstrap-server",
    "--bootstrap",
    "bootstrap",
    metavar="HOST:PORT",
    help="the daemon's Kafka listener [default: KFS_LISTEN]",
)
@command_config_option
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="seconds to wait for each answer",
)
@click.pass_context
def transactions(
    ctx: click.Context, bootstrap: str | None, command_config: str | None, timeout_s: float
) -> None:
    """List, describe and abort transactions (as kafka-transactions.sh)."""
    settings = ctx.find_object(Settings)
    if settings is None:
        try:
            settings = Settings.from_env()
        except ValueError as exc:
            _fail(str(exc))
    ctx.obj = {
        "transactions": {
            "bootstrap": bootstrap or settings.listen,
            "timeout_s": timeout_s,
            "security": _kafka_python_config(command_config),
        }
    }


@transactions.command("list")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(_STATES),
    help="only transactions in this state (repeatable)",
)
@click.option("--producer-id", "producer_ids", multiple=True, type=int, help="(repeatable)")
@click.option(
    "--duration-filter",
    type=click.IntRange(min=0),
    help="only transactions open longer than this many milliseconds",
)
@click.pass_context
def transactions_list(
    ctx: click.Context,
    states: tuple[str, ...],
    producer_ids: tuple[int, ...],
    duration_filter: int | None,
) -> None:
    """Every transactional id the daemons coordinate: coordinator, producer id, state."""
    with _admin(ctx) as admin:
        by_node = admin.list_transactions(
            state_filters=list(states) or None,
            producer_id_filters=list(producer_ids) or None,
            duration_filter_ms=duration_filter,
        )
    rows = sorted(
        (t.transactional_id, node, t.producer_id, _state(t.state))
        for node, listed in by_node.items()
        for t in listed
    )
    print_table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"), rows)


@transactions.command("describe")
@click.option("--transactional-id", required=True, help="the id to describe")
@click.pass_context
def transactions_describe(ctx: click.Context, transactional_id: str) -> None:
    """One transactional id: its producer, state, timeout, start and partitions."""
    import kafka.errors

    with _admin(ctx) as admin:
        try:
            d = admin.describe_transactions([transactional_id])[transactional_id]
        except kafka.errors.TransactionalIdNotFoundError:
            _fail(f"no transactional id {transactional_id!r}")
    now = int(time.time() * 1000)
    start = d.transaction_start_time_ms
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(d.topic_partitions))
    print_table(
        (
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ),
        [
            (
                d.coordinator_id,
                transactional_id,
                d.producer_id,
                d.producer_epoch,
                _state(d.state),
                d.transaction_timeout_ms,
                start if start >= 0 else None,
                now - start if start >= 0 else None,
                partitions,
            )
        ],
    )


def _producers(admin: Any, topic: str, partition: int) -> list[Any]:
    from kafka import TopicPartition

    tp = TopicPartition(topic, partition)
    return list(admin.describe_producers([tp])[tp].active_producers)


@transactions.command("describe-producers")
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=click.IntRange(min=0))
@click.pass_context
def transactions_describe_producers(ctx: click.Context, topic: str, partition: int) -> None:
    """The producers the partition's leader remembers, and where their open transaction starts."""
    with _admin(ctx) as admin:
        producers = _producers(admin, topic, partition)
    print_table(
        (
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ),
        [
            (
                p.producer_id,
                p.producer_epoch,
                p.coordinator_epoch,
                p.last_sequence,
                p.last_timestamp,
                p.current_transaction_start_offset
                if p.current_transaction_start_offset >= 0
                else None,
            )
            for p in producers
        ],
    )


@transactions.command("abort")
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=click.IntRange(min=0))
@click.option("--start-offset", type=click.IntRange(min=0), help="where the transaction begins")
@click.option("--producer-id", type=int)
@click.option("--producer-epoch", type=int)
@click.option("--coordinator-epoch", type=int, default=-1, show_default=True)
@click.pass_context
def transactions_abort(
    ctx: click.Context,
    topic: str,
    partition: int,
    start_offset: int | None,
    producer_id: int | None,
    producer_epoch: int | None,
    coordinator_epoch: int,
) -> None:
    """Write an abort marker for one open transaction on the partition.

    Name it by ``--start-offset`` (the producer is looked up) or by
    ``--producer-id`` and ``--producer-epoch``.
    """
    from kafka import TopicPartition
    from kafka.admin._transactions import AbortTransactionSpec

    by_offset = start_offset is not None
    by_producer = producer_id is not None or producer_epoch is not None
    if by_offset == by_producer:
        _fail("give --start-offset, or --producer-id and --producer-epoch (not both)")
    with _admin(ctx) as admin:
        if by_offset:
            found = [
                p
                for p in _producers(admin, topic, partition)
                if p.current_transaction_start_offset == start_offset
            ]
            if not found:
                _fail(f"no open transaction starts at offset {start_offset} of {topic}-{partition}")
            producer_id, producer_epoch = found[0].producer_id, found[0].producer_epoch
        elif producer_id is None or producer_epoch is None:
            _fail("--producer-id needs --producer-epoch")
        admin.abort_transaction(
            AbortTransactionSpec(
                TopicPartition(topic, partition), producer_id, producer_epoch, coordinator_epoch
            )
        )
    click.echo(
        f"aborted the transaction of producer {producer_id} (epoch {producer_epoch}) "
        f"on {topic}-{partition}"
    )


def _is_ongoing_there(describe: Callable[[int], Any], producer_id: int, tp: Any) -> bool:
    described = describe(producer_id)
    return (
        described is not None
        and _state(described.state) == "Ongoing"
        and tp in described.topic_partitions
    )


@transactions.command("find-hanging")
@click.option("--topic", required=True)
@click.option("--partition", type=click.IntRange(min=0), help="one partition (default: all)")
@click.option(
    "--max-transaction-timeout",
    type=click.IntRange(min=0),
    default=15,
    show_default=True,
    help="minutes: younger open transactions are not looked at",
)
@click.pass_context
def transactions_find_hanging(
    ctx: click.Context, topic: str, partition: int | None, max_transaction_timeout: int
) -> None:
    """Open transactions older than the timeout that their coordinator does not count."""
    from kafka import TopicPartition

    now = int(time.time() * 1000)
    rows = []
    with _admin(ctx) as admin:
        if partition is None:
            topics = admin.describe_topics([topic])
            if not topics or topics[0].get("error_code"):
                _fail(f"topic {topic!r} does not exist")
            partitions = sorted(p["partition_index"] for p in topics[0]["partitions"])
        else:
            partitions = [partition]
        cache: dict[int, Any] = {}

        def describe(producer_id: int) -> Any:
            if producer_id not in cache:
                listed = [
                    t
                    for txns in admin.list_transactions(producer_id_filters=[producer_id]).values()
                    for t in txns
                ]
                cache[producer_id] = (
                    admin.describe_transactions([listed[0].transactional_id])[
                        listed[0].transactional_id
                    ]
                    if listed
                    else None
                )
            return cache[producer_id]

        for index in partitions:
            tp = TopicPartition(topic, index)
            for p in _producers(admin, topic, index):
                if p.current_transaction_start_offset < 0:
                    continue
                age_ms = now - p.last_timestamp
                if age_ms < max_transaction_timeout * 60_000:
                    continue
                if _is_ongoing_there(describe, p.producer_id, tp):
                    continue
                rows.append(
                    (
                        topic,
                        index,
                        p.producer_id,
                        p.producer_epoch,
                        p.coordinator_epoch,
                        p.current_transaction_start_offset,
                        dt.datetime.fromtimestamp(p.last_timestamp / 1000, dt.UTC).isoformat(
                            timespec="milliseconds"
                        ),
                        age_ms // 60_000,
                    )
                )
    print_table(
        (
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ),
        rows,
    )
