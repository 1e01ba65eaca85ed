"""`kfs run --daemons 2`: two daemons on one store, one bootstrap string, stopped together.

Without Airflow or the demo, so it is quick: the banner names both daemons
and the combined bootstrap; Metadata through it lists two brokers; a record
produced through it is consumed back; `kfs cluster status` sees both
running; SIGINT stops both cleanly, each flushing its buffers.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest

from kfs_core.cli.embedded import EmbeddedError, RunOptions, daemon_environment
from kfs_core.config import Settings
from testkit.ports import free_port
from testkit.waiting import wait_for
from tests.cli.test_run import (
    STOP_TIMEOUT_S,
    command_lines,
    descendants,
    finish,
    kfs_env,
    start,
    still_running,
)


def free_port_pair() -> int:
    """A port ``p`` with ``p`` and ``p + 1`` both free now."""

    def pair() -> int | None:
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                return None
        return port

    return wait_for(pair, timeout=10, what="two consecutive free ports")


def test_two_daemons_serve_one_bootstrap_and_stop_together(tmp_path: Path) -> None:
    home = tmp_path / ".kfs"
    kafka, metrics = free_port_pair(), free_port_pair()
    env = kfs_env(
        home,
        KFS_AIRFLOW="0",
        KFS_DEMO="0",
        KFS_LISTEN=f"127.0.0.1:{kafka}",
        KFS_METRICS_LISTEN=f"127.0.0.1:{metrics}",
        KFS_BROKER_HEARTBEAT_INTERVAL_MS="200",
        KFS_BROKER_SESSION_TIMEOUT_MS="2000",
    )
    run = start(home, env, "--daemons", "2")
    try:
        run.wait_ready()
        bootstrap = f"127.0.0.1:{kafka},127.0.0.1:{kafka + 1}"
        out = run.output
        assert f"  Kafka      {bootstrap}  (bootstrap.servers)" in out, out
        assert "  daemons    2 on one store, durability store" in out, out
        for node in (1, 2):
            address = f"127.0.0.1:{kafka + node - 1}"
            metrics_url = f"http://127.0.0.1:{metrics + node - 1}/metrics"
            data = home / "data" / f"node-{node}"
            assert f"    node {node}   {address}  metrics {metrics_url}  WAL {data}" in out, out
        children = descendants(run)
        assert sum("kfs_core.cli serve" in c for c in command_lines(children)) == 2

        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
        wait_for(
            lambda: len(admin.list_topics(timeout=5).brokers) == 2,
            timeout=30,
            what="Metadata listing both daemons",
        )
        brokers = admin.list_topics(timeout=5).brokers
        assert {(b.id, b.port) for b in brokers.values()} == {(1, kafka), (2, kafka + 1)}

        topic = f"t-{uuid.uuid4().hex[:8]}"
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.produce(topic, b"through both")  # auto-created, as `kfs produce` does
        assert producer.flush(30) == 0
        # Assigned, not subscribed: the record's path, not the group protocol's, is under test.
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
        )
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        errors: list[str] = []

        def record() -> confluent_kafka.Message | None:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                errors.append(str(message.error()))
                return None
            return message

        try:
            message = wait_for(record, timeout=60, what="the record back")
        except TimeoutError:
            raise AssertionError(f"no record; consumer errors: {errors}") from None
        finally:
            consumer.close()
        assert message.value() == b"through both"
        del producer

        status = subprocess.run(
            [sys.executable, "-m", "kfs_core.cli", "cluster", "status", "--json"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        daemons = json.loads(status.stdout)["daemons"]
        assert [(d["node_id"], d["state"], d["durability"]) for d in daemons] == [
            (1, "running", "store"),
            (2, "running", "store"),
        ]

        assert run.stop() == 0, run.output
        assert run.process.wait(timeout=STOP_TIMEOUT_S) == 0
        alive = still_running(children)
        assert not alive, command_lines(alive)
        for node in (1, 2):
            log = (home / "logs" / f"kfs-node-{node}.log").read_text()
            assert "kfs serve stopped (exit 0)" in log, log[-2000:]
    finally:
        finish(run)


# --- the plan, without starting anything ---------------------------------------------------


def options(tmp_path: Path, daemons: int, **env: str) -> RunOptions:
    settings = Settings.from_env(
        {"KFS_HOME": str(tmp_path), "KFS_DATA_DIR": str(tmp_path / "data"), **env}
    )
    return RunOptions(settings, home=tmp_path, daemons=daemons)


def test_one_daemon_is_todays(tmp_path: Path) -> None:
    one = options(tmp_path, 1, KFS_NODE_ID="5")
    [plan] = one.daemon_plans
    assert (plan.node_id, plan.listen, plan.data_dir, plan.log_name) == (
        None, "127.0.0.1:9092", str(tmp_path / "data"), "kfs.log",
    )  # fmt: skip
    env = daemon_environment(one, {"KFS_NODE_ID": "5"})
    assert env["KFS_NODE_ID"] == "5" and "KFS_DURABILITY" not in env
    assert one.bootstrap == "127.0.0.1:9092"


def test_several_daemons_count_ports_up_and_default_to_the_store_mode(tmp_path: Path) -> None:
    three = options(tmp_path, 3, KFS_LISTEN="0.0.0.0:19092", KFS_METRICS_LISTEN=":19644")
    plans = three.daemon_plans
    assert [(p.node_id, p.listen, p.metrics_listen) for p in plans] == [
        (1, "0.0.0.0:19092", ":19644"),
        (2, "0.0.0.0:19093", ":19645"),
        (3, "0.0.0.0:19094", ":19646"),
    ]
    assert three.bootstrap == "127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094"
    env = daemon_environment(three, {}, plans[1])
    assert (env["KFS_NODE_ID"], env["KFS_DURABILITY"], env["KFS_DATA_DIR"]) == (
        "2", "store", str(tmp_path / "data" / "node-2"),
    )  # fmt: skip
    assert (
        daemon_environment(three, {"KFS_DURABILITY": "cautious"}, plans[1])["KFS_DURABILITY"]
        == "cautious"
    )


def test_several_daemons_refuse_explicit_listeners(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedError, match="KFS_LISTENERS"):
        options(tmp_path, 2, KFS_LISTENERS="PLAINTEXT://127.0.0.1:9092")
