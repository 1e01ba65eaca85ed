"""Broker loggers: the daemon's log levels in Kafka's words, set and reset live."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from kfs_core.errors import InvalidConfig
from kfs_core.server import loggers

pytestmark = pytest.mark.unit

NAME = "kfs_core.server.test_loggers_probe"


@pytest.fixture
def probe() -> Iterator[logging.Logger]:
    logger = logging.getLogger(NAME)
    yield logger
    logger.setLevel(logging.NOTSET)


def test_levels_name_kfs_loggers_and_root_in_kafkas_words(probe: logging.Logger) -> None:
    probe.setLevel(logging.WARNING)
    found = loggers.levels()
    assert found[NAME] == "WARN"
    assert "root" in found
    assert all(name == "root" or name.startswith(("kfs_core", "kfs.")) for name in found)


@pytest.mark.parametrize(
    ("kafka", "python", "shown"),
    [
        ("TRACE", logging.DEBUG, "DEBUG"),
        ("debug", logging.DEBUG, "DEBUG"),
        ("WARN", logging.WARNING, "WARN"),
        ("FATAL", logging.CRITICAL, "FATAL"),
        ("OFF", logging.CRITICAL + 10, "OFF"),
    ],
)
def test_set_and_reset(probe: logging.Logger, kafka: str, python: int, shown: str) -> None:
    loggers.set_level(NAME, kafka)
    assert probe.level == python and loggers.levels()[NAME] == shown
    loggers.reset_level(NAME)
    assert probe.level == logging.NOTSET  # follows its parent again


def test_refusals(probe: logging.Logger) -> None:
    with pytest.raises(InvalidConfig, match="is not a log level"):
        loggers.set_level(NAME, "LOUD")
    with pytest.raises(InvalidConfig, match="does not exist"):
        loggers.set_level("kfs_core.no.such.logger", "INFO")
    with pytest.raises(InvalidConfig, match="root logger"):
        loggers.reset_level("root")
