"""The soak campaigns drive real daemons: the daemon fixtures of tests/server."""

from tests.server.conftest import daemons  # noqa: F401 - a fixture, used by name
