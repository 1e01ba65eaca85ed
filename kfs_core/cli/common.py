"""What every `kfs` command shares: the one-line operator error, the settings, the store.

Errors an operator can cause (a corrupt file, an unknown topic, a bad value)
end with a one-line ``kfs: error: …`` on stderr and a non-zero exit, never a
traceback: raise `CliError`, or wrap the work in `operator_errors()`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
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
    "print_table",
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


# --- Kafka client settings of the commands that talk to a daemon --------------------------

#: The security settings a ``--command-config`` file may give (librdkafka's names, which
#: are Kafka's); ``sasl.jaas.config`` (the Java clients' form) is read for its user and password.
CLIENT_SECURITY_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)
_JAAS_FIELD = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


def client_config(path: str | None) -> dict[str, str]:
    """The librdkafka settings of a Kafka client properties file (``--command-config``).

    Kafka's tools take the same file (``--command-config client.properties``):
    ``key=value`` lines, ``#`` comments.  Only security settings are taken; a
    password lives in the file, never on the command line.
    """
    if not path:
        return {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CliError(f"--command-config {path}: {exc.strerror or exc}") from None
    config: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise CliError(f"--command-config {path}:{number}: expected key=value")
        if key == "sasl.jaas.config":
            for field, found in _JAAS_FIELD.findall(value):
                config[f"sasl.{field}"] = found.replace('\\"', '"')
        elif key in CLIENT_SECURITY_KEYS:
            config["sasl.mechanism" if key == "sasl.mechanisms" else key] = value
        else:
            raise CliError(
                f"--command-config {path}:{number}: {key!r} is not a security setting "
                f"({', '.join(sorted(CLIENT_SECURITY_KEYS))})"
            )
    return config


def command_config_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--command-config",
        "command_config",
        type=click.Path(dir_okay=False),
        envvar="KFS_CLIENT_CONFIG",
        help="Kafka client properties for TLS/SASL (security.protocol=SASL_SSL, sasl.mechanism, "
        "sasl.username, sasl.password, ssl.ca.location ...) [KFS_CLIENT_CONFIG]",
    )(func)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Left-aligned columns two spaces apart, as Kafka's tools print them ("-" for none)."""
    cells = [list(headers), *([("-" if c is None or c == "" else str(c)) for c in r] for r in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
