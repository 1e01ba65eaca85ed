"""`KfsBaseHook`: the ``kfs`` Airflow connection both KFS hooks read.

One connection (``kfs_default``, type ``kfs``) says where a namespace lives
(the store, for `kfs_airflow.hooks.kfs.KfsHook`) and where its daemon listens
(``bootstrap_servers``, for `kfs_airflow.hooks.admin.KfsAdminHook`); this base
reads it once per hook and holds what Airflow needs to find the hooks by
connection type.  The extra's keys are listed in `kfs_airflow.hooks.kfs`.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

__all__ = ["KfsBaseHook"]


class KfsBaseHook(BaseHook):
    """A hook on a ``kfs`` connection, read once, on first use."""

    conn_name_attr = "kfs_conn_id"
    default_conn_name = "kfs_default"
    conn_type = "kfs"
    hook_name = "KFS"

    def __init__(self, kfs_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kfs_conn_id = kfs_conn_id

    @cached_property
    def _connection(self) -> Any:
        return self.get_connection(self.kfs_conn_id)

    @property
    def _extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = self._connection.extra_dejson or {}
        return extra
