"""Iceberg tables of topics: their catalog, their names, and the offsets each one holds.

A topic with ``kfs.table.enabled=true`` has an Iceberg table that the
``tables`` job (`spark_jobs.tables`) keeps up to date.  This module is what
the job, the KFS page and tests share:

- **The catalog.**  A pyiceberg catalog named ``kfs`` (or the name given)
  from pyiceberg's own configuration (``~/.pyiceberg.yaml`` or
  ``PYICEBERG_CATALOG__KFS__*`` variables: REST, Glue, Hive, SQL...) when
  it defines one; otherwise the embedded default, a SQL catalog on SQLite:
  ``{store}/{ns}/_tables/catalog.db`` for a local-directory store, or
  ``$KFS_HOME/tables/{ns}.db`` beside an S3 store (one machine's catalog:
  point several machines at a shared catalog instead).  Table data and
  metadata live in the store, under ``{ns}/_tables/{table}/``.
- **Names.**  The Iceberg namespace is the KFS namespace; a topic's table
  is the topic name with ``.`` replaced by ``_`` (Iceberg reads a dot as a
  namespace separator).
- **What a table holds.**  Every snapshot the job commits carries, in its
  summary, the topic (``kfs.topic``), the offsets it added per partition
  (``kfs.offsets``: ``{"0": [start, end)}``) and the next offset per
  partition of everything committed so far (``kfs.next-offsets``).  The
  newest snapshot holding ``kfs.next-offsets`` is where the next run starts;
  since that summary is committed in the same atomic catalog commit as the
  rows, an offset range lands in a table at most once, whatever fails.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from kfs_core.namespace import TABLES_DIR

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

__all__ = [
    "DEFAULT_CATALOG",
    "SUMMARY_NEXT_OFFSETS",
    "SUMMARY_OFFSETS",
    "SUMMARY_TOPIC",
    "TableState",
    "catalog_properties",
    "covered_offsets",
    "open_catalog",
    "table_identifier",
    "table_location",
    "table_state",
]

DEFAULT_CATALOG: Final = "kfs"
SUMMARY_TOPIC: Final = "kfs.topic"
SUMMARY_OFFSETS: Final = "kfs.offsets"
SUMMARY_NEXT_OFFSETS: Final = "kfs.next-offsets"
SUMMARY_DEAD_LETTERS: Final = "kfs.dead-letters"
SUMMARY_SCHEMA_CHANGES: Final = "kfs.schema-changes"
SUMMARY_REPORT: Final = "kfs.report"


def table_identifier(namespace: str, topic: str) -> tuple[str, str]:
    """The Iceberg (namespace, table) of ``topic``'s table."""
    return (namespace, topic.replace(".", "_"))


def _store_root(store_url: str) -> tuple[str, str]:
    """(scheme, location) of the store: ``("file", "/abs/dir")`` or ``("s3", "s3://b/prefix")``."""
    parsed = urllib.parse.urlparse(store_url)
    if parsed.scheme == "s3":
        return "s3", store_url.split("?", 1)[0].rstrip("/")
    if parsed.scheme == "file":
        return "file", os.path.abspath(urllib.parse.unquote(parsed.path))
    return "file", os.path.abspath(store_url)


def table_location(store_url: str, namespace: str, topic: str) -> str:
    """Where a topic's table keeps its data and metadata: ``{store}/{ns}/_tables/{table}``."""
    scheme, root = _store_root(store_url)
    name = table_identifier(namespace, topic)[1]
    if scheme == "s3":
        return f"{root}/{namespace}/{TABLES_DIR}/{name}"
    return Path(root, namespace, TABLES_DIR, name).as_uri()


S3Credentials = tuple[str | None, str | None, str | None]  # key id, secret, session token


