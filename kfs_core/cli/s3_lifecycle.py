"""S3 lifecycle rules derived from topic retention: what ``kfs lifecycle`` prints.

The plan lives here, beside the command (`kfs_core.cli.lifecycle`), because
only the command uses it; "lifecycle" alone would read as the log's own
start/stop life cycle (`kfs_core.log`).

The retention job (spark_jobs/retention.py, hourly under Airflow) is what
expires data: it drops segments from the catalog first and deletes their
objects after a grace period (1 h).  Bucket lifecycle rules are a backstop
under it - they keep a bucket from growing without bound while the DAG is
down - so they must never fire before the job would have:

    expiration days = ceil((retention.ms + margin) / 1 day)
    margin          = max(1 day, 10 % of retention.ms)

One day covers the job's hourly schedule, its grace period and a DAG outage of
most of a day; 10 % keeps the same proportion for long retentions.  S3 then
rounds every expiry up to the next midnight UTC.

What a rule may expire is decided by key prefix only (S3 filters have no
suffix or "not" match), and the catalog lives beside the data::

    {prefix}/{ns}/{topic}/{p}/segment-*.kfs|.index   data: may expire by age
    {prefix}/{ns}/{topic}/{p}/_log/...               catalog: must never expire
    {prefix}/{ns}/_topics/ _reports/ _snapshots/     catalog, reports: never

so a per-topic rule on ``{ns}/{topic}/`` would expire the partition's commit
log and checkpoints too - and with them its high watermark.  Rules are
therefore per partition, on ``{prefix}/{ns}/{topic}/{p}/segment-``, which
matches segment and index objects (compacted ones too) and nothing else.  No
rule covers a whole namespace or store prefix with an expiration, so rules
never overlap: S3 applies the shortest expiration among overlapping rules, not
the first or most specific one.  Rules are listed most specific first (as in
the KafScale reference), the store-wide abort rule last.

No expiration rule is generated for a topic that

- has ``retention.ms = -1`` (keep forever), or
- has ``compact`` in ``cleanup.policy``: compaction rewrites objects and keeps
  the last value of every key however old, so expiring by object age would
  drop live keys.

Caveat, because S3 is blind to the catalog: retention always keeps a
partition's newest segment (it holds the high watermark), so a partition with
no writes for longer than its rule's days loses that segment to S3 while the
catalog still names it; reads of those offsets then fail until new writes let
retention drop it.  Records whose timestamps lie in the future (a producer's
clock) are likewise expired by S3 before retention would.  ``retention.bytes``
cannot be expressed as a lifecycle rule at all.  Keep the retention DAG
running; rerun ``kfs lifecycle`` after creating topics or partitions or
changing retention.

One rule is store-wide: AbortIncompleteMultipartUpload after 1 day on the
store prefix (KFS writes with single PUTs; other tools writing to the bucket
may leave parts behind, which cost storage until aborted).  S3 allows at most
1000 rules in a bucket's configuration; a namespace needing more is an error
(pick topics with ``--topics``).  The configuration replaces the bucket's
whole lifecycle configuration when applied: merge it with other rules first
if the bucket holds more than this store.

Lifecycle rules are an S3 feature, so a local-directory store is an error, not
a warning: there is no bucket to apply them to, and a plan for one would be
easy to mistake for protection.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kfs_core.catalog import layout
from kfs_core.catalog.config import TopicConfig
from kfs_core.catalog.topics import TopicRegistry
from kfs_core.storage import LocalObjectStore, ObjectStore

__all__ = [
    "ABORT_MULTIPART_DAYS",
    "DAY_MS",
    "MAX_RULES",
    "LifecyclePlan",
    "LifecycleRule",
    "SkippedTopic",
    "TopicRetention",
    "expiration_days",
    "margin_ms",
    "plan_for_store",
    "plan_lifecycle",
    "read_topics",
]

DAY_MS = 86_400_000
#: The least time a rule waits beyond retention.ms (the retention DAG runs hourly, grace 1 h).
MIN_MARGIN_MS = DAY_MS
#: ... and the least share of retention.ms it waits beyond it.
MARGIN_PERCENT = 10
ABORT_MULTIPART_DAYS = 1
#: S3's limit on the rules of one bucket lifecycle configuration.
MAX_RULES = 1000
_MAX_RULE_ID = 255  # S3's limit on a rule ID's length
SEGMENT_KEY_START = "segment-"


def margin_ms(retention_ms: int) -> int:
    """How long after retention.ms a rule waits: max(1 day, 10 % of retention.ms)."""
    return max(MIN_MARGIN_MS, -(-retention_ms * MARGIN_PERCENT // 100))


def expiration_days(retention_ms: int) -> int:
    """Whole days (rounded up) after which S3 may expire a segment of this retention."""
    if retention_ms < 0:
        raise ValueError(f"retention.ms {retention_ms} keeps data forever: no expiration")
    return -(-(retention_ms + margin_ms(retention_ms)) // DAY_MS)


@dataclass(frozen=True)
class TopicRetention:
    """What the rules need of a topic: its partitions and how its data expires."""

    name: str
    partitions: int
    retention_ms: int
    cleanup_policy: frozenset[str]

    @classmethod
    def from_config(cls, name: str, partitions: int, config: TopicConfig) -> TopicRetention:
        return cls(name, partitions, config.retention_ms, config.cleanup_policy)

    @property
    def skip_reason(self) -> str | None:
        """Why the topic gets no expiration rule, or None if it gets one per partition."""
        if "compact" in self.cleanup_policy:
            policy = ",".join(sorted(self.cleanup_policy))
            return (
                f"cleanup.policy={policy}: compaction rewrites objects and keeps old keys, "
                "so objects must not expire by age"
            )
        if self.retention_ms < 0:
            return "retention.ms=-1: kept forever"
        return None


@dataclass(frozen=True)
class LifecycleRule:
    """One rule: a key prefix and either an expiration or an abort of multipart uploads."""

    id: str
    prefix: str
    expiration_days: int | None = None
    abort_multipart_days: int | None = None
    topic: str | None = None
    partition: int | None = None

    def to_s3(self) -> dict[str, Any]:
        """The rule as `put_bucket_lifecycle_configuration` (and ``aws s3api``) take it."""
        rule: dict[str, Any] = {
            "ID": self.id,
            "Filter": {"Prefix": self.prefix},
            "Status": "Enabled",
        }
        if self.expiration_days is not None:
            rule["Expiration"] = {"Days": self.expiration_days}
        if self.abort_multipart_days is not None:
            rule["AbortIncompleteMultipartUpload"] = {
                "DaysAfterInitiation": self.abort_multipart_days
            }
        return rule


@dataclass(frozen=True)
class SkippedTopic:
    name: str
    reason: str


@dataclass(frozen=True)
class LifecyclePlan:
    """The rules for one namespace of one store, and the topics that got none."""

    bucket: str
    store_url: str
    namespace: str
    rules: tuple[LifecycleRule, ...]
    skipped: tuple[SkippedTopic, ...]

    @property
    def expiring_rules(self) -> list[LifecycleRule]:
        return [r for r in self.rules if r.expiration_days is not None]

    def to_s3(self) -> dict[str, Any]:
        """The ``LifecycleConfiguration`` document: ``{"Rules": [...]}``."""
        return {"Rules": [rule.to_s3() for rule in self.rules]}

    def to_json(self) -> str:
        return json.dumps(self.to_s3(), indent=2) + "\n"

    def to_terraform(self, resource_name: str = "kfs") -> str:
        """An ``aws_s3_bucket_lifecycle_configuration`` resource with the same rules."""
        lines = [
            f"# S3 lifecycle rules for KFS namespace {self.namespace!r} in {self.store_url},",
            "# generated by `kfs lifecycle --format terraform` from the topics' retention.ms:",
            "# expiration = retention.ms + max(1 day, 10%), in whole days rounded up, on each",
            "# partition's segment-* objects only (never the catalog).  A backstop under the",
            "# retention DAG: rerun after creating topics or partitions or changing retention.",
        ]
        lines += [f"# no expiration for {s.name}: {s.reason}" for s in self.skipped]
        lines += [
            f'resource "aws_s3_bucket_lifecycle_configuration" {_hcl_string(resource_name)} {{',
            f"  bucket = {_hcl_string(self.bucket)}",
        ]
        for rule in self.rules:
            lines += [
                "",
                "  rule {",
                f"    id     = {_hcl_string(rule.id)}",
                '    status = "Enabled"',
                "",
                "    filter {",
                f"      prefix = {_hcl_string(rule.prefix)}",
                "    }",
            ]
            if rule.expiration_days is not None:
                lines += ["", "    expiration {", f"      days = {rule.expiration_days}", "    }"]
            if rule.abort_multipart_days is not None:
                lines += [
                    "",
                    "    abort_incomplete_multipart_upload {",
                    f"      days_after_initiation = {rule.abort_multipart_days}",
                    "    }",
                ]
            lines.append("  }")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _hcl_string(text: str) -> str:
    # HCL strings take JSON's escapes; "${" and "%{" would start a template.
    return json.dumps(text).replace("${", "$${").replace("%{", "%%{")


def _rule_id(*parts: str) -> str:
    rule_id = "-".join(p for p in parts if p)
    if len(rule_id) <= _MAX_RULE_ID:
        return rule_id
    digest = hashlib.sha256(rule_id.encode()).hexdigest()[:16]
    return f"{rule_id[: _MAX_RULE_ID - len(digest) - 1]}-{digest}"


def plan_lifecycle(
    topics: Iterable[TopicRetention],
    *,
    bucket: str,
    store_prefix: str,
    namespace: str,
    store_url: str = "",
) -> LifecyclePlan:
    """Rules for ``topics`` stored under ``store_prefix``/``namespace`` in ``bucket``."""
    rules: list[LifecycleRule] = []
    skipped: list[SkippedTopic] = []
    for topic in sorted(topics, key=lambda t: t.name):
        reason = topic.skip_reason
        if reason is not None:
            skipped.append(SkippedTopic(topic.name, reason))
            continue
        days = expiration_days(topic.retention_ms)
        for partition in range(topic.partitions):
            directory = layout.join(
                store_prefix, namespace, layout.partition_dir(topic.name, partition)
            )
            rules.append(
                LifecycleRule(
                    id=_rule_id("kfs", namespace, topic.name, str(partition), f"expire-{days}d"),
                    prefix=f"{directory}/{SEGMENT_KEY_START}",
                    expiration_days=days,
                    topic=topic.name,
                    partition=partition,
                )
            )
    abort_prefix = layout.join(store_prefix)
    rules.append(
        LifecycleRule(
            id=_rule_id("kfs-abort-incomplete-multipart", store_prefix.replace("/", "-")),
            prefix=f"{abort_prefix}/" if abort_prefix else "",
            abort_multipart_days=ABORT_MULTIPART_DAYS,
        )
    )
    if len(rules) > MAX_RULES:
        raise ValueError(
            f"namespace {namespace!r} needs {len(rules)} lifecycle rules (one per partition of "
            f"each expiring topic, plus one), more than the {MAX_RULES} S3 allows for a bucket: "
            "choose topics with --topics, or rely on the retention DAG alone"
        )
    return LifecyclePlan(
        bucket=bucket,
        store_url=store_url or f"s3://{bucket}/{store_prefix}".rstrip("/"),
        namespace=namespace,
        rules=tuple(rules),
        skipped=tuple(skipped),
    )


def read_topics(
    store: ObjectStore, namespace: str, names: Sequence[str] | None = None
) -> list[TopicRetention]:
    """The retention settings of the namespace's topics (or of ``names``), from the registry."""
    registry = TopicRegistry(store, namespace)
    chosen = list(names) if names else registry.list_topics()
    topics = []
    for name in chosen:
        description = registry.describe(name)  # UnknownTopic for a name that does not exist
        topics.append(TopicRetention.from_config(name, description.partitions, description.config))
    return topics


def plan_for_store(
    store: ObjectStore, namespace: str, names: Sequence[str] | None = None
) -> LifecyclePlan:
    """The lifecycle plan of an S3 store's namespace; ValueError for any other store."""
    inner = getattr(store, "inner", store)  # the daemon's InstrumentedStore wraps stores
    if isinstance(inner, LocalObjectStore):
        raise ValueError(
            f"{store.url} is a local directory: lifecycle rules are for S3 buckets "
            "(there the retention job alone expires data)"
        )
    from kfs_core.storage.s3 import S3ObjectStore

    if not isinstance(inner, S3ObjectStore):
        raise ValueError(f"{store.url}: lifecycle rules need an S3 store (s3://bucket/prefix)")
    return plan_lifecycle(
        read_topics(store, namespace, names),
        bucket=inner.bucket,
        store_prefix=inner.prefix,
        namespace=namespace,
        store_url=inner.url.partition("?")[0],
    )
