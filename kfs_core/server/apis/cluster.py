"""Cluster and log administration: DescribeCluster, DescribeLogDirs, DeleteRecords."""

from __future__ import annotations

from typing import Final

from kfs_core.server.apis.base import Api

__all__ = ["APIS"]

APIS: Final[tuple[Api, ...]] = ()
