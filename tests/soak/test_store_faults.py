"""The object-store fault campaign in short form: a tenth of `make soak`'s phase lengths.

A real `kfs serve` on S3 (moto) through the fault proxy, three idempotent
producers and a tail consumer: errors, slow responses, reset uploads and an
outage, then the store heals and nothing acknowledged may be missing,
changed or stored twice, and no segment committed twice.
"""

from __future__ import annotations

import random
import uuid

import pytest

from soak import store_faults
from soak.fault_proxy import FaultProxy
from soak.report import format_table
from testkit.daemon import DaemonFactory

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

POOL = 8 << 20


def test_store_faults_lose_nothing_and_show_on_readyz(
    daemons: DaemonFactory, moto_server: str, s3_bucket: str
) -> None:
    seed = random.randrange(1 << 30)
    store_url = f"s3://{s3_bucket}/faults-{uuid.uuid4().hex[:8]}"
    with FaultProxy(moto_server, seed=seed) as proxy:
        daemon = daemons.start(
            name="store-faults",
            store_url=store_url,
            s3_endpoint_url=proxy.url,
            extra_args=store_faults.daemon_args(POOL),
        )
        row, observed = store_faults.run(
            daemon,
            proxy,
            store_url=store_url,
            moto_endpoint=moto_server,
            pool_bytes=POOL,
            scale=0.1,
            seed=seed,
        )
    report = format_table([row]) + "\n" + "\n".join(o.line() for o in observed)
    print(report)
    assert row.acknowledged > 0
    assert row.passed, report + "\n" + daemon.log()[-3000:]
    outage = observed[-1]
    assert outage.max_unavailable_s > 0, report
    assert proxy.counts["error"] and proxy.counts["reset"] and proxy.counts["outage"], proxy.counts