def catalog_properties(
    store_url: str,
    namespace: str,
    *,
    s3_endpoint_url: str | None = None,
    s3_credentials: S3Credentials = (None, None, None),
) -> dict[str, str]:
    """The embedded default catalog's pyiceberg properties for a store and namespace.

    S3 credentials not given come from the standard AWS chain, as boto3 finds them.
    """
    scheme, root = _store_root(store_url)
    if scheme == "s3":
        home = Path(os.environ.get("KFS_HOME") or ".kfs").absolute()
        database = home / "tables" / f"{namespace}.db"
        warehouse = f"{root}/{namespace}/{TABLES_DIR}"
    else:
        database = Path(root, namespace, TABLES_DIR, "catalog.db")
        warehouse = Path(root, namespace, TABLES_DIR).as_uri()
    database.parent.mkdir(parents=True, exist_ok=True)
    properties = {"type": "sql", "uri": f"sqlite:///{database}", "warehouse": warehouse}
    if scheme == "s3":
        if s3_endpoint_url:
            properties["s3.endpoint"] = s3_endpoint_url
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            properties["s3.region"] = region
        names = ("s3.access-key-id", "s3.secret-access-key", "s3.session-token")
        properties.update({n: v for n, v in zip(names, s3_credentials, strict=True) if v})
    return properties


def open_catalog(
    store_url: str,
    namespace: str,
    *,
    name: str = DEFAULT_CATALOG,
    s3_endpoint_url: str | None = None,
    s3_credentials: S3Credentials = (None, None, None),
) -> Catalog:
    """The catalog ``name`` of pyiceberg's configuration when it has one, else the embedded default."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.utils.config import Config

    configured = Config().get_catalog_config(name)
    if configured is not None:
        # Read now: pyiceberg's own copy of the environment is taken when it is imported.
        return load_catalog(name, **cast(dict[str, str], configured))
    properties = catalog_properties(
        store_url, namespace, s3_endpoint_url=s3_endpoint_url, s3_credentials=s3_credentials
    )
    return load_catalog(name, **properties)


def _partition_offsets(text: str | None) -> dict[int, int]:
    if not text:
        return {}
    return {int(p): int(o) for p, o in json.loads(text).items()}


def _kfs_snapshot(table: Table) -> Snapshot | None:
    """The newest snapshot of the table's history that KFS committed (it has next offsets)."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        if snapshot.summary and SUMMARY_NEXT_OFFSETS in snapshot.summary.additional_properties:
            return snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return None


def _properties(snapshot: Snapshot | None) -> dict[str, str]:
    if snapshot is None or snapshot.summary is None:
        return {}
    return dict(snapshot.summary.additional_properties)


def covered_offsets(table: Table) -> dict[int, int]:
    """The next offset per partition of what the table holds ({} for a table KFS never wrote)."""
    return _partition_offsets(_properties(_kfs_snapshot(table)).get(SUMMARY_NEXT_OFFSETS))


@dataclass(frozen=True)
class TableState:
    """What the KFS page shows of a topic's table: its newest KFS snapshot."""

    topic: str
    identifier: str  # "namespace.table"
    format: str
    snapshot_id: int | None
    committed_ms: int | None
    next_offsets: Mapping[int, int]
    offsets: Mapping[int, tuple[int, int]]  # the range the snapshot added
    rows: int
    report: str | None  # the snapshot's data-quality report key

    def lag(self, ends: Mapping[int, int]) -> int:
        """Records of the topic (its partitions' ``ends``) not yet in the table."""
        return sum(max(0, end - self.next_offsets.get(p, 0)) for p, end in ends.items())

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "identifier": self.identifier,
            "format": self.format,
            "snapshot_id": self.snapshot_id,
            "committed_ms": self.committed_ms,
            "next_offsets": {str(p): o for p, o in sorted(self.next_offsets.items())},
            "offsets": {str(p): list(r) for p, r in sorted(self.offsets.items())},
            "rows": self.rows,
            "report": self.report,
        }


def table_state(catalog: Catalog, namespace: str, topic: str) -> TableState | None:
    """The topic's table as its newest KFS snapshot describes it; None when there is no table."""
    from pyiceberg.exceptions import NoSuchTableError

    identifier = table_identifier(namespace, topic)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        return None
    snapshot = _kfs_snapshot(table)
    props = _properties(snapshot)
    current = table.current_snapshot()
    total = _properties(current).get("total-records")
    return TableState(
        topic=topic,
        identifier=".".join(identifier),
        format="iceberg",
        snapshot_id=snapshot.snapshot_id if snapshot else None,
        committed_ms=snapshot.timestamp_ms if snapshot else None,
        next_offsets=_partition_offsets(props.get(SUMMARY_NEXT_OFFSETS)),
        offsets={
            int(p): (int(r[0]), int(r[1]))
            for p, r in json.loads(props.get(SUMMARY_OFFSETS) or "{}").items()
        },
        rows=int(total or 0),
        report=props.get(SUMMARY_REPORT),
    )
