"""The KFS page: a FastAPI app the Airflow api-server mounts at ``/kfs`` (`kfs_airflow.plugin`).

Routes, relative to the mount point::

    GET /                                              the page (HTML, no JavaScript needed)
    GET /api/overview                                  the same data as JSON (`Overview`)
    GET /reports/validation/<run-id>/data_docs/<path>  a Great Expectations Data Docs file
    GET /reports/tables/<run-id>/<table>/<n>/data_docs/<path>  a table snapshot's Data Docs file
    GET /static/<file>                                 stylesheet and nav icon (public)
    GET /static/datadocs/<package>@<version>/<file>    the Data Docs' CSS, JS and fonts (public)

Everything but ``/static`` answers only users logged in to Airflow
(`kfs_airflow.ui.auth`): the page sends anonymous visitors to Airflow's login
page, the other routes answer 401.  The namespace is the one the ``kfs_default``
connection names (`KfsHook`), whose connection is read afresh on every request;
the store's state comes through the app's `OverviewCache`
(`kfs_airflow.overview_cache`): the first request for a store reads it, later
ones get the latest copy at once (marked with its age) while one background
thread refreshes it incrementally, unless the copy is older than
``KFS_PAGE_MAX_AGE_S`` (30 s), when the request waits for the refresh.
Whatever cannot be read (no connection, an unreachable store, a damaged catalog
or report) is shown as a message on the page, never a server error.  Links
inside the page are relative, so it works at any ``[api] base_url`` and inside
the UI's iframe.

The consumer-groups section comes from the daemon, not the store: the same
connection's ``bootstrap_servers`` (`KfsAdminHook.consumer_groups`), read while the
store is read.  No address, or a daemon that does not answer within the hook's
short deadline, is a message in that section; the rest of the page is unaffected.
The app itself opens nothing: every read, of the store or of the daemon, goes
through a hook; a request's hook is closed when it is answered, unless the
cache keeps it as the reader of a store it had not seen (`OverviewCache`).

Data Docs pages are GX's HTML as the validation job stored it, except that
their stylesheets and scripts come from ``/static/datadocs`` instead of public
CDNs (`kfs_airflow.ui.datadocs_assets`), so they render styled offline.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from kfs_airflow.hooks import DaemonNotConfigured
from kfs_airflow.overview import (
    Overview,
    chart_points,
    describe_error,
    unavailable,
)
from kfs_airflow.overview_cache import OverviewCache
from kfs_airflow.ui import datadocs_assets
from kfs_airflow.ui.auth import NotLoggedIn, airflow_user, airflow_user_page, login_url
from kfs_airflow.ui.chart import trend_svg
from kfs_core.errors import ObjectNotFound
from kfs_core.kafka_admin import ConsumerGroup, DaemonUnreachable, OpenTransaction

if TYPE_CHECKING:
    from kfs_airflow.hooks import KfsHook

__all__ = [
    "NamespaceUnavailable",
    "OpenNamespace",
    "ReadGroups",
    "connection_groups",
    "create_app",
    "open_connection_namespace",
]

HERE = Path(__file__).parent
TEMPLATES = Jinja2Templates(directory=HERE / "templates")

#: The hook of the namespace to show, its store already opened (the caller closes
#: it).  Raises `NamespaceUnavailable` (or anything else) with a message for the page.
OpenNamespace = Callable[[], "KfsHook"]
#: Reads the daemon's consumer groups: ``(bootstrap_servers, groups)``.  Raises
#: with a message for the page's groups section.
ReadGroups = Callable[[], tuple[str, list[ConsumerGroup]]]
#: Reads the daemons' open transactions.  Raises with a message for the page's section.
ReadTransactions = Callable[[], list[OpenTransaction]]

_User = Annotated[Any, Depends(airflow_user)]
_PageUser = Annotated[Any, Depends(airflow_user_page)]

# Store files are our own job's output, but they are served on Airflow's origin:
# never let a browser sniff them into something else, and never frame them elsewhere.
_DOCS_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "frame-ancestors 'self'",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "private, max-age=60",
}


class NamespaceUnavailable(Exception):
    """The namespace to show cannot be opened (no connection, a bad store URL ...)."""


def open_connection_namespace(conn_id: str = "kfs_default") -> OpenNamespace:
    """An `OpenNamespace` reading the Airflow connection ``conn_id`` on every call."""

    def open_namespace() -> KfsHook:
        from airflow.sdk.exceptions import AirflowNotFoundException

        from kfs_airflow.hooks import KfsHook

        hook = KfsHook(conn_id)
        try:
            hook.get_conn()  # a missing connection or an unusable store URL shows here
            return hook
        except AirflowNotFoundException:
            raise NamespaceUnavailable(
                f"Airflow connection {conn_id!r} is not defined: add a connection of type "
                '"kfs" with extra {"store_url": ..., "namespace": ...}'
            ) from None

    return open_namespace


def connection_groups(conn_id: str = "kfs_default") -> ReadGroups:
    """A `ReadGroups` asking the daemon the connection ``conn_id`` names, on every call."""

    def read_groups() -> tuple[str, list[ConsumerGroup]]:
        from airflow.sdk.exceptions import AirflowNotFoundException

        from kfs_airflow.hooks import KfsAdminHook

        hook = KfsAdminHook(conn_id)
        try:
            return hook.bootstrap_servers, hook.consumer_groups()
        except AirflowNotFoundException:
            raise NamespaceUnavailable(
                f"Airflow connection {conn_id!r} is not defined, so neither is the daemon"
            ) from None

    return read_groups


def connection_transactions(conn_id: str = "kfs_default") -> ReadTransactions:
    """A `ReadTransactions` asking the daemon the connection ``conn_id`` names, on every call."""

    def read_transactions() -> list[OpenTransaction]:
        from airflow.sdk.exceptions import AirflowNotFoundException

        from kfs_airflow.hooks import KfsAdminHook

        try:
            return KfsAdminHook(conn_id).open_transactions()
        except AirflowNotFoundException:
            raise NamespaceUnavailable(
                f"Airflow connection {conn_id!r} is not defined, so neither is the daemon"
            ) from None

    return read_transactions


def _transactions_or_problem(read: ReadTransactions) -> tuple[list[OpenTransaction], str | None]:
    try:
        return read(), None
    except (NamespaceUnavailable, DaemonNotConfigured, DaemonUnreachable) as exc:
        return [], str(exc)
    except Exception as exc:  # noqa: BLE001 - shown in the transactions section
        return [], f"cannot read the transactions: {describe_error(exc)}"


def _groups_or_problem(read: ReadGroups) -> tuple[str, list[ConsumerGroup], str | None]:
    try:
        bootstrap, groups = read()
    except (NamespaceUnavailable, DaemonNotConfigured, DaemonUnreachable) as exc:
        return "", [], str(exc)
    except Exception as exc:  # noqa: BLE001 - shown in the groups section
        return "", [], f"cannot read the consumer groups: {describe_error(exc)}"
    return bootstrap, groups, None


def _human_bytes(value: int | float | None) -> str:
    if value is None:
        return ""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _number(value: int | None) -> str:
    return "" if value is None else f"{value:,}"


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value * 100:.1f}%"


TEMPLATES.env.filters["human_bytes"] = _human_bytes
TEMPLATES.env.filters["number"] = _number
TEMPLATES.env.filters["percent"] = _percent


def _localize_data_docs(body: bytes, path: str, *, levels: int = 4) -> bytes:
    """A Data Docs page (at ``data_docs/<path>``) with its CDN assets served by this app.

    ``levels``: the folders from the app's root to ``data_docs/`` included
    (4 for reports/validation/<run-id>/data_docs/).
    """
    depth = path.count("/")
    html = datadocs_assets.localize_html(
        body.decode("utf-8", "surrogateescape"),
        assets_url="../" * (levels + depth) + datadocs_assets.URL_PATH,
        docs_root_url="../" * depth,
    )
    return html.encode("utf-8", "surrogateescape")


def _docs_response(
    opener: OpenNamespace,
    path: str,
    read: Callable[[KfsHook], bytes | None],
    *,
    levels: int = 4,
) -> Response:
    """A Data Docs file from the store: 404 when missing or outside the docs, 503 without a store."""
    try:
        hook = opener()
    except Exception as exc:  # noqa: BLE001
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, f"cannot open the KFS store: {exc}"
        ) from None
    try:
        try:
            body = read(hook)
        except (ObjectNotFound, ValueError):
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such Data Docs file") from None
        if body is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, "no such Data Docs file")
    finally:
        hook.close()
    media_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    if media_type == "text/html":
        body = _localize_data_docs(body, path, levels=levels)
    if media_type.startswith("text/") or media_type in ("application/javascript",):
        media_type += "; charset=utf-8"
    return Response(body, media_type=media_type, headers=_DOCS_HEADERS)


def create_app(
    open_namespace: OpenNamespace | None = None,
    read_groups: ReadGroups | None = None,
    cache: OverviewCache | None = None,
    read_transactions: ReadTransactions | None = None,
) -> FastAPI:
    """The KFS page app; ``open_namespace`` and ``read_groups`` default to ``kfs_default``.

    ``cache`` (default: a new one, living as long as the app) keeps the store's
    catalog state between requests; the api-server creates the app once per process.
    """
    opener = open_namespace or open_connection_namespace()
    groups_reader = read_groups or connection_groups()
    transactions_reader = read_transactions or connection_transactions()
    overview_cache = cache or OverviewCache()
    app = FastAPI(
        title="KFS",
        description=(
            "KFS namespace overview: topics, partitions, consumer groups, compaction, data quality."
        ),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.exception_handler(NotLoggedIn)
    async def not_logged_in(request: Request, exc: NotLoggedIn) -> Response:
        if exc.page:
            return RedirectResponse(login_url(request), status.HTTP_307_TEMPORARY_REDIRECT)
        return JSONResponse({"detail": exc.detail}, exc.status_code)

    def overview() -> Overview:
        # The daemon is asked while the store is read: the page waits for the slower one.
        with ThreadPoolExecutor(2, thread_name_prefix="kfs-daemon") as pool:
            groups = pool.submit(_groups_or_problem, groups_reader)
            transactions = pool.submit(_transactions_or_problem, transactions_reader)
            data = namespace_overview()
            data.bootstrap_servers, data.groups, data.groups_problem = groups.result()
            data.transactions, data.transactions_problem = transactions.result()
        return data

    def namespace_overview() -> Overview:
        try:
            hook = opener()
        except Exception as exc:  # noqa: BLE001 - shown on the page
            message = str(exc) if isinstance(exc, NamespaceUnavailable) else describe_error(exc)
            return unavailable("", "", f"cannot open the KFS store: {message}")
        # The cache takes the hook: it keeps it as a new store's reader or closes it.
        return overview_cache.overview(hook)

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request, user: _PageUser) -> Response:
        data = overview()
        latest = data.latest_report
        return TEMPLATES.TemplateResponse(
            request,
            "kfs.html",
            {
                "overview": data,
                "latest": latest,
                "trend": trend_svg(chart_points(data.validation)),
                "user": user.get_name(),
            },
        )

    @app.get("/api/overview")
    def overview_json(user: _User) -> JSONResponse:
        return JSONResponse(overview().model_dump(mode="json"))

    @app.get("/reports/validation/{run_id}/data_docs/{path:path}")
    def data_docs(run_id: str, path: str, user: _User) -> Response:
        return _docs_response(opener, path, lambda hook: hook.data_docs_file(run_id, path))

    @app.get("/reports/tables/{run_id}/{table}/{commit}/data_docs/{path:path}")
    def table_docs(run_id: str, table: str, commit: str, path: str, user: _User) -> Response:
        return _docs_response(
            opener,
            path,
            lambda hook: hook.table_docs_file(run_id, table, commit, path),
            levels=6,
        )

    return app
