"""`KfsPlugin`: the KFS page in the Airflow UI.

The api-server mounts the page's FastAPI app (`kfs_airflow.ui`) at ``/kfs``
and the UI lists it as a top-level navigation entry, "KFS", which frames
``kfs/`` (relative, so ``[api] base_url`` is honoured) at ``/plugin/kfs``.

Airflow's plugin scan finds this module in the plugins folder (it executes
every ``.py`` file there as a top-level module, so it sees this one as
``plugin``; every module of this package therefore uses absolute imports).
No entry point and no second module names the class: the scan would report a
second registration of "kfs" as a plugin import error.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from kfs_airflow.dags_support import SparkPoolListener
from kfs_airflow.ui import create_app

__all__ = ["URL_PREFIX", "KfsPlugin"]

URL_PREFIX = "/kfs"


class KfsPlugin(AirflowPlugin):
    """Topics, partitions, compaction savings and data-quality reports of the KFS namespace."""

    name = "kfs"
    # The lists below are class attributes by Airflow's design: AirflowPlugin declares
    # them as instance attributes, so a ClassVar annotation would not type-check.
    # Creates the KFS Spark pool when the scheduler (or another Airflow job) starts.
    listeners = [SparkPoolListener()]  # noqa: RUF012 - AirflowPlugin's attribute
    fastapi_apps = [  # noqa: RUF012 - AirflowPlugin's attribute
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "KFS"},
    ]
    external_views = [  # noqa: RUF012 - AirflowPlugin's attribute
        {
            "name": "KFS",
            "href": "kfs/",
            "destination": "nav",
            "url_route": "kfs",
            "nav_top_level": True,
            "icon": "kfs/static/kfs-icon.svg",
        },
    ]
