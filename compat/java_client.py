"""Kafka's Java client against a real `kfs serve`: what Kafka's own tools do not exercise.

``compat/java/`` is a small Maven project on ``org.apache.kafka:kafka-clients``
at the release ``compat/kafka/pom.xml`` pins (the two poms must agree:
`check_pinned_release`).  `build` packages it once into
``.build/java-client/`` (``kfs-java-client.jar``, its dependencies in
``lib/``), again only when the pom or a source is newer than the last
build.  `run_java_client` runs the program against a bootstrap address,
with Kafka's client properties for SASL_SSL if given; the program prints
one line per scenario, ``PASS <name>`` or ``FAIL <name>: <reason>``, and
each becomes an `Outcome` of the suite ``java client``.  A scenario that
never printed its line (the program crashed or was killed) has failed.

Each scenario makes its own topics, groups and transactional ids, named
with a per-run id, so runs can repeat against one daemon; each has a
deadline in the program (``--scenario-timeout-ms``), so one that hangs
fails and the next runs.  What each asserts (`SCENARIOS`):

- ``producer-idempotent-<codec>``, for none, gzip, snappy, lz4 and zstd:
  ``enable.idempotence=true``, ``acks=all``, five requests in flight: 300
  keyed records of every shape (compressible text, random bytes, empty and
  null values; text, binary, empty, null and repeated headers) over three
  partitions are acknowledged at offsets 0, 1, 2, ... per partition in the
  order sent, and read back with the same offsets, keys, values, headers
  and CreateTime timestamps.
- ``consumer-group-range`` and ``consumer-group-cooperative-sticky``: two
  consumers share a six-partition topic, a third joins while records are
  produced, and a rebalance gives each two partitions at a new generation.
  Every record is consumed exactly once across the group (offsets
  committed with commitSync after each poll and on revocation), no
  partition is ever owned by two members at once (by the members' own
  rebalance callbacks), no partition is lost, the committed offsets reach
  the log end, and describeConsumerGroups says Stable, three members, the
  assignor in use.  Under cooperative-sticky the first two members only
  give partitions up.
- ``consumer-group-static-member-returns`` and
  ``consumer-group-static-leader-returns``: static-a (``group.instance.id``)
  joins and takes every partition, static-b joins and they share them,
  static-a leading.  Then static-b (the follower), or static-a (the
  leader, whose last JoinGroup carried its generation and partitions),
  closes without a LeaveGroup and a new consumer with its instance id joins
  within ``session.timeout.ms``: it gets the same partitions at the same
  generation (``groupMetadata().generationId()``), and the other member sees
  no rebalance (same generation, no callback).  As Kafka's coordinator does,
  only a change of the group's selected assignor may rebalance there.
- ``transactions-read-committed``: a transactional producer commits one
  transaction, aborts one (both also commit a group offset with
  sendOffsetsToTransaction), commits another and leaves a fourth open: a
  ``read_committed`` consumer reads exactly the committed records, in order
  per partition, and stops at the last stable offset, behind the end;
  ``read_uncommitted`` reads the aborted records too; the group offset is
  the committed transaction's.  After the last commit ``read_committed``
  reads that transaction's records as well.
- ``streams-word-count-exactly-once``: a Kafka Streams word count with
  ``processing.guarantee=exactly_once_v2`` (a repartition topic, an
  in-memory store with a compacted changelog topic, a transaction per
  commit).  One instance counts half the sentences and closes; a second
  instance of the application, with an empty state directory, restores the
  counts from the changelog and counts the rest.  A ``read_committed`` read
  of the output ends, for each word, at exactly the number of times it was
  sent.
- ``admin-topics``: createTopics with configs (its result's partitions,
  replication factor, topic id and configs; again: TopicExistsException),
  listTopics, describeTopics (leaders, replicas, the topic id),
  createPartitions up (described) and down (InvalidPartitionsException),
  deleteTopics (unlisted; describe: UnknownTopicOrPartitionException).
- ``admin-topic-ids``: describeTopics and deleteTopics of topics named by
  id (KIP-516); a deleted id is UnknownTopicIdException.
- ``admin-configs``: describeConfigs (overrides as DYNAMIC_TOPIC_CONFIG,
  Kafka's topic configs present; the broker's), incrementalAlterConfigs
  SET, DELETE and APPEND each visible after, an invalid value and an
  unknown name InvalidConfigurationException.
- ``admin-offsets``: listOffsets earliest, latest, maxTimestamp (the
  record with the largest timestamp, not the last one) and forTimestamp
  (the first record at or after it, -1 past them all) over out-of-order
  timestamps; deleteRecords moves the low watermark and earliest (a read
  from the beginning starts there); past the end: OffsetOutOfRangeException.
- ``admin-consumer-groups``: with a member, listConsumerGroups and
  describeConsumerGroups (Stable, the member's client id and assignment,
  the assignor), deleteConsumerGroups GroupNotEmptyException,
  alterConsumerGroupOffsets UnknownMemberIdException; once it left: Empty,
  listConsumerGroupOffsets, alterConsumerGroupOffsets (offset and
  metadata), deleteConsumerGroups (unlisted, no offsets, a second delete
  GroupIdNotFoundException).
- ``admin-cluster``: describeCluster (a cluster id, nodes, the one the
  client bootstrapped from), describeLogDirs (the topic's partitions, the
  one written to with a size above zero).
- ``admin-producers-transactions``: describeProducers (an idempotent
  producer's last sequence; an open transaction's first offset),
  listTransactions (Ongoing, also filtered by state; CompleteCommit after
  the commit) and describeTransactions (state, partitions, start time).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from compat.kafka_tools import KAFKA_POM, kafka_version
from compat.suites import Outcome, SuiteResult

__all__ = [
    "BUILD_DIR",
    "JAVA_PROJECT",
    "NEVER_REPORTED",
    "SCENARIOS",
    "SUITE",
    "build",
    "check_pinned_release",
    "list_scenarios",
    "outcomes_from_output",
    "run_java_client",
]

REPO = Path(__file__).resolve().parent.parent
JAVA_PROJECT = REPO / "compat" / "java"
POM = JAVA_PROJECT / "pom.xml"
BUILD_DIR = REPO / ".build"
SUITE = "java client"
JAR = "kfs-java-client.jar"
BUILT_STAMP = ".built"
BUILD_TIMEOUT_S = 900.0
#: Each scenario's deadline in the program; the whole run gets this per scenario, and a minute.
SCENARIO_TIMEOUT_MS = 60_000
#: ``PASS <name>`` or ``FAIL <name>: <reason>``, as the program prints them.
RESULT_LINE = re.compile(r"^(?P<result>PASS|FAIL) (?P<name>\S+?)(?:: (?P<reason>.*))?$")
NEVER_REPORTED = "never reported (the program crashed or was killed)"

#: The program's scenarios in the order it runs them, and what each asserts (the docstring above).
SCENARIOS: dict[str, str] = {
    **{
        f"producer-idempotent-{codec}": f"idempotent, acks=all, {codec}: read back exactly"
        for codec in ("none", "gzip", "snappy", "lz4", "zstd")
    },
    "consumer-group-range": "eager rebalance to a third member: each record once, no owner twice",
    "consumer-group-cooperative-sticky": "cooperative rebalance: each record once, no owner twice",
    "consumer-group-static-member-returns": "a static follower back in time: no rebalance",
    "consumer-group-static-leader-returns": "the static leader back in time: no rebalance",
    "transactions-read-committed": "committed records only, up to the last stable offset",
    "streams-word-count-exactly-once": "Kafka Streams, exactly_once_v2, restored: exact counts",
    "admin-topics": "createTopics, listTopics, describeTopics, createPartitions, deleteTopics",
    "admin-topic-ids": "describeTopics and deleteTopics by topic id",
    "admin-configs": "describeConfigs, incrementalAlterConfigs SET/DELETE/APPEND, invalid ones",
    "admin-offsets": "listOffsets by every spec, deleteRecords",
    "admin-consumer-groups": "list, describe, offsets listed and altered, groups deleted",
    "admin-cluster": "describeCluster, describeLogDirs",
    "admin-producers-transactions": "describeProducers, listTransactions, describeTransactions",
}


def check_pinned_release(pom: Path = POM) -> str:
    """The kafka-clients release the Java project builds on; `ValueError` unless the tools' pin."""
    version = kafka_version(pom)
    tools = kafka_version(KAFKA_POM)
    if version != tools:
        raise ValueError(
            f"{pom} builds on Kafka {version}, {KAFKA_POM} pins {tools}: make them agree"
        )
    return version


