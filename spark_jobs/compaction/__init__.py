r"""Compaction: merge small segments; key-compact ``cleanup.policy=compact`` topics as Kafka does.

Run it with ``spark-submit spark_jobs/compaction/__main__.py --store-url URL --namespace NS``
(or ``python -m spark_jobs.compaction``, ``kfs jobs run [--spark-submit] compaction``;
flags: `build_parser`)::

    spark-submit spark_jobs/compaction/__main__.py --store-url s3://bucket/kfs --namespace prod \
        [--topics a,b] [--dry-run] [--max-read-mb-per-s 50] [--min-inputs 4] [--batch-bytes 1048576] \
        [--compression-level 1]

Per partition, planned on the driver from the catalog and the topic config
(`plan_partition`):

**Merge** (topics without ``compact`` in ``cleanup.policy``).  Runs of at
least ``--min-inputs`` adjacent live segments, each smaller than
``segment.bytes``, are cut into groups of at most ``segment.bytes`` input
bytes; each group of two or more becomes ``segment.bytes``-sized outputs.

**Key compaction** (``compact`` in ``cleanup.policy``), following Kafka's log
cleaner (``kafka.log.LogCleaner``):

- The newest live segment is never cleaned (Kafka never cleans the active
  segment; here it holds the record at the high watermark, which consumers
  need to reach the end).  With ``min.compaction.lag.ms``
  > 0, cleaning also stops at the first segment whose newest timestamp
  (``max_timestamp``; ``created_ms`` without timestamps) is within the lag:
  nothing from there on is read or touched.  The rest is *cleanable*.
- The cleanable range starts with the *clean* segments earlier runs wrote
  (their keys end in ``-c<run>``, which records Kafka's cleaner checkpoint in
  the same atomic commit as the data) and goes on with *dirty* ones.  The
  partition is cleaned only if dirty bytes / cleanable bytes >=
  ``min.cleanable.dirty.ratio``, or if the first dirty segment's oldest
  timestamp is older than ``max.compaction.lag.ms`` (and there are dirty
  bytes).
- Key map, in Spark: executors read every cleanable segment and emit rows
  ``(group, topic, partition, key, offset, clean, expired)``; a ``groupBy``
  over ``(topic, partition, key)`` of the dirty rows keeps each key's maximum
  offset (a shuffle: the map is never one dict on the driver).  Keys longer
  than 32 bytes enter the map as their SHA-256 (``map_key``).  A join of all
  rows with that map gives, per output group, the offsets to drop, which are
  joined to the group's rewrite task.  The rewriter is handed the records to
  drop (the complement of the survivors among keyed records) rather than the
  survivors, so a record the map knows nothing about is kept, never lost.
- A keyed record is dropped when the map holds a later offset for its key.
  A tombstone (null value) that is its key's last record is dropped only
  from the clean part, and only once its timestamp is at least
  ``delete.retention.ms`` older than the cleaning point, the newest timestamp
  of the clean part (Kafka's delete horizon: the last clean segment's time
  minus ``delete.retention.ms``; tombstones in dirty segments are always
  kept).  So a tombstone survives at least one cleaning and stays readable
  for ``delete.retention.ms`` afterwards.
- Records without a key are kept.  Kafka refuses them on produce to a
  compacted topic and its cleaner drops any it finds; KFS is lenient, because
  dropping data a client was told was written would surprise more.
- Transactions, as Kafka's cleaner treats them: nothing at or above the last
  stable offset (the first offset of a transaction still open in the newest
  segment) is cleanable, so every transaction below it has ended.  An
  aborted transaction's batches (the catalog's ``aborted`` entries name
  them) are removed; a committed one's records enter the key map like any
  others, their batch keeping its header (producer id, epoch, sequence,
  transactional flag).  A marker is kept until it is past the delete horizon
  (as tombstones are) and nothing of its transaction is left
  (`kfs_core.records.rewrite` says exactly when); each output carries the
  ``aborted`` entries whose marker it holds, less those of removed markers
  (`kfs_core.catalog.carry_transactions`), so ``read_committed`` reads stay
  right after a merge or a compaction.
- Offsets are never renumbered: survivors keep offset, timestamp, key, value
  and headers; dropped records leave gaps.

**Rewriting** (executors, `rewrite_group`; the batches by
`kfs_core.records.rewrite.BatchRewriter`), for both: every input segment is
read (verified: body and batch CRCs), each ordinary batch's surviving records
are re-batched into batches of about ``--batch-bytes`` uncompressed (1 MiB,
never above ``max.message.bytes``) compressed with ``compression.type``
(zstd when it is ``producer``) at ``--compression-level`` (zstd: 1 by
default, see `DEFAULT_ZSTD_LEVEL`).  A new batch spans its source batches' offsets
exactly (base offset of the first, last offset delta to the last), records
keep their offsets, timestamps, keys, values, headers and leader epoch;
only CreateTime batches of one leader epoch are merged, and a merged batch
has no producer id.  Each producer's last batch in an input segment keeps
its own header and boundaries (empty, if it loses every record), as Kafka's
cleaner keeps a producer's last batch: a daemon that rebuilds producer state
from the segments (a takeover, a lost snapshot) still knows the producer's
epoch and last sequence, and deduplicates its retries.  Records are moved without being
decoded: `kfs_core.records.merge.BatchMerger` rewrites each one's offset and
timestamp deltas and copies the rest of its bytes (checking its structure as
decoding would), and each new batch is compressed once, by a compressor
reused across batches.  Control batches, transactional batches that lose
no record, and empty batches, are copied byte for byte; a transactional
batch that loses some keeps its own header and boundaries; LogAppendTime batches keep their
own boundaries and header and are only recompressed (and filtered).  A source
batch whose records are all dropped disappears.  Outputs start at their
group's first base offset and are cut before they would exceed
``segment.bytes``; `SegmentWriter` builds each output's ``.index``.  Output
keys carry a run suffix (``-m<run>`` merged, ``-c<run>`` key-compacted):
segment keys are never reused, and a rerun writes new ones.

Reads are rate-limited: ``--max-read-mb-per-s`` (default 50 MiB/s, 0 = no
limit) is the job's total, split evenly over the task slots
(``spark.default.parallelism``); every Spark task throttles its reads with
token buckets (`ReadThrottle`, `TokenBucket`).

**Committing** (driver): outputs are uploaded (segment, then index) before
one ``PartitionCatalog.replace(inputs, outputs)`` per partition.  If
retention or another run removed an input meanwhile, the replace raises
`ReplaceConflict`: that partition is reported as a conflict, its outputs are
orphans for retention's orphan sweep, and the other partitions go on.  A
partition whose rewrite failed (a damaged segment, say) is not committed and
the run ends ``failed``.  The emergency pause flag stops the job before it
starts, in every executor task, and before every commit (status ``paused``).

``--dry-run`` plans and reports; it starts no Spark job and writes nothing
but the run summary.  Every step is idempotent: killed anywhere, the catalog
still names whole, verified segments, and a rerun plans afresh.

The summary's counts cover partitions, segments, bytes and records in and out,
``bytes_saved`` (input minus output segment bytes; ``details.storage`` has
the ratio), records removed, conflicts, errors and orphaned objects;
``details.partitions`` lists every partition that had work.

The package, one module per step:

- `options`: `CompactionOptions`, the command line (`build_parser`);
- `plan`: per partition, merge or key-compact (driver, Spark-free);
- `tasks`: what one executor task does: key scans, group rewrites, uploads;
- `throttle`: the read budget (`ReadThrottle`, `TokenBucket`);
- `spark`: the key map shuffle and the rewrite stage;
- `commit`: one catalog replace per partition, the outcomes;
- `report`: counts and partition reports of the run summary;
- `job`: `run` and `main`, which tie them together.
"""

