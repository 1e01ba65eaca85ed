"""The directories KFS keeps directly under a namespace, beside the topics.

Everything of one namespace lives under ``{ns}/``: a directory per topic, and
these, whose names start with ``_`` so they sort apart from the topics::

    {ns}/_topics/...      the topic registry (`kfs_core.catalog.topics`)
    {ns}/_snapshots/...   named catalog snapshots (`kfs_core.catalog.snapshots`)
    {ns}/_reports/...     maintenance job run summaries and reports (`kfs_core.reports`)
    {ns}/_control/...     the daemon's signals to the jobs (`kfs_core.maintenance_pause`)
    {ns}/_security/...    SASL users and ACLs (`kfs_core.security`)
    {ns}/_page/...        the KFS page's last overview (`kfs_airflow.overview_cache`)
    {ns}/_cluster/...     the daemons' heartbeats, the pinned placements, dynamic broker configs (`kfs_core.cluster`)
    {ns}/_wal/...         the ``store`` durability mode's WAL objects (`kfs_core.log.wal.store`)
    {ns}/_tables/...      Iceberg tables of topics, and their embedded catalog (`kfs_core.tables`)

A topic named like one of them would share its objects, so every name here is
a reserved topic name (`RESERVED_NAMES`, checked by
`kfs_core.catalog.config.validate_topic_name`).  Add a new directory here, and
only here: the reserved names follow.

This module imports nothing, so the Spark jobs, the Airflow plugin and the
DAG files can use it without loading the catalog or the daemon.
"""

from __future__ import annotations

__all__ = [
    "CLUSTER_DIR",
    "CONTROL_DIR",
    "DIRECTORIES",
    "PAGE_DIR",
    "REPORTS_DIR",
    "RESERVED_NAMES",
    "SECURITY_DIR",
    "SNAPSHOTS_DIR",
    "TABLES_DIR",
    "TOPICS_DIR",
    "WAL_DIR",
]

TOPICS_DIR = "_topics"
SNAPSHOTS_DIR = "_snapshots"
REPORTS_DIR = "_reports"
CONTROL_DIR = "_control"
SECURITY_DIR = "_security"
PAGE_DIR = "_page"
CLUSTER_DIR = "_cluster"
WAL_DIR = "_wal"
TABLES_DIR = "_tables"

#: Every directory KFS writes directly under a namespace, other than the topics'.
DIRECTORIES = (
    TOPICS_DIR,
    SNAPSHOTS_DIR,
    REPORTS_DIR,
    CONTROL_DIR,
    SECURITY_DIR,
    PAGE_DIR,
    CLUSTER_DIR,
    WAL_DIR,
    TABLES_DIR,
)

#: Topic names that would collide with `DIRECTORIES`.
RESERVED_NAMES = frozenset(DIRECTORIES)
