"""Three `kfs serve` processes on S3 while real network paths to one of them are cut.

Nodes 1 and 2 run in this network namespace; node 3 runs in a namespace of
its own (`testkit.netns`), joined by a veth pair with one path to the moto
S3 server (``store``), one to its Kafka clients (``clients``) and one for
its /metrics (``observer``, never cut, so the test watches it throughout).
A cut is a pair of blackhole routes: the daemon's own kernel drops the
packets, as on a real partition, and nothing else of it changes.

- Cut from the store, node 3's heartbeats stop landing: it stops
  acknowledging at its lease deadline, nodes 1 and 2 take its partitions,
  and once the route is back it rejoins and takes its share again.
- Cut from its clients, it goes on heartbeating and keeps its leases (a
  daemon's liveness is its heartbeat in the store): its partitions answer
  nobody while the cut lasts, the other partitions go on, and once the
  route is back the producers' retries land.

Both run confluent-kafka producers (idempotent, acks=all) throughout and
judge the history as tests/cluster/test_daemons.py does: every acknowledged
record once at its acknowledged offset, no gaps, and nothing a consumer read
during the cut changed afterwards.  They need root and ``ip netns``; without
them they fail, saying so.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import confluent_kafka
import pytest

from kfs_core.cluster.assignment import assign_topic
from kfs_core.groups.offset_log import OFFSETS_TOPIC
from testkit.daemon import Daemon, DaemonFactory
from testkit.moto_s3 import moto_server
from testkit.netns import NetNamespace, NetnsUnavailable, network_namespace, require
from testkit.waiting import wait_for
from tests.cluster.test_daemons import (
    PARTITIONS,
    S3_TIMING,
    BackgroundProducer,
    bootstrap,
    check_history,
    create_topic,
    leaders,
    read_all,
)

pytestmark = pytest.mark.integration

#: The node id of the daemon whose paths are cut.
CUT = 3
SESSION_S = S3_TIMING["session_timeout_ms"] / 1000
#: The producers ride out a cut: room in the queue for the records of partitions nobody
#: answers meanwhile, time enough to deliver them after it, and a connection attempt
#: into the cut (a SYN whose answer is dropped) given up on in seconds, not 30.
PRODUCER = {
    "queue.buffering.max.messages": 100_000,
    "message.timeout.ms": 120_000,
    "socket.connection.setup.timeout.ms": 3000,
    "reconnect.backoff.max.ms": 1000,
}


@dataclass
class Cluster:
    daemons: list[Daemon]  # node ids 1, 2, 3; node 3 in ``netns``
    netns: NetNamespace

    @property
    def cut(self) -> Daemon:
        return self.daemons[CUT - 1]

    @property
    def others(self) -> str:
        """The bootstrap servers of the two daemons no path of which is cut."""
        return bootstrap([d for d in self.daemons if d is not self.cut])


@pytest.fixture
def netns() -> Iterator[NetNamespace]:
    try:
        require()
    except NetnsUnavailable as exc:
        pytest.fail(f"these tests cut real network paths and cannot run here: {exc}")
    with network_namespace() as ns:
        yield ns


@pytest.fixture
def cluster(tmp_path: Path, netns: NetNamespace) -> Iterator[Cluster]:
    """Nodes 1 and 2 here, node 3 in ``netns``; moto on the ``store`` path's outside address."""
    with moto_server(tmp_path / "moto.log", host=netns.outside("store")) as endpoint:
        bucket = f"cuts-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        store_url = f"s3://{bucket}/kfs"
        factory = DaemonFactory(tmp_path)
        try:
            daemons = factory.start_cluster(
                2, store_url=store_url, s3_endpoint_url=endpoint, **S3_TIMING
            )
            daemons += factory.start_cluster(
                1,
                store_url=store_url,
                s3_endpoint_url=endpoint,
                first_node_id=CUT,
                netns=netns,
                **S3_TIMING,
            )
            wait_for(
                lambda: all(d.metric("kfs_cluster_live_nodes") >= 3 for d in daemons),
                timeout=60,
                what="three live daemons",
            )
            yield Cluster(daemons, netns)
        finally:
            factory.close()


def led_by(servers: str, topic: str, node: int) -> set[int]:
    return {p for p, leader in leaders(servers, topic).items() if leader == node}


def acked_on(producer: BackgroundProducer, partitions: Iterable[int]) -> int:
    """How many records the producer has had acknowledged on ``partitions``."""
    wanted = set(partitions)
    with producer.history.lock:
        return sum(1 for p, _ in producer.history.acked if p in wanted)


def more_acks(producer: BackgroundProducer, count: int, partitions: Iterable[int] = ()) -> None:
    """Wait for ``count`` more acknowledgements (on ``partitions``, or on any)."""
    on = list(partitions) or range(PARTITIONS)
    target = acked_on(producer, on) + count
    wait_for(lambda: acked_on(producer, on) >= target, timeout=60, what=f"{count} more acks")