def _newest_source(project: Path = JAVA_PROJECT) -> float:
    return max(path.stat().st_mtime for path in project.rglob("*") if path.is_file())


def build(cache: Path = BUILD_DIR) -> Path:
    """``cache/java-client/kfs-java-client.jar``, built with Maven unless a build is newer than the sources.

    ``mvn package`` compiles the program and copies its dependencies beside
    the jar (``lib/``, which the jar's manifest names); a stamp written after
    a successful build marks it whole.  `RuntimeError` if Maven is missing
    or the build fails, with Maven's output.
    """
    check_pinned_release()
    out = cache / "java-client"
    jar, stamp = out / JAR, out / BUILT_STAMP
    if jar.is_file() and stamp.is_file() and stamp.stat().st_mtime > _newest_source():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(
            "the Java client needs Maven: `mvn` is not on PATH (apt-get install maven)"
        )
    stamp.unlink(missing_ok=True)
    done = subprocess.run(
        [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM),
         f"-Djava-client.build.dir={out.resolve()}", "package"],
        capture_output=True, text=True, check=False, timeout=BUILD_TIMEOUT_S,
    )  # fmt: skip
    if done.returncode != 0 or not jar.is_file():
        raise RuntimeError(f"mvn package of {POM} failed:\n{(done.stdout + done.stderr).strip()}")
    stamp.write_text(f"kafka-clients {check_pinned_release()}\n")
    return jar


