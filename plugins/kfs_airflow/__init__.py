"""KFS for Apache Airflow, in provider shape.

- `kfs_airflow.hooks` — `KfsHook`: the store, namespace and S3 settings of an
  Airflow connection (``kfs_default``), the one place Airflow code opens a
  store, and the jobs' runs; `KfsAdminHook`: the daemon's consumer groups.
- `kfs_airflow.operators`, `kfs_airflow.sensors` — thin, typed by the hook.
- `kfs_airflow.plugin.KfsPlugin` — the KFS page in the Airflow UI.

The package lives in Airflow's plugins folder and is installed with KFS, so
DAG files, task processes and tests import it the same way.
"""

__all__ = ["get_provider_info"]


def get_provider_info() -> dict[str, object]:
    """Provider metadata (the ``apache_airflow_provider`` entry point)."""
    return {
        "package-name": "kfs",
        "name": "KFS",
        "description": "KFS: a Kafka-compatible log on object storage, maintained by Spark jobs.",
        "connection-types": [
            {"connection-type": "kfs", "hook-class-name": "kfs_airflow.hooks.KfsHook"}
        ],
        "versions": ["0.1.0"],
    }
