"""What the tests, the benchmarks (bench/) and the fault campaigns (soak/) share.

    testkit.ports       a free loopback port
    testkit.waiting     `wait_for`: poll a condition until it holds or a deadline passes
    testkit.moto_s3     a moto S3 server on a free loopback port (or another local address)
    testkit.netns       a network namespace on a veth pair whose paths can be cut and restored
    testkit.metrics     the daemon's /metrics text as {series: value}
    testkit.daemon      `kfs serve` as a subprocess: start it, wait for /readyz, stop it
    testkit.raw_client  a bare socket speaking the Kafka protocol
    testkit.pki         a CA and the certificates the TLS listeners are tested with
    testkit.batches     deterministic RecordBatches (the WAL tests, bench.wal)

A top-level package rather than ``tests/support``: ``python -m bench.X`` and
``python -m soak`` import it as much as the tests do, and neither should
import the test tree (whose conftest sets up Airflow and the environment at
import).  The layer rules (``tests/test_layers.py``) stay simple: testkit
imports none of ``tests``, ``bench`` or ``soak``; bench, soak and the tests
may import testkit; only ``tests/bench`` imports ``bench``.

It is not part of the ``kfs`` distribution: pyproject.toml's package find
includes ``kfs_core``, ``spark_jobs`` and ``kfs_airflow`` only.  It is found
from the repository root (pytest's rootdir, the directory ``python -m``
runs from).
"""
