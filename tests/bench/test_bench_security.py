"""bench.security in short form: both listeners carry the load, the authz rows are there."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import security

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_bench_security_short_form(tmp_path: Path) -> None:
    rows = dict(security.run(tmp_path, mb=1.0, acls=200))
    assert (
        rows["produce over PLAINTEXT"].endswith("ms") and "MB/s" in rows["produce over PLAINTEXT"]
    )
    assert "MB/s" in rows["produce over SASL_SSL (SCRAM-SHA-512)"]
    assert 0 < float(rows["SASL_SSL / PLAINTEXT throughput"]) < 10
    assert rows["authorize Produce, 200 ACLs"].endswith("us per request")
