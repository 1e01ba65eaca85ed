"""A faust-streaming app with ``processing_guarantee="exactly_once"``: a running count per key.

    python faust_count.py BOOTSTRAP GROUP INPUT OUTPUT DATA_DIR

The same contract as ``quix_count.py``: each input record (key: a word;
value: JSON ``{"n": ...}``) adds one to its key's count in a table (with
its changelog topic), and the app sends ``{"count": c, "n": n}`` under the
same key to OUTPUT, in transactions.  Read ``read_committed``, OUTPUT holds
each key's counts 1, 2, 3, ... once each, whatever crashed in between.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import faust

#: Input, table and output partitions agree (faust co-partitions a table with its stream).
PARTITIONS = 2


def main(bootstrap: str, group: str, source: str, sink: str, data_dir: str) -> None:
    app = faust.App(
        group,
        broker=f"kafka://{bootstrap}",
        processing_guarantee="exactly_once",
        store="memory://",
        datadir=data_dir,
        topic_partitions=PARTITIONS,
        topic_replication_factor=1,
        broker_commit_interval=0.2,
        web_enabled=False,
        # A killed worker's partitions move after its session: 60 s by default.
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        consumer_auto_offset_reset="earliest",
    )
    inputs = app.topic(source, key_type=str, value_type=bytes, value_serializer="json")
    outputs = app.topic(sink, key_type=str, value_serializer="json")
    counts = app.Table("counts", default=int, partitions=PARTITIONS)

    @app.agent(inputs)
    async def count(stream: AsyncIterator[Any]) -> None:
        async for key, value in stream.items():  # type: ignore[attr-defined]
            counts[key] += 1
            await outputs.send(key=key, value={"count": counts[key], "n": value["n"]})

    app.main()


if __name__ == "__main__":
    bootstrap, group, source, sink, data_dir = sys.argv[1:6]
    sys.argv[1:] = ["worker", "--loglevel", "warn"]
    main(bootstrap, group, source, sink, data_dir)
