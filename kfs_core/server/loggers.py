"""The daemon's loggers as Kafka's ``broker-loggers`` resource: their levels, read and changed live.

What ``kafka-configs --entity-type broker-loggers --entity-name <node id>``
shows and alters, as on a Kafka broker: each KFS logger (``kfs_core.*``,
``kfs.audit``) and the root logger (``root``), with its effective level in
Kafka's words.  Setting a level (IncrementalAlterConfigs SET) applies at
once, to this daemon only, until it restarts; DELETE makes a logger follow
its parent again.  Kafka's levels map onto Python's: TRACE and DEBUG are
DEBUG, WARN is WARNING, FATAL is CRITICAL, OFF silences the logger.
"""

from __future__ import annotations

import logging
from typing import Final

from kfs_core.errors import InvalidConfig

__all__ = ["ROOT", "levels", "reset_level", "set_level"]

ROOT: Final = "root"
_OFF: Final = logging.CRITICAL + 10
_TO_PYTHON: Final = {
    "ALL": logging.NOTSET + 1,
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
    "OFF": _OFF,
}
_OWN_PREFIXES: Final = ("kfs_core", "kfs.")


def _kafka_name(level: int) -> str:
    if level >= _OFF:
        return "OFF"
    for name in ("FATAL", "ERROR", "WARN", "INFO", "DEBUG"):
        if level >= _TO_PYTHON[name]:
            return name
    return "ALL"


def _logger(name: str) -> logging.Logger:
    if name == ROOT:
        return logging.getLogger()
    known = logging.Logger.manager.loggerDict.get(name)
    if not isinstance(known, logging.Logger):
        raise InvalidConfig(f"logger {name!r} does not exist", key=name)
    return known


def levels() -> dict[str, str]:
    """Every KFS logger and ``root``, with its effective level (Kafka's name), by name."""
    own = {
        name: logger
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.startswith(_OWN_PREFIXES)
    }
    found = {name: _kafka_name(logger.getEffectiveLevel()) for name, logger in own.items()}
    found[ROOT] = _kafka_name(logging.getLogger().getEffectiveLevel())
    return dict(sorted(found.items()))


def check_level(name: str, level: str) -> int:
    """The Python level of Kafka's ``level`` for logger ``name``; `InvalidConfig` if unknown."""
    _logger(name)
    python = _TO_PYTHON.get(level.strip().upper())
    if python is None:
        raise InvalidConfig(
            f"{name}: {level!r} is not a log level ({', '.join(_TO_PYTHON)})", key=name
        )
    return python


def set_level(name: str, level: str) -> None:
    """Logger ``name`` at ``level`` from now on (Kafka's level names)."""
    _logger(name).setLevel(check_level(name, level))


def reset_level(name: str) -> None:
    """Logger ``name`` follows its parent again; the root logger's level cannot be removed."""
    if name == ROOT:
        raise InvalidConfig("the root logger's level cannot be removed, only set", key=name)
    _logger(name).setLevel(logging.NOTSET)
