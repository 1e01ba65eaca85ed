"""Compaction and retention while the object store fails.

The jobs reach S3 (moto) through `soak.fault_proxy.FaultProxy`: 30 % of
requests answered 500/503, 30 % of uploads reset midway, or a full outage.
Each run (its ``main``, as spark-submit runs it) either finishes or aborts
with an exit status and one line -- never a catalog that names a segment it
cannot read, never a record changed -- and once the store heals a rerun of
both completes, validation passes, and every record the retention settings
keep is there at its offset, unchanged.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kfs_core.catalog import PartitionCatalog, layout
from kfs_core.formats.segment import SegmentReader
from kfs_core.records import decode_batch
from kfs_core.storage import ObjectStore, open_store
from soak.fault_proxy import FaultProxy
from spark_jobs import common, compaction, retention, validation
from tests.spark_jobs.data import write_topic

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]

NS = "faults"
TOPICS = {
    "merged": {"cleanup.policy": "delete", "retention.ms": "-1"},
    "trimmed": {"cleanup.policy": "delete", "retention.bytes": "3000", "retention.ms": "-1"},
}
PARTITIONS = 2

FAULTS = {
    "errors": {"error_rate": 0.3},
    "resets": {"reset_rate": 0.3},
    "outage": {"outage": True},
}


def _records(store: ObjectStore, topic: str, partition: int) -> dict[int, tuple[Any, Any]]:
    """Offset -> (key, value) of every live segment, each verified."""
    records: dict[int, tuple[Any, Any]] = {}
    for entry in PartitionCatalog(store, NS, topic, partition).load().segments:
        name = layout.join(NS, entry.key)
        reader = SegmentReader(store.get(name), name)
        reader.verify()
        for position, _ in reader.iter_batches():
            for record in decode_batch(reader.data, position).records:
                records[record.offset] = (record.key, record.value)
    return records


def _check(store: ObjectStore, before: dict[tuple[str, int], dict[int, Any]]) -> None:
    """Every live segment reads and verifies; each record it holds is the one written there."""
    for (topic, partition), written in before.items():
        state = PartitionCatalog(store, NS, topic, partition).load()
        now = _records(store, topic, partition)
        assert all(written[offset] == record for offset, record in now.items())
        kept = {o: r for o, r in written.items() if o >= state.log_start_offset}
        assert now == kept, f"{topic}/{partition}: records above the log start changed"


@pytest.mark.parametrize("fault", FAULTS)
def test_jobs_under_store_faults_finish_or_abort_and_a_rerun_completes(
    spark: Any, moto_server: str, s3_bucket: str, fault: str
) -> None:
    url = f"s3://{s3_bucket}/jobs-faults-{uuid.uuid4().hex[:8]}"
    store = open_store(url, endpoint_url=moto_server)
    for topic, configs in TOPICS.items():
        write_topic(
            store, NS, topic, partitions=PARTITIONS, segments=6, records_per_segment=40,
            configs=configs,
        )  # fmt: skip
    before = {(t, p): _records(store, t, p) for t in TOPICS for p in range(PARTITIONS)}

    def args(endpoint: str, *extra: str) -> list[str]:
        return ["--store-url", url, "--namespace", NS, "--s3-endpoint-url", endpoint, *extra]

    compact = ("--topics", "merged", "--max-read-mb-per-s", "0", "--min-inputs", "2")
    with FaultProxy(moto_server, seed=11) as proxy:
        proxy.set(**FAULTS[fault])
        # `main` as spark-submit runs it: a failed run or a store that stays down is an
        # exit status and one line, never a traceback or a half-made change.
        codes = [
            compaction.main(args(proxy.url, *compact)),
            retention.main(args(proxy.url, "--delete-grace", "0s")),
        ]
        assert set(codes) <= {common.EXIT_OK, common.EXIT_FAILED, common.EXIT_ERROR}, codes
        if fault == "outage":
            assert codes == [common.EXIT_ERROR, common.EXIT_ERROR]
        _check(store, before)  # whatever the faults did, nothing the catalog names is broken
        proxy.set()
        assert compaction.run(args(proxy.url, *compact), spark)["status"] == "ok"
        assert retention.run(args(proxy.url, "--delete-grace", "0s"), spark)["status"] == "ok"
    summary = validation.run(args(moto_server), spark)
    assert summary["status"] == "ok", summary["message"]
    _check(store, before)
    merged = PartitionCatalog(store, NS, "merged", 0).load()
    assert len(merged.segments) == 1  # the rerun merged what the faults left
    assert PartitionCatalog(store, NS, "trimmed", 0).load().log_start_offset > 0
    assert proxy.counts[{"errors": "error", "resets": "reset", "outage": "outage"}[fault]] > 0
    store.close()
