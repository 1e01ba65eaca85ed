"""What security costs: produce over SASL_SSL beside PLAINTEXT, and ACL checks with 10,000 ACLs.

    .venv/bin/python -m bench.security [--mb 200] [--acls 10000]

One `kfs serve` (bench.produce_fetch's daemon, cautious durability) with a
PLAINTEXT and a SASL_SSL listener (a test CA's certificate, SCRAM-SHA-512);
a confluent-kafka producer sends ``--mb`` MB of 1 KiB values (acks=all) over
each in turn, in the same run: MB/s, delivery latency p50 / p99, and the
TLS + SASL cost as a ratio.  Then the authorization layer alone
(`kfs_core.server.authz.check`) on a Produce and a Metadata request, with no
authorizer and with ``--acls`` bindings: microseconds per request.

Prints a table; exits non-zero only if the daemon or a client fails.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import confluent_kafka

from bench.produce_fetch import Daemon
from kfs_core.security.acls import AclBinding, Authorizer, Operation, PatternType, Permission
from kfs_core.security.acls import ResourceType as Res
from kfs_core.security.listeners import SecurityProtocol
from kfs_core.security.sasl import Session
from kfs_core.security.scram import make_credential
from kfs_core.security.users import UserStore
from kfs_core.server.authz import AuditLog, check
from kfs_core.server.protocol import Request
from kfs_core.server.protocol.messages import ApiKey
from kfs_core.storage import open_store
from testkit.pki import make_pki
from testkit.ports import free_port

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from kafka.protocol.metadata import MetadataRequest
    from kafka.protocol.producer import ProduceRequest

PASSWORD = "bench password"
VALUE = b"x" * 1024


def produce(conf: dict[str, Any], topic: str, mb: float) -> tuple[float, float, float]:
    """(MB/s, p50 ms, p99 ms) of ``mb`` MB of 1 KiB values, acks=all."""
    producer = confluent_kafka.Producer({**conf, "acks": "all", "linger.ms": 5, "log_level": 2})
    latencies: list[float] = []
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        elif len(latencies) < 200_000:
            latencies.append(msg.latency() or 0.0)

    count = int(mb * 1024)
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    seconds = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, e.g. {errors[0]}")
    latencies.sort()

    def p(q: float) -> float:
        return latencies[int(q * (len(latencies) - 1))] * 1000

    return count * len(VALUE) / 1e6 / seconds, p(0.5), p(0.99)


def authz_cost(acls: int, rounds: int = 20_000) -> list[tuple[str, float]]:
    """Microseconds per `check` of a Produce and a Metadata request, without and with ACLs."""
    bindings = [
        AclBinding(Res.TOPIC, f"topic-{i}", PatternType.LITERAL, f"User:u{i % 500}", "*",
                   Operation.WRITE, Permission.ALLOW)
        for i in range(acls)
    ]  # fmt: skip
    bindings.append(AclBinding(Res.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*",
                               Operation.ALL, Permission.ALLOW))  # fmt: skip
    topic = ProduceRequest.TopicProduceData
    produce_req = Request(ApiKey.PRODUCE, 9, 1, "bench", ProduceRequest(
        version=9, acks=-1, timeout_ms=1000, transactional_id=None,
        topic_data=[topic(name="orders", partition_data=[topic.PartitionProduceData(index=0, records=b"")])],
    ))  # fmt: skip
    metadata_req = Request(ApiKey.METADATA, 12, 1, "bench", MetadataRequest(
        version=12, topics=[MetadataRequest.MetadataRequestTopic(name="orders")],
        allow_auto_topic_creation=False,
    ))  # fmt: skip
    session = Session.on(SecurityProtocol.SASL_SSL, "10.0.0.1", "User:alice")
    audit = AuditLog(every_s=1e9)
    rows = []
    for label, authorizer in (
        ("no ACLs", Authorizer([])),
        (f"{acls:,} ACLs", Authorizer(bindings)),
    ):
        for name, request in (("Produce", produce_req), ("Metadata", metadata_req)):
            started = time.perf_counter()
            for _ in range(rounds):
                check(authorizer, session, audit, request)
            rows.append(
                (f"authorize {name}, {label}", (time.perf_counter() - started) / rounds * 1e6)
            )
    return rows


def run(root: Path, mb: float, acls: int) -> list[tuple[str, str]]:
    pki = make_pki(root / "pki")
    sasl_port = free_port()
    daemon = Daemon(root / "daemon")
    daemon.extra_args = (
        "--listeners", f"PLAINTEXT://127.0.0.1:{daemon.kafka_port},SASL_SSL://127.0.0.1:{sasl_port}",
        "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
    )  # fmt: skip
    UserStore(open_store(daemon.store_dir.as_uri()), "bench").set_credential(
        "bench", make_credential("SCRAM-SHA-512", PASSWORD)
    )
    daemon.start()
    rows: list[tuple[str, str]] = []
    try:
        plain = {"bootstrap.servers": daemon.bootstrap}
        secure = {
            "bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki.ca), "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "bench", "sasl.password": PASSWORD,
        }  # fmt: skip
        results = {}
        for label, conf in (("PLAINTEXT", plain), ("SASL_SSL (SCRAM-SHA-512)", secure)):
            mbps, p50, p99 = produce(conf, f"bench-{label[:5].lower()}", mb)
            results[label] = mbps
            rows.append(
                (
                    f"produce over {label}",
                    f"{mbps:.0f} MB/s, ack p50 {p50:.1f} ms, p99 {p99:.1f} ms",
                )
            )
        ratio = results["SASL_SSL (SCRAM-SHA-512)"] / results["PLAINTEXT"]
        rows.append(("SASL_SSL / PLAINTEXT throughput", f"{ratio:.2f}"))
    finally:
        daemon.stop()
    for what, micros in authz_cost(acls):
        rows.append((what, f"{micros:.1f} us per request"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="MB produced over each listener")
    parser.add_argument("--acls", type=int, default=10_000, help="ACLs defined for the authz rows")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kfs-bench-security-") as tmp:
        rows = run(Path(tmp), args.mb, args.acls)
    width = max(len(what) for what, _ in rows)
    print(f"\nsecurity ({args.mb:g} MB per listener, 1 KiB values, acks=all)")
    for what, value in rows:
        print(f"  {what.ljust(width)}  {value}")


if __name__ == "__main__":
    main()