def group_not_on(servers: str, node: int) -> str:
    """A fresh group id that ``node`` does not coordinate.

    librdkafka's consumer starts serving even an assign()ed partition only
    once its group coordinator answers, so a reader during a cut of
    ``node`` must not have its group there.
    """
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": servers})

    def offsets_topic() -> dict[int, int]:
        # A group request creates the offsets topic when it is missing.
        probe = [confluent_kafka.ConsumerGroupTopicPartitions("probe")]
        for future in admin.list_consumer_group_offsets(probe).values():
            future.result(10)
        return leaders(servers, OFFSETS_TOPIC)

    offsets = wait_for(offsets_topic, timeout=30, what="the offsets topic")
    while True:
        group = f"cut-{uuid.uuid4().hex[:6]}"
        if offsets[zlib.crc32(group.encode()) % len(offsets)] != node:  # the daemons' rule
            return group


def read_partitions(
    servers: str, topic: str, partitions: Iterable[int], last: int = 1000
) -> dict[tuple[int, int], bytes]:
    """What a consumer reads of the ``last`` records of ``partitions`` up to their ends now.

    The newest records are the ones a cut could change; reading only them
    keeps the cut short enough for the producers' queued records to wait.
    """
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group_not_on(servers, CUT),
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        wanted = sorted(partitions)
        ends = {
            p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), 10)[1]
            for p in wanted
        }
        starts = {p: max(0, ends[p] - last) for p in wanted}
        consumer.assign([confluent_kafka.TopicPartition(topic, p, starts[p]) for p in wanted])
        got: dict[tuple[int, int], bytes] = {}
        positions = dict(starts)

        def done() -> bool:
            return all(positions[p] >= ends[p] for p in wanted)

        def caught_up() -> bool:
            # The producers go on meanwhile: stop at the ends, not when the polls run dry.
            while not done() and (msg := consumer.poll(0.2)) is not None:
                assert msg.error() is None, msg.error()
                if msg.offset() < ends[msg.partition()]:
                    got[(msg.partition(), msg.offset())] = msg.value()
                positions[msg.partition()] = msg.offset() + 1
            return done()

        wait_for(caught_up, timeout=60, what=f"reading partitions {wanted}")
        return got
    finally:
        consumer.close()


def unreachable(servers: str, topic: str, partition: int) -> bool:
    """Whether a consumer asking ``servers`` for the partition's end gets no answer in 3 s."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": servers, "group.id": "probe"})
    try:
        consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, partition), 3)
    except confluent_kafka.KafkaException as exc:
        return exc.args[0].code() == confluent_kafka.KafkaError._TIMED_OUT
    finally:
        consumer.close()
    return False


def hold(seconds: float, check: Callable[[], None]) -> None:
    """Keep the fault for ``seconds``, running ``check`` throughout: it must hold every time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(0.2)


def connects(ns: NetNamespace, host: str, port: int) -> bool:
    """Whether a process in ``ns`` opens a TCP connection to ``host:port`` within 2 s."""
    code = f"import socket; socket.create_connection(({host!r}, {port}), timeout=2)"
    return ns.run([sys.executable, "-c", code]).returncode == 0


def answer(host: str, port: int) -> str:
    """What a connection from here to ``host:port`` meets within 2 s."""
    try:
        socket.create_connection((host, port), timeout=2).close()
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "silence"
    except OSError as exc:
        return f"unroutable ({exc.strerror})"
    return "connected"


def test_a_cut_drops_one_path_until_restored(netns: NetNamespace) -> None:
    store = socket.create_server((netns.outside("store"), 0))
    clients = socket.create_server((netns.outside("clients"), 0))
    to_store = (netns.outside("store"), store.getsockname()[1])
    to_clients = (netns.outside("clients"), clients.getsockname()[1])
    closed_inside = (netns.inside("clients"), 9)  # nothing listens there: refused
    with store, clients:
        assert connects(netns, *to_store) and connects(netns, *to_clients)
        assert answer(*closed_inside) == "refused"
        netns.cut("store")
        assert not connects(netns, *to_store)
        assert connects(netns, *to_clients)  # the other path is untouched
        netns.restore("store")
        assert connects(netns, *to_store)
        netns.cut("clients")  # both ways: nothing from here gets in either
        assert answer(*closed_inside).startswith("unroutable")
        netns.restore("clients")
        # One way: what is sent in arrives, what the namespace sends back is dropped.
        netns.cut("clients", one_way=True)
        assert not connects(netns, *to_clients)
        assert answer(*closed_inside) == "silence"
        netns.restore("clients")
        assert answer(*closed_inside) == "refused"


def netns_state() -> str:
    """The namespaces, links and routes of the root namespace, as ``ip`` lists them."""
    return "".join(
        subprocess.run(["ip", *what], capture_output=True, text=True, check=True).stdout
        for what in (["netns", "list"], ["-br", "link"], ["route"])
    )


