"""`kfs serve`: the Kafka-protocol daemon (kfs_core.server) with a flag for every KFS_* setting.

The flags are not written here: `settings_options` makes one per setting of
`kfs_core.config.Settings` (name, type, choices, help and default all come
from its declaration), so a setting added there is a flag here at once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from kfs_core.cli.common import cli_settings, operator_errors
from kfs_core.config import (
    Settings,
    SettingSpec,
    env_name,
    format_size,
    operator_settings,
    parse_size,
)

F = Callable[..., Any]


class SizeType(click.ParamType[int]):
    """Bytes, or a number with a suffix (``4MiB``, ``1GB``), as the ``KFS_*`` sizes take."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _shown_default(field_default: object, spec: SettingSpec) -> str:
    if spec.default_help is not None:
        return spec.default_help
    if spec.kind == "size" and isinstance(field_default, int):
        return format_size(field_default)
    if isinstance(field_default, bool):
        return str(field_default).lower()
    return str(field_default) if field_default != "" else "unset"


def _option(name: str, field_default: object, spec: SettingSpec) -> Callable[[F], F]:
    flag = "--" + name.replace("_", "-")
    help_text = f"{spec.help} [{env_name(name)}, {_shown_default(field_default, spec)}]"
    if spec.kind == "bool":
        return click.option(f"{flag}/--no-{flag[2:]}", name, default=None, help=help_text)
    param_type: click.ParamType[Any]
    if spec.kind == "choice":
        param_type = click.Choice(spec.choices)
    elif spec.kind == "size":
        param_type = SizeType()
    elif spec.kind == "int":
        param_type = click.IntRange(min=spec.minimum) if spec.minimum is not None else click.INT
    else:
        param_type = click.STRING
    return click.option(flag, name, type=param_type, default=None, help=help_text)


def settings_options(command: F) -> F:
    """One option per ``KFS_*`` setting, in declaration order; unset ones stay None."""
    for field, spec in reversed(list(operator_settings())):
        command = _option(field.name, field.default, spec)(command)
    return command


@click.command()
@settings_options
@click.pass_context
def serve(ctx: click.Context, /, **overrides: Any) -> None:
    """Run the Kafka-protocol daemon until SIGTERM or SIGINT.

    Every KFS_* setting has a flag here; a flag wins over the variable.
    """
    import logging

    from kfs_core.server.app import check_addresses
    from kfs_core.server.app import serve as run_daemon

    with operator_errors():
        settings: Settings = cli_settings(ctx).with_overrides(**overrides)
        check_addresses(settings)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    ctx.exit(run_daemon(settings))
