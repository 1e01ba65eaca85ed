"""The Apache Spark provider's `SparkSubmitHook`, set up for a KFS job.

`KfsHook.run_job` (`kfs_airflow.hooks.kfs`) runs a job through spark-submit
when the connection names no job server; the Spark provider's operator builds
the `SparkSubmitHook` from its own arguments, and `for_kfs_job` adjusts it:

- Spark comes from the Spark connection (``spark_default``: master
  ``local[*]``, ``yarn``, ``spark://...``, ``k8s://...``).  If that connection
  does not exist the provider falls back to YARN, which is never what a KFS
  job wants; the job runs ``local[*]`` instead (the jobs default to it too)
  and the log says so.  The provider takes no master argument, so the hook's
  resolved connection is changed after the fact.
- For a ``local`` master, the environment gets `spark_submit_env`: this
  interpreter for PySpark, and ``PATH`` with its ``bin/`` when ``spark-submit``
  is not on it.  A cluster's Python is its spark-defaults' business.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

__all__ = ["LOCAL_MASTER", "for_kfs_job", "spark_connection_exists", "spark_submit_env"]

#: The Spark master used when the Spark connection does not exist.
LOCAL_MASTER = "local[*]"

log = logging.getLogger(__name__)


def spark_submit_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment spark-submit needs to run a job with this interpreter and its packages.

    ``PYSPARK_PYTHON`` (and the driver's) default to `sys.executable`, so executors
    import the same ``kfs_core``.  If ``spark-submit`` is not on ``PATH`` but sits next
    to the interpreter (a virtualenv's ``bin/``), that directory is put first: the
    provider runs the bare name ``spark-submit`` and `subprocess` looks it up on the
    ``PATH`` of the environment it is given.
    """
    environ = os.environ if environ is None else environ
    python = environ.get("PYSPARK_PYTHON") or sys.executable
    env = {
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": environ.get("PYSPARK_DRIVER_PYTHON") or python,
    }
    path = environ.get("PATH", os.defpath)
    bin_dir = Path(sys.executable).parent
    if shutil.which("spark-submit", path=path) is None and (bin_dir / "spark-submit").exists():
        env["PATH"] = f"{bin_dir}{os.pathsep}{path}"
    return env


def spark_connection_exists(conn_id: str) -> bool:
    """Whether Airflow knows the Spark connection ``conn_id``; says so in the log when not."""
    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        log.warning(
            "Spark connection %r not found: running spark-submit with master %s",
            conn_id,
            LOCAL_MASTER,
        )
        return False
    return True


def for_kfs_job(hook: SparkSubmitHook, *, connection_found: bool) -> SparkSubmitHook:
    """``hook`` made fit to run a KFS job, with or without a Spark connection.

    Its master is ``local[*]`` when the Spark connection was not found, and this
    interpreter's environment goes under the task's when the master is local.
    """
    if not connection_found:
        hook._connection["master"] = LOCAL_MASTER
        hook._is_yarn = hook._is_yarn_cluster_mode = hook._is_kubernetes = False
        hook._should_track_driver_status = False
    if str(hook._connection["master"]).startswith("local"):
        hook._env_vars = {**spark_submit_env(), **(hook._env_vars or {})}
    return hook