def test_a_namespace_is_removed_on_failure_and_when_its_maker_was_killed(
    netns: NetNamespace,
) -> None:
    # (The fixture's namespace holds index 0: these take others.)
    with pytest.raises(RuntimeError, match="the test failed"), network_namespace() as ns:
        ns.cut("store")
        state = netns_state()
        assert ns.name in state and f"blackhole {ns.inside('store')}" in state
        raise RuntimeError("the test failed")
    state = netns_state()
    assert ns.name not in state and ns.outer_link not in state and ns.inside("store") not in state
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, signal\n"
            "from testkit.netns import network_namespace\n"
            "made = network_namespace()\n"
            "ns = made.__enter__()\n"
            "ns.cut('clients')\n"
            "print(ns.name, ns.inside('clients'), flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    left, address = killed.stdout.split() or [killed.stderr, ""]
    assert left in netns_state() and f"blackhole {address}" in netns_state()
    with network_namespace():  # the next one made removes what the killed process left
        assert left not in netns_state() and f"blackhole {address}" not in netns_state()


def test_a_daemon_cut_off_from_the_store_stops_acknowledging_and_rejoins(
    cluster: Cluster,
) -> None:
    cut, others = cluster.cut, cluster.others
    topic = create_topic(bootstrap(cluster.daemons))
    with BackgroundProducer(bootstrap(cluster.daemons), topic, PRODUCER) as producer:
        more_acks(producer, 300)
        held = wait_for(lambda: led_by(others, topic, CUT), timeout=30, what="node 3 leading")
        cluster.netns.cut("store")
        # Its heartbeats fail, its lease deadline passes: it acknowledges nothing more.
        wait_for(
            lambda: cut.metric("kfs_cluster_lease_valid") == 0,
            timeout=30,
            what="node 3's leases lapsing",
        )
        wait_for(
            lambda: not led_by(others, topic, CUT),
            timeout=30,
            what="nodes 1 and 2 taking node 3's partitions",
        )
        more_acks(producer, 300, held)  # its partitions go on, elsewhere
        assert cut.alive()
        consumed = read_partitions(others, topic, range(PARTITIONS))
        cluster.netns.restore("store")
        wait_for(
            lambda: cut.metric("kfs_cluster_lease_valid") == 1,
            timeout=60,
            what="node 3's heartbeats landing again",
        )
        wait_for(
            lambda: led_by(others, topic, CUT),
            timeout=60,
            what="node 3 taking its share back",
        )
        more_acks(producer, 300, led_by(others, topic, CUT))
    assert not producer.history.errors, producer.history.errors[:3]
    stored = read_all(bootstrap(cluster.daemons), topic)
    check_history(producer.history, stored)
    changed = [k for k, v in consumed.items() if stored.get(k) != v]
    assert not changed, f"records read during the cut changed since: {changed[:5]}"
    assert "heartbeats land again" in cut.log(), cut.log()[-3000:]


def test_a_daemon_cut_off_from_its_clients_keeps_its_leases_and_they_resume(
    cluster: Cluster,
) -> None:
    """The cut drops what node 3 sends its clients: their requests still reach it.

    So it appends records whose acknowledgements never arrive; the
    idempotent producers' retries after the cut must not store them twice.
    (A cut both ways is the same for the daemon, minus those requests:
    ``python -m soak`` runs both.)
    """
    cut, others = cluster.cut, cluster.others
    topic = create_topic(bootstrap(cluster.daemons))
    with BackgroundProducer(bootstrap(cluster.daemons), topic, PRODUCER) as producer:
        more_acks(producer, 300)
        # Every partition on its assignee: no hand-over under way to blur what the cut does.
        before = dict(enumerate(assign_topic(topic, PARTITIONS, [1, 2, CUT])))
        wait_for(lambda: leaders(others, topic) == before, timeout=30, what="the assignment")
        held = {p for p, node in before.items() if node == CUT}
        rest = set(range(PARTITIONS)) - held
        assert held, before
        cluster.netns.cut("clients", one_way=True)
        # Replies already on the wire may still land; after 200 acks elsewhere none can.
        more_acks(producer, 200, rest)
        stalled = acked_on(producer, held)

        def as_designed() -> None:
            # Node 3's heartbeats still land: the others count it live and
            # leave its partitions to it; its leases stay valid.
            assert leaders(others, topic) == before
            assert all(d.metric("kfs_cluster_live_nodes") == 3 for d in cluster.daemons)
            assert cut.metric("kfs_cluster_lease_valid") == 1
            # Nobody acknowledges its partitions meanwhile.
            assert acked_on(producer, held) == stalled

        hold(2 * SESSION_S, as_designed)  # well past the session timeout
        assert all(unreachable(others, topic, p) for p in held)
        more_acks(producer, 200, rest)  # the other partitions go on
        as_designed()
        consumed = read_partitions(others, topic, rest)
        cluster.netns.restore("clients")
        more_acks(producer, 300, held)  # the producer's retries land on node 3
        assert leaders(others, topic) == before
    assert not producer.history.errors, producer.history.errors[:3]
    stored = read_all(bootstrap(cluster.daemons), topic)
    check_history(producer.history, stored)
    changed = [k for k, v in consumed.items() if stored.get(k) != v]
    assert not changed, f"records read during the cut changed since: {changed[:5]}"
