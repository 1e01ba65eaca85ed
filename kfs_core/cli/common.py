"""What every `kfs` command shares: the one-line operator error, the settings, the store.

Errors an operator can cause (a corrupt file, an unknown topic, a bad value)
end with a one-line ``kfs: error: …`` on stderr and a non-zero exit, never a
traceback: raise `CliError`, or wrap the work in `operator_errors()`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from kfs_core.config import Settings
from kfs_core.errors import CorruptionError, KfsError
from kfs_core.storage import ObjectStore, open_store

__all__ = [
    "EXIT_CORRUPT",
    "CliError",
    "CorruptFileError",
    "cli_settings",
    "cli_store",
    "format_ms",
    "operator_errors",
]

EXIT_CORRUPT = 3


class CliError(click.ClickException):
    """A one-line operator error: ``kfs: error: <message>``."""

    def format_message(self) -> str:
        return self.message

    def show(self, file: Any = None) -> None:
        click.echo(f"kfs: error: {self.format_message()}", err=True)


class CorruptFileError(CliError):
    """Corrupt stored bytes: exit status 3, so scripts can tell it from a usage error."""

    exit_code = EXIT_CORRUPT


@contextmanager
def operator_errors() -> Iterator[None]:
    """Turn the errors an operator can cause into one-line messages."""
    try:
        yield
    except CorruptionError as exc:
        raise CorruptFileError(str(exc)) from None
    except (KfsError, ValueError, OSError) as exc:
        raise CliError(str(exc) or type(exc).__name__) from None


def cli_settings(ctx: click.Context) -> Settings:
    """The settings `kfs` resolved from KFS_* variables and its --store-url / --namespace."""
    obj: Settings = ctx.obj
    return obj


def cli_store(ctx: click.Context) -> ObjectStore:
    """The object store those settings name."""
    settings = cli_settings(ctx)
    return open_store(settings.store_url, endpoint_url=settings.s3_endpoint_url or None)


def format_ms(ts: int) -> str:
    """A Kafka timestamp (ms since the epoch) as ISO 8601 UTC; negative ones as they are."""
    if ts < 0:
        return str(ts)
    return dt.datetime.fromtimestamp(ts / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
