"""Who may see the KFS page: users logged in to Airflow, checked the way the api-server checks them.

Airflow 3's UI keeps the user's JWT in the ``_token`` cookie; API clients send
``Authorization: Bearer <jwt>`` (from ``POST /auth/token``).  `airflow_user`
hands both to Airflow's own ``get_user`` (``airflow.api_fastapi.core_api.security``),
which validates the token with the configured auth manager (signature, expiry,
revocation) and prefers an explicit bearer token to the cookie, exactly as the
REST API does.  The user must then be allowed the ``WEBSITE`` view, the
permission every role that may open the Airflow UI has.

Failures raise `NotLoggedIn` (no, expired or invalid token) or a 403; the app
answers `NotLoggedIn` with 401 for the JSON and Data Docs routes and with a
redirect to the auth manager's login page for the HTML page.

Airflow is imported when a request arrives, not when the plugin loads, so the
scheduler and workers that load plugins do not import the api-server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser

__all__ = ["NotLoggedIn", "airflow_user", "login_url"]

_bearer = HTTPBearer(auto_error=False, description="an Airflow JWT (POST /auth/token)")
_Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


class NotLoggedIn(Exception):
    """The request carries no valid Airflow token; ``page`` requests go to the login page."""

    def __init__(self, status_code: int, detail: str, *, page: bool) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail
        self.page = page


async def _user(request: Request, credentials: HTTPAuthorizationCredentials | None) -> BaseUser:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import get_user

    try:
        user = await get_user(request, _oauth_token=None, bearer_credentials=credentials)
    except HTTPException as exc:
        raise NotLoggedIn(exc.status_code, str(exc.detail), page=_is_page(request)) from None
    if not get_auth_manager().is_authorized_view(access_view=AccessView.WEBSITE, user=user):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"user {user.get_name()!r} may not view the Airflow UI"
        )
    return user


def _is_page(request: Request) -> bool:
    return request.scope.get("kfs_page") is True


async def airflow_user(request: Request, credentials: _Credentials) -> BaseUser:
    """FastAPI dependency: the logged-in Airflow user, else `NotLoggedIn` / 403."""
    return await _user(request, credentials)


async def airflow_user_page(request: Request, credentials: _Credentials) -> BaseUser:
    """`airflow_user` for HTML pages: a missing login becomes a redirect to the login page."""
    request.scope["kfs_page"] = True
    return await _user(request, credentials)


def login_url(request: Request) -> str:
    """The auth manager's login page, coming back to this request's URL afterwards."""
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager().get_url_login(next_url=str(request.url))
