"""`kfs lifecycle`: S3 lifecycle rules from topic retention, applied to a bucket on moto."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from click.testing import CliRunner, Result

from kfs_core.catalog import TopicRegistry, layout
from kfs_core.catalog.snapshots import take_snapshot
from kfs_core.cli import main
from kfs_core.cli.s3_lifecycle import (
    ABORT_MULTIPART_DAYS,
    DAY_MS,
    MAX_RULES,
    TopicRetention,
    expiration_days,
    plan_lifecycle,
)
from kfs_core.maintenance_pause import set_emergency_flag
from kfs_core.storage import open_store
from tests.spark_jobs.data import write_topic

HOUR_MS = 3_600_000


# --- the arithmetic -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("retention_ms", "days"),
    [
        (0, 1),  # nothing kept: still a day's margin
        (HOUR_MS, 2),  # 1 h + 1 day = 25 h: rounded up
        (DAY_MS, 2),
        (7 * DAY_MS, 8),  # Kafka's default: the margin is the 1-day floor (10% is 16.8 h)
        (10 * DAY_MS, 11),  # 10% is exactly the floor
        (10 * DAY_MS + 1, 12),  # ... and a millisecond more rounds up a whole day
        (30 * DAY_MS, 33),  # 10% beyond a day: 3 days
        (365 * DAY_MS, 402),  # 36.5 days of margin, rounded up
    ],
)
def test_expiration_is_retention_plus_margin_in_whole_days(retention_ms: int, days: int) -> None:
    assert expiration_days(retention_ms) == days


@pytest.mark.parametrize("retention_ms", [0, 1, HOUR_MS, 86_399_999, 3 * DAY_MS + 7, 10**12])
def test_expiration_never_precedes_retention_plus_the_margin_and_is_tight(
    retention_ms: int,
) -> None:
    days = expiration_days(retention_ms)
    needed = retention_ms + max(DAY_MS, retention_ms / 10)
    assert days * DAY_MS >= needed
    assert (days - 1) * DAY_MS < needed


def test_forever_has_no_expiration() -> None:
    with pytest.raises(ValueError, match="forever"):
        expiration_days(-1)


# --- the plan -----------------------------------------------------------------------


def retention(name: str, partitions: int = 1, ms: int = 7 * DAY_MS, policy: str = "delete"):
    return TopicRetention(name, partitions, ms, frozenset(policy.split(",")))


def test_rules_per_partition_on_segment_objects_most_specific_first() -> None:
    plan = plan_lifecycle(
        [
            retention("orders", partitions=3),
            retention("clicks", ms=HOUR_MS),
            retention("users", policy="compact"),
            retention("audit", policy="compact,delete"),
            retention("ledger", ms=-1),
        ],
        bucket="kfs-data",
        store_prefix="kfs",
        namespace="prod",
    )
    expiring = [(r.prefix, r.expiration_days) for r in plan.expiring_rules]
    assert expiring == [
        ("kfs/prod/clicks/0/segment-", 2),
        ("kfs/prod/orders/0/segment-", 8),
        ("kfs/prod/orders/1/segment-", 8),
        ("kfs/prod/orders/2/segment-", 8),
    ]
    last = plan.rules[-1]
    assert (last.prefix, last.abort_multipart_days, last.expiration_days) == (
        "kfs/",
        ABORT_MULTIPART_DAYS,
        None,
    )
    assert {s.name for s in plan.skipped} == {"users", "audit", "ledger"}
    assert "compact" in dict((s.name, s.reason) for s in plan.skipped)["audit"]
    ids = [r.id for r in plan.rules]
    assert len(ids) == len(set(ids))
    # Most specific first: no rule's prefix extends an earlier rule's prefix.
    for i, earlier in enumerate(plan.rules):
        for later in plan.rules[i + 1 :]:
            assert not later.prefix.startswith(earlier.prefix), (earlier.prefix, later.prefix)
    # Expiring prefixes never overlap (S3 would apply the shortest of overlapping rules).
    prefixes = [r.prefix for r in plan.expiring_rules]
    for a in prefixes:
        assert [b for b in prefixes if b.startswith(a)] == [a]


def test_an_unprefixed_store_and_namespace_keep_keys_clean() -> None:
    plan = plan_lifecycle([retention("t")], bucket="b", store_prefix="", namespace="")
    assert [r.prefix for r in plan.rules] == ["t/0/segment-", ""]


def test_rule_ids_stay_within_s3s_limit_and_unique() -> None:
    long_a, long_b = "a" * 249, "a" * 248 + "b"
    plan = plan_lifecycle(
        [retention(long_a), retention(long_b)], bucket="b", store_prefix="p", namespace="n" * 40
    )
    ids = [r.id for r in plan.rules]
    assert all(len(i) <= 255 for i in ids)
    assert len(set(ids)) == len(ids)


def test_more_rules_than_s3_allows_is_an_error() -> None:
    with pytest.raises(ValueError, match=f"{MAX_RULES + 1} lifecycle rules.*--topics"):
        plan_lifecycle(
            [retention("wide", partitions=MAX_RULES)], bucket="b", store_prefix="", namespace="n"
        )
    plan = plan_lifecycle(
        [retention("wide", partitions=MAX_RULES - 1)], bucket="b", store_prefix="", namespace="n"
    )
    assert len(plan.rules) == MAX_RULES


# --- against a store on moto, through the command -----------------------------------


@pytest.fixture
def bucket(moto_server: str) -> Iterator[str]:
    name = f"kfs-lifecycle-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=name)
    yield name


def run_kfs(moto_server: str, store_url: str, *args: str) -> Result:
    env = {"KFS_STORE_URL": store_url, "KFS_NAMESPACE": "prod", "KFS_S3_ENDPOINT_URL": moto_server}
    return CliRunner().invoke(main, ["lifecycle", *args], env=env)


@pytest.mark.integration
def test_json_rules_apply_to_a_bucket_and_cover_exactly_the_expiring_segments(
    moto_server: str, bucket: str
) -> None:
    store = open_store(f"s3://{bucket}/kfs", endpoint_url=moto_server)
    week, hour = str(7 * DAY_MS), str(HOUR_MS)
    write_topic(store, "prod", "orders", partitions=2, segments=2, records_per_segment=20,
                configs={"retention.ms": week})  # fmt: skip
    write_topic(store, "prod", "clicks", segments=1, records_per_segment=20,
                configs={"retention.ms": hour})  # fmt: skip
    write_topic(store, "prod", "users", segments=1, records_per_segment=20,
                configs={"cleanup.policy": "compact"})  # fmt: skip
    write_topic(store, "prod", "ledger", segments=1, records_per_segment=20,
                configs={"retention.ms": "-1"})  # fmt: skip
    take_snapshot(store, "prod", "nightly")
    set_emergency_flag(store, "prod", True)
    store.put("prod/_reports/validation/latest.json", b"{}")

    result = run_kfs(moto_server, f"s3://{bucket}/kfs")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)  # stdout is the document alone
    assert "no expiration for users: cleanup.policy=compact" in result.stderr
    assert "no expiration for ledger: retention.ms=-1" in result.stderr

    s3 = boto3.client("s3", endpoint_url=moto_server)
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=document)
    stored = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [_rule_essentials(r) for r in stored] == [_rule_essentials(r) for r in document["Rules"]]

    expiring = {r["Filter"]["Prefix"]: r["Expiration"]["Days"] for r in document["Rules"]
                if "Expiration" in r}  # fmt: skip
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])]  # fmt: skip
    expired_by = {k: [d for p, d in expiring.items() if k.startswith(p)] for k in keys}
    for key, days in expired_by.items():
        data_of_expiring_topic = re.fullmatch(
            r"kfs/prod/(orders|clicks)/\d+/segment-\d{20}\.(kfs|index)", key
        )
        if data_of_expiring_topic:
            assert days == [{"orders": 8, "clicks": 2}[data_of_expiring_topic.group(1)]], key
        else:  # catalog, registry, snapshots, reports, the pause flag, kept topics' data
            assert days == [], key
    # Every kind of object was there to be classified.
    assert any("/_log/" in k for k in keys) and any("/_snapshots/" in k for k in keys)
    assert any("/_topics/" in k for k in keys) and any("/_reports/" in k for k in keys)
    assert any(k.startswith("kfs/prod/users/0/segment-") for k in keys)
    abort = [r for r in document["Rules"] if "AbortIncompleteMultipartUpload" in r]
    assert [(r["Filter"]["Prefix"], r["AbortIncompleteMultipartUpload"]) for r in abort] == [
        ("kfs/", {"DaysAfterInitiation": ABORT_MULTIPART_DAYS})
    ]


def _rule_essentials(rule: dict[str, Any]) -> dict[str, Any]:
    return {k: rule[k] for k in ("ID", "Filter", "Status", "Expiration",
                                 "AbortIncompleteMultipartUpload") if k in rule}  # fmt: skip


@pytest.mark.integration
def test_topics_option_picks_topics_and_an_unknown_one_is_a_one_line_error(
    moto_server: str, bucket: str
) -> None:
    store = open_store(f"s3://{bucket}", endpoint_url=moto_server)
    registry = TopicRegistry(store, "prod")
    registry.create_topic("a", 2)
    registry.create_topic("b", 1)
    result = run_kfs(moto_server, f"s3://{bucket}", "--topics", "b")
    assert result.exit_code == 0, result.stderr
    assert [r["Filter"]["Prefix"] for r in json.loads(result.stdout)["Rules"]] == [
        "prod/b/0/segment-",
        "",
    ]
    result = run_kfs(moto_server, f"s3://{bucket}", "--topics", "b,nope")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == ["kfs: error: unknown topic 'nope'"]


# --- terraform ---------------------------------------------------------------------


def parse_hcl_blocks(text: str) -> list[tuple[str, list[str], dict[str, Any]]]:
    """Top-level blocks of the HCL subset `to_terraform` writes: attributes and nested blocks.

    Nested blocks become lists under their name; values are JSON literals.
    """
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    stack: list[dict[str, Any]] = []
    blocks: list[tuple[str, list[str], dict[str, Any]]] = []
    for line in lines:
        if not line:
            continue
        if line.endswith("{"):
            head = line[:-1].split()
            body: dict[str, Any] = {}
            if not stack:
                blocks.append((head[0], [json.loads(label) for label in head[1:]], body))
            else:
                assert len(head) == 1, line
                stack[-1].setdefault(head[0], []).append(body)
            stack.append(body)
        elif line == "}":
            stack.pop()
        else:
            name, sep, value = line.partition("=")
            assert sep and stack, line
            stack[-1][name.strip()] = json.loads(value.strip())
    assert not stack, "unbalanced braces"
    return blocks


@pytest.mark.integration
def test_terraform_resource_has_the_same_rules(moto_server: str, bucket: str) -> None:
    store = open_store(f"s3://{bucket}/base/kfs", endpoint_url=moto_server)
    registry = TopicRegistry(store, "prod")
    registry.create_topic("orders", 2, {"retention.ms": str(30 * DAY_MS)})
    registry.create_topic("users", 1, {"cleanup.policy": "compact"})
    json_rules = json.loads(run_kfs(moto_server, f"s3://{bucket}/base/kfs").stdout)["Rules"]
    result = run_kfs(moto_server, f"s3://{bucket}/base/kfs", "--format", "terraform")
    assert result.exit_code == 0, result.stderr
    assert "# no expiration for users: cleanup.policy=compact" in result.stdout

    [(kind, labels, resource)] = parse_hcl_blocks(result.stdout)
    assert (kind, labels) == ("resource", ["aws_s3_bucket_lifecycle_configuration", "kfs"])
    assert resource["bucket"] == bucket
    rules = resource["rule"]
    assert [(r["id"], r["filter"][0]["prefix"]) for r in rules] == [
        (r["ID"], r["Filter"]["Prefix"]) for r in json_rules
    ]
    assert [r["filter"][0]["prefix"] for r in rules] == [
        "base/kfs/prod/orders/0/segment-",
        "base/kfs/prod/orders/1/segment-",
        "base/kfs/",
    ]
    assert [r.get("expiration", [{}])[0].get("days") for r in rules] == [33, 33, None]
    assert rules[-1]["abort_incomplete_multipart_upload"] == [
        {"days_after_initiation": ABORT_MULTIPART_DAYS}
    ]
    assert {r["status"] for r in rules} == {"Enabled"}


# --- stores without lifecycle rules -------------------------------------------------


def test_a_local_directory_store_is_a_one_line_error(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kfs_core.cli", "--store-url", tmp_path.as_uri(), "lifecycle"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("kfs: error: ") and "local directory" in line and "S3" in line


def test_layout_keeps_catalog_keys_out_of_segment_prefixes() -> None:
    # The rules rely on it: a partition's data keys start with "segment-", its catalog's do not.
    partition_dir = layout.join("ns", layout.partition_dir("t", 0)) + "/"
    data = layout.join("ns", layout.segment_key("t", 0, 5, "-c1"))
    assert data.startswith(partition_dir + "segment-")
    assert layout.join("ns", layout.index_key_for(layout.segment_key("t", 0, 5))).startswith(
        partition_dir + "segment-"
    )
    assert not layout.log_prefix("ns", "t", 0).startswith(partition_dir + "segment-")
