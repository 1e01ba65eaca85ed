"""`kfs users add|list|delete|set-password`: SASL users, kept in the store beside the catalog.

As kafka-configs.sh ``--alter --add-config 'SCRAM-SHA-512=[...]' --entity-type
users`` does for Kafka, but the password never travels as an argument (it
would show in ``ps`` and shell history): it is read from standard input, or
asked for twice at a terminal.  The store is found through ``KFS_STORE_URL``
and ``KFS_NAMESPACE`` (or ``--store-url`` / ``--namespace``), like the other
store-side commands; every daemon on the namespace sees the change within
seconds.
"""

from __future__ import annotations

import sys

import click

from kfs_core.cli.common import CliError, cli_settings, cli_store, operator_errors
from kfs_core.security.scram import DEFAULT_ITERATIONS, MECHANISMS, make_credential
from kfs_core.security.users import UserStore

__all__ = ["users"]

_MECHANISM = click.option(
    "--mechanism",
    "mechanisms",
    type=click.Choice(sorted(MECHANISMS)),
    multiple=True,
    help="SCRAM mechanism(s) to store a credential for (default: both)",
)
_ITERATIONS = click.option(
    "--iterations",
    type=click.IntRange(4096, 16384),
    default=DEFAULT_ITERATIONS,
    show_default=True,
    help="PBKDF2 iterations of the salted password",
)


def _password() -> str:
    """The password from standard input (one line), or a prompt asked twice at a terminal."""
    if sys.stdin.isatty():
        value = click.prompt("Password", hide_input=True, confirmation_prompt=True)
        password = str(value)
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("the password is empty (give it on standard input)")
    return password


def _store_credentials(
    ctx: click.Context, name: str, mechanisms: tuple[str, ...], iterations: int
) -> None:
    password = _password()
    with operator_errors():
        users = UserStore(cli_store(ctx), cli_settings(ctx).namespace)
        for mechanism in mechanisms or tuple(sorted(MECHANISMS)):
            users.set_credential(name, make_credential(mechanism, password, iterations))


@click.group()
def users() -> None:
    """SASL users (SCRAM-SHA-256/512; PLAIN logins check the same credentials)."""


@users.command("add")
@click.argument("name")
@_MECHANISM
@_ITERATIONS
@click.pass_context
def users_add(ctx: click.Context, name: str, mechanisms: tuple[str, ...], iterations: int) -> None:
    """Add user NAME; the password comes from standard input."""
    with operator_errors():
        store = UserStore(cli_store(ctx), cli_settings(ctx).namespace)
        if store.credentials(name):
            raise CliError(f"user {name!r} exists; use 'kfs users set-password {name}'")
    _store_credentials(ctx, name, mechanisms, iterations)
    click.echo(f"added user {name!r}")


@users.command("set-password")
@click.argument("name")
@_MECHANISM
@_ITERATIONS
@click.pass_context
def users_set_password(
    ctx: click.Context, name: str, mechanisms: tuple[str, ...], iterations: int
) -> None:
    """Replace the password of user NAME (standard input)."""
    with operator_errors():
        store = UserStore(cli_store(ctx), cli_settings(ctx).namespace)
        if not store.credentials(name):
            raise CliError(f"no user {name!r}; use 'kfs users add {name}'")
    _store_credentials(ctx, name, mechanisms, iterations)
    click.echo(f"password of {name!r} changed")


@users.command("list")
@click.pass_context
def users_list(ctx: click.Context) -> None:
    """Every user, with its mechanisms and iterations (never a secret)."""
    with operator_errors():
        store = UserStore(cli_store(ctx), cli_settings(ctx).namespace)
        rows = [(name, store.credentials(name)) for name in store.names()]
    for name, credentials in rows:
        shown = ", ".join(
            f"{m} (iterations {c.iterations})" for m, c in sorted(credentials.items())
        )
        click.echo(f"{name}\t{shown}")


@users.command("delete")
@click.argument("name")
@click.pass_context
def users_delete(ctx: click.Context, name: str) -> None:
    """Delete user NAME and all its credentials."""
    with operator_errors():
        if not UserStore(cli_store(ctx), cli_settings(ctx).namespace).delete(name):
            raise CliError(f"no user {name!r}")
    click.echo(f"deleted user {name!r}")
