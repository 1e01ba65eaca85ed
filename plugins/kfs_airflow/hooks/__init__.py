"""The KFS provider's hooks: each owns its clients, operators and sensors ask them.

- `KfsHook` (`kfs`) — the store of a namespace: topics, catalog, job reports,
  the KFS page's stored copy, and the maintenance jobs' runs (`KfsHook.run_job`).
- `KfsAdminHook` (`admin`) — the daemon's Kafka admin client: consumer groups.
- `KfsBaseHook` (`base`) — the ``kfs`` connection both read.
- `spark_submit` — the Spark provider's hook set up for a KFS job.

Importing this package is cheap (DAG files do): kfs_core, boto3 and
confluent-kafka are imported where they are used.
"""

from kfs_airflow.hooks.admin import ADMIN_TIMEOUT_S, DaemonNotConfigured, KfsAdminHook
from kfs_airflow.hooks.base import KfsBaseHook
from kfs_airflow.hooks.kfs import JobRunFailed, KfsConnectionError, KfsHook

__all__ = [
    "ADMIN_TIMEOUT_S",
    "DaemonNotConfigured",
    "JobRunFailed",
    "KfsAdminHook",
    "KfsBaseHook",
    "KfsConnectionError",
    "KfsHook",
]