from __future__ import annotations

from spark_jobs.compaction.commit import (
    COMPACTED,
    CONFLICT,
    ERROR,
    MERGED,
    PAUSED,
    SKIPPED,
    PartitionOutcome,
    commit_partition,
)
from spark_jobs.compaction.job import (
    main,
    run,
)
from spark_jobs.compaction.options import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_MAX_READ_MB_PER_S,
    DEFAULT_MIN_INPUTS,
    DEFAULT_ZSTD_LEVEL,
    JOB,
    CompactionOptions,
    build_parser,
)
from spark_jobs.compaction.plan import (
    CLEAN_MARK,
    KIND_COMPACT,
    KIND_MERGE,
    MERGE_MARK,
    SKIP,
    PartitionPlan,
    group_by_size,
    is_cleaned_key,
    output_codec,
    plan_key_compaction,
    plan_merge,
    plan_partition,
    segment_time_ms,
    target_batch_bytes,
)
from spark_jobs.compaction.spark import (
    drop_offsets,
    rewrite_partitions,
)
from spark_jobs.compaction.tasks import (
    KEY_SCHEMA,
    KeyScanTask,
    RewriteResult,
    RewriteTask,
    build_tasks,
    map_key,
    output_level,
    read_segment,
    rewrite_group,
    run_suffix,
    scan_keys,
)
from spark_jobs.compaction.throttle import (
    ReadThrottle,
    TokenBucket,
)

__all__ = [
    "CLEAN_MARK",
    "COMPACTED",
    "CONFLICT",
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_MAX_READ_MB_PER_S",
    "DEFAULT_MIN_INPUTS",
    "DEFAULT_ZSTD_LEVEL",
    "ERROR",
    "JOB",
    "KEY_SCHEMA",
    "KIND_COMPACT",
    "KIND_MERGE",
    "MERGED",
    "MERGE_MARK",
    "PAUSED",
    "SKIP",
    "SKIPPED",
    "CompactionOptions",
    "KeyScanTask",
    "PartitionOutcome",
    "PartitionPlan",
    "ReadThrottle",
    "RewriteResult",
    "RewriteTask",
    "TokenBucket",
    "build_parser",
    "build_tasks",
    "commit_partition",
    "drop_offsets",
    "group_by_size",
    "is_cleaned_key",
    "main",
    "map_key",
    "output_codec",
    "output_level",
    "plan_key_compaction",
    "plan_merge",
    "plan_partition",
    "read_segment",
    "rewrite_group",
    "rewrite_partitions",
    "run",
    "run_suffix",
    "scan_keys",
    "segment_time_ms",
    "target_batch_bytes",
]
