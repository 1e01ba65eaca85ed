"""`kfs produce` and `kfs consume`: a Kafka client on the command line (confluent-kafka).

Both find the daemon through ``--bootstrap``, else ``KFS_LISTEN``; a TLS or
SASL listener needs ``--command-config FILE`` (Kafka's client properties).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from kfs_core.cli.common import CliError, cli_settings, client_config, command_config_option


def _bootstrap_option(func: Callable[..., Any]) -> Callable[..., Any]:
    func = command_config_option(func)
    return click.option(
        "--bootstrap",
        "bootstrap",
        help="broker host:port [default: KFS_LISTEN]",
    )(func)


def _bootstrap(ctx: click.Context, bootstrap: str | None) -> str:
    return bootstrap or cli_settings(ctx).listen


def _confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise CliError("this command needs confluent-kafka: pip install 'kfs[dev]'") from None
    return confluent_kafka


@click.command()
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
    command_config: str | None,
) -> None:
    """Send each line of stdin (or each --value) to TOPIC as one message."""
    kafka = _confluent()
    producer = kafka.Producer(
        {
            **client_config(command_config),
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


@click.command()
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
    command_config: str | None,
) -> None:
    """Print the values of TOPIC's messages, one per line (partitions are assigned, no group)."""
    import time

    kafka = _confluent()
    consumer = kafka.Consumer(
        {
            **client_config(command_config),
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
