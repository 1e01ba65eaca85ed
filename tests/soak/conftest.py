"""The soak campaigns drive real daemons (tests/server's fixtures) and local Spark (tests/spark_jobs')."""

from tests.server.conftest import daemons  # noqa: F401 - a fixture, used by name
from tests.spark_jobs.conftest import spark  # noqa: F401 - a fixture, used by name
