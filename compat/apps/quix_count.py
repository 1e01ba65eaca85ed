"""A Quix Streams app with ``processing_guarantee="exactly-once"``: a running count per key.

    python quix_count.py BOOTSTRAP GROUP INPUT OUTPUT STATE_DIR

Each input record (key: a word; value: JSON ``{"n": ...}``) adds one to its
key's count in a RocksDB state store (with its changelog topic), and the
app writes ``{"count": c, "n": n}`` under the same key to OUTPUT, all in
one transaction per commit.  Read ``read_committed``, OUTPUT holds each
key's counts 1, 2, 3, ... once each, whatever crashed in between.
"""

from __future__ import annotations

import sys
from typing import Any

from quixstreams import Application, State


def count(value: dict[str, Any], state: State) -> dict[str, Any]:
    total = int(state.get("count", 0)) + 1
    state.set("count", total)
    return {"count": total, "n": value["n"]}


def main(bootstrap: str, group: str, source: str, sink: str, state_dir: str) -> None:
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        state_dir=state_dir,
        commit_interval=0.2,
        loglevel="WARNING",
        # A killed instance's partitions move after its session: 45 s by default.
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
    )
    dataframe = app.dataframe(app.topic(source, value_deserializer="json"))
    dataframe = dataframe.apply(count, stateful=True)
    dataframe.to_topic(app.topic(sink, value_serializer="json"))
    app.run()


if __name__ == "__main__":
    main(*sys.argv[1:6])
