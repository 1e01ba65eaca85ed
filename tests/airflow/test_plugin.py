"""KfsPlugin: Airflow finds it in the plugins folder, once, with its app and its nav entry."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.airflow


def test_airflow_loads_the_kfs_plugin_from_the_plugins_folder() -> None:
    from airflow import plugins_manager

    plugins, errors = plugins_manager._get_plugins()
    kfs = [p for p in plugins if p.name == "kfs"]
    assert len(kfs) == 1, [p.name for p in plugins]
    assert str(kfs[0].source) == "$PLUGINS_FOLDER/kfs_airflow/plugin.py"
    assert errors == {}


def test_the_plugin_mounts_its_app_and_adds_a_nav_entry() -> None:
    from airflow import plugins_manager
    from airflow.api_fastapi.core_api.datamodels.plugins import PluginResponse
    from fastapi import FastAPI
    from kfs_airflow.plugin import URL_PREFIX, KfsPlugin

    [app] = KfsPlugin.fastapi_apps
    assert isinstance(app["app"], FastAPI) and app["url_prefix"] == URL_PREFIX == "/kfs"
    # The api-server refuses these prefixes (airflow.api_fastapi.app.RESERVED_URL_PREFIXES).
    assert not any(URL_PREFIX.startswith(p) for p in ("/api/v2", "/ui", "/execution", "/auth"))
    [view] = KfsPlugin.external_views
    # Relative, so the UI resolves it against [api] base_url; and it is the app's page.
    assert view["href"] == URL_PREFIX.lstrip("/") + "/"
    info = next(p for p in plugins_manager.get_plugin_info() if p["name"] == "kfs")
    response = PluginResponse.model_validate(info)  # what GET /api/v2/plugins serves
    [nav] = response.external_views
    assert (nav.name, nav.destination, nav.url_route, nav.nav_top_level) == (
        "KFS", "nav", "kfs", True,
    )  # fmt: skip
    assert [a.url_prefix for a in response.fastapi_apps] == ["/kfs"]


def test_the_plugin_registers_the_spark_pool_listener() -> None:
    from airflow import plugins_manager
    from kfs_airflow.dags_support import SparkPoolListener

    plugins, _ = plugins_manager._get_plugins()
    [kfs] = [p for p in plugins if p.name == "kfs"]
    assert [type(listener) for listener in kfs.listeners] == [SparkPoolListener]


def test_the_pages_template_and_static_files_are_package_data() -> None:
    """A non-editable install (the Docker image) must carry them, or the app cannot start."""
    import tomllib
    from fnmatch import fnmatch

    from tests.conftest import REPO

    package = REPO / "plugins" / "kfs_airflow"
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["kfs_airflow"]
    files = [
        p.relative_to(package).as_posix()
        for p in (package / "ui").rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc")
    ]
    assert "ui/templates/kfs.html" in files and "ui/static/kfs.css" in files
    assert [f for f in files if not any(fnmatch(f, p) for p in patterns)] == []
