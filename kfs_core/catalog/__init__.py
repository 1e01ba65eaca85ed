"""The catalog: which segments make up each partition, and which topics exist.

- `layout`    — object keys of commits, checkpoints, the pointer and segments.
- `actions`   — `SegmentEntry` and the actions (add, remove, replace,
  set_log_start_offset, topic_config, lease, leader_epoch_start); the commit
  file format.
- `epochs`    — the leader epoch history (where each lease epoch began) and
  OffsetForLeaderEpoch's answer from it.
- `state`     — `PartitionState`, the replay that builds it, checkpoint files.
- `partition` — `PartitionCatalog`: load, refresh, commit with retries,
  checkpoints, snapshots by version, commit expiry; a façade over
  - `commit`      — the commit protocol (put-if-absent versions, retries),
  - `loader`      — loading and caching the state,
  - `checkpoints` — checkpoint cadence, writing and commit expiry,
  - `log_files`   — the ``_log/`` keys and counted store requests.
- `snapshots` — named snapshots of a namespace's catalog: take, list, read, delete.
- `restore`   — restoring a topic's catalog from a snapshot (plan, then commit).
- `config`    — topic configs (Kafka names, defaults, validation) and topic names.
- `topics`    — `TopicRegistry`: create, list, describe, alter, delete topics.
"""

from kfs_core.catalog.actions import (
    Action,
    AddSegment,
    Commit,
    RemoveSegment,
    ReplaceSegments,
    SegmentEntry,
    SegmentRef,
    SetLeaderEpochStart,
    SetLogStartOffset,
    SetTopicConfig,
    TakeLease,
    Tombstone,
    carry_transactions,
)
from kfs_core.catalog.checkpoints import ExpireResult
from kfs_core.catalog.commit import CommitResult, RetryPolicy
from kfs_core.catalog.config import (
    CONFIG_KEYS,
    DEFAULT_CONFIGS,
    KFS_CONFIG_KEYS,
    PartitionField,
    TopicConfig,
    validate_config,
    validate_configs,
    validate_topic_name,
)
from kfs_core.catalog.epochs import EpochEntry
from kfs_core.catalog.log_files import IoStats
from kfs_core.catalog.partition import PartitionCatalog
from kfs_core.catalog.state import TOMBSTONE_RETENTION_MS, PartitionState
from kfs_core.catalog.topics import TopicDescription, TopicRecord, TopicRegistry

__all__ = [
    "CONFIG_KEYS",
    "DEFAULT_CONFIGS",
    "KFS_CONFIG_KEYS",
    "TOMBSTONE_RETENTION_MS",
    "Action",
    "AddSegment",
    "Commit",
    "CommitResult",
    "EpochEntry",
    "ExpireResult",
    "IoStats",
    "PartitionCatalog",
    "PartitionField",
    "PartitionState",
    "RemoveSegment",
    "ReplaceSegments",
    "RetryPolicy",
    "SegmentEntry",
    "SegmentRef",
    "SetLeaderEpochStart",
    "SetLogStartOffset",
    "SetTopicConfig",
    "TakeLease",
    "Tombstone",
    "TopicConfig",
    "TopicDescription",
    "TopicRecord",
    "TopicRegistry",
    "carry_transactions",
    "validate_config",
    "validate_configs",
    "validate_topic_name",
]