def _java_command(jar: Path) -> list[str]:
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("the Java client needs Java 17: `java` is not on PATH")
    return [java, "-Xmx512m", "-jar", str(jar)]


def list_scenarios(jar: Path) -> list[str]:
    """The scenario names the built program runs (``--list``), in its order."""
    done = subprocess.run(
        [*_java_command(jar), "--list"], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.split()


def outcomes_from_output(stdout: str, expected: Sequence[str], why_missing: str) -> list[Outcome]:
    """One `Outcome` per scenario of ``expected``, from the program's lines; a silent one failed.

    A line for a scenario not in ``expected`` (there should be none) is an
    outcome too, after them.
    """
    reported: dict[str, Outcome] = {}
    for line in stdout.splitlines():
        found = RESULT_LINE.match(line.strip())
        if found is None:
            continue
        name = found.group("name")
        if found.group("result") == "PASS":
            reported[name] = Outcome(name, "passed")
        else:
            reported[name] = Outcome(name, "failed", found.group("reason") or "")
    outcomes = [reported.pop(name, Outcome(name, "failed", why_missing)) for name in expected]
    return outcomes + list(reported.values())


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def run_java_client(
    bootstrap: str,
    *,
    properties: Path | None = None,
    scenarios: Sequence[str] = (),
    jar: Path | None = None,
    scenario_timeout_ms: int = SCENARIO_TIMEOUT_MS,
    log: Path | None = None,
) -> SuiteResult:
    """Run the program's ``scenarios`` (all of `SCENARIOS` by default) against ``bootstrap``.

    ``properties``: a Kafka client properties file merged into every client
    (SASL_SSL, say: `compat.daemons.SaslSsl.properties`).  ``jar``: a built
    program (default: `build`'s).  ``log``: where to write what the program
    printed, its stderr (the client's warnings) after its results.
    """
    names = list(scenarios) or list(SCENARIOS)
    command = [
        *_java_command(jar or build()),
        "--bootstrap-server", bootstrap,
        *(["--command-config", str(properties)] if properties else []),
        "--scenario-timeout-ms", str(scenario_timeout_ms),
        *names,
    ]  # fmt: skip
    result = SuiteResult(SUITE)
    started = time.monotonic()
    why_missing = NEVER_REPORTED
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            timeout=len(names) * scenario_timeout_ms / 1000 + 60,
        )
        stdout, stderr = done.stdout, done.stderr
        if done.returncode not in (0, 1):
            why_missing = f"{NEVER_REPORTED}: exit {done.returncode}: {_tail(stderr)}"
    except subprocess.TimeoutExpired as expired:  # past every deadline: the JVM itself hung
        stdout, stderr = _text(expired.stdout), _text(expired.stderr)
        why_missing = f"{NEVER_REPORTED}: killed after {expired.timeout:.0f} s"
    result.seconds = time.monotonic() - started
    result.outcomes = outcomes_from_output(stdout, names, why_missing)
    if log is not None:
        log.write_text(f"$ {' '.join(command)}\n{stdout}\n--- stderr ---\n{stderr}")
    return result


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])
