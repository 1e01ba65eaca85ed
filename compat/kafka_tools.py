"""Apache Kafka's own command-line tools against a real `kfs serve`, each tool's output checked.

The tools are the jars of the release ``compat/kafka/pom.xml`` pins, which
``.ci/install-kafka-tools`` (``make kafka-tools``) copies from Maven Central
into ``.build/kafka/lib``; each runs as ``java -cp 'lib/*' <main class>``,
the class Kafka's ``bin/kafka-*.sh`` script would start (`MAIN_CLASSES`).

`run_kafka_tools` runs `CHECKS` in order against one daemon: a topic is
created, described, altered, written with keys and headers, read back by a
group, that group's lag described, reset and deleted, records deleted,
offsets listed by every spec, and so on.  Each check runs one or more tools
and asserts on what they print (not only their exit codes); a check that
raises is a failed `Outcome` with the command and the tail of its output.
The same checks run over PLAINTEXT and over SASL_SSL with SCRAM
(`ToolClient.command_config`: the client properties file Kafka's tools take
with ``--command-config``); a few need a listener of their own kind
(`Check.needs`): ACLs want an authorizer, SCRAM credentials a SASL login.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compat.suites import Outcome, SuiteResult

__all__ = [
    "CHECKS",
    "KAFKA_LIB",
    "MAIN_CLASSES",
    "Check",
    "ToolClient",
    "ToolFailed",
    "kafka_version",
    "run_kafka_tools",
]

REPO = Path(__file__).resolve().parent.parent
KAFKA_POM = REPO / "compat" / "kafka" / "pom.xml"
KAFKA_LIB = REPO / ".build" / "kafka" / "lib"
LOG4J_CONFIG = REPO / "compat" / "kafka" / "log4j2.properties"
TOOL_TIMEOUT_S = 120.0

#: ``bin/kafka-<tool>.sh`` -> the class it starts (Kafka 4.x).
MAIN_CLASSES = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
}


def kafka_version(pom: Path = KAFKA_POM) -> str:
    """The Kafka release the pom pins (``<kafka.version>``)."""
    found = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", pom.read_text())
    if found is None:
        raise ValueError(f"{pom}: no <kafka.version>")
    return found.group(1)


class ToolFailed(AssertionError):
    """A tool exited non-zero, or printed something other than what a check expects."""


@dataclass
class ToolClient:
    """Runs Kafka's tools against one bootstrap address, with ``--command-config`` if given."""

    bootstrap: str
    scratch: Path  # a directory for the files tools read (delete-records' plan)
    command_config: Path | None = None
    lib: Path = KAFKA_LIB
    log: list[str] = field(default_factory=list)  # each command and its output, for reports

    def run(
        self,
        tool: str,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``tool`` with ``--bootstrap-server`` (and ``--command-config``) and ``args``; text output.

        ``check``: a non-zero exit raises `ToolFailed` with the output's tail.
        """
        if not self.lib.is_dir():
            raise ToolFailed(f"{self.lib} is missing: run `make kafka-tools` first")
        command = [
            "java",
            "-Xmx512m",
            f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            "-cp",
            f"{self.lib}/*",
            MAIN_CLASSES[tool],
            "--bootstrap-server",
            self.bootstrap,
            *(["--command-config", str(self.command_config)] if self.command_config else []),
            *args,
        ]
        done = subprocess.run(
            command,
            check=False,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_S,
        )
        self.log.append(f"$ {tool} {' '.join(args)}\n{done.stdout}{done.stderr}")
        if check and done.returncode != 0:
            raise ToolFailed(
                f"{tool} {' '.join(args)} exited {done.returncode}: {_tail(done.stderr or done.stdout)}"
            )
        return done


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def expect(condition: bool, what: str, output: str) -> None:
    """`ToolFailed` naming ``what`` was expected, and the output's tail, unless ``condition``."""
    if not condition:
        raise ToolFailed(f"expected {what}; got: {_tail(output, 10)}")


# --- the checks ------------------------------------------------------------------------

TOPIC = "compat-tools"
GROUP = "compat-tools-group"
RECORDS = [  # headers, key, value: as kafka-console-producer reads them (parse.headers, parse.key)
    ("h1:v1,h2:v2", "k1", "hello one"),
    ("h1:x", "k2", "hello two"),
    ("h3:y", "k3", "hello three"),
]


@dataclass(frozen=True)
class Check:
    """One named check; ``needs`` says which daemon it wants (see the module docstring)."""

    name: str
    run: Callable[[ToolClient], None]
    needs: str = "any"  # "any", "authorizer" (ACLs on, this client a super user), "sasl"


def check_api_versions(tools: ToolClient) -> None:
    out = tools.run("kafka-broker-api-versions").stdout
    for api in ("Produce(0)", "Fetch(1)", "ListOffsets(2)", "Metadata(3)", "EndTxn(26)"):
        line = next((line for line in out.splitlines() if api in line), "")
        expect("usable:" in line and "UNSUPPORTED" not in line, f"{api} usable", out)


def check_topics(tools: ToolClient) -> None:
    out = tools.run(
        "kafka-topics", "--create", "--topic", TOPIC, "--partitions", "3",
        "--replication-factor", "1", "--config", "retention.ms=3600000",
        "--config", "flush.ms=1000",
    ).stdout  # fmt: skip
    expect(f"Created topic {TOPIC}." in out, "the topic created", out)
    again = tools.run(
        "kafka-topics", "--create", "--topic", TOPIC, "--partitions", "3", check=False
    )
    expect("already exists" in again.stdout + again.stderr, "TopicExistsException", again.stderr)
    listed = tools.run("kafka-topics", "--list").stdout.split()
    expect(TOPIC in listed, f"{TOPIC} listed", " ".join(listed))
    tools.run("kafka-topics", "--alter", "--topic", TOPIC, "--partitions", "4")
    described = tools.run("kafka-topics", "--describe", "--topic", TOPIC).stdout
    expect("PartitionCount: 4" in described, "4 partitions after --alter", described)
    expect("retention.ms=3600000" in described, "its retention.ms override", described)
    partitions = [line for line in described.splitlines() if "\tPartition: " in line]
    expect(
        len(partitions) == 4 and all("Leader: " in p for p in partitions), "4 leaders", described
    )


def check_topic_configs(tools: ToolClient) -> None:
    tools.run(
        "kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", TOPIC,
        "--add-config", "segment.ms=600000,min.insync.replicas=1",
        "--delete-config", "flush.ms",
    )  # fmt: skip
    out = tools.run(
        "kafka-configs", "--describe", "--entity-type", "topics", "--entity-name", TOPIC
    ).stdout
    expect("segment.ms=600000" in out and "min.insync.replicas=1" in out, "the new configs", out)
    expect("flush.ms=" not in out, "flush.ms deleted", out)
    everything = tools.run(
        "kafka-configs", "--describe", "--all", "--entity-type", "topics", "--entity-name", TOPIC
    ).stdout
    names = set(re.findall(r"^\s+([a-z.]+)=", everything, re.MULTILINE))
    expect(
        len(names) >= 30 and "max.compaction.lag.ms" in names, "Kafka's topic configs", everything
    )
    # KFS's own: an Iceberg table of the topic, set and shown with Kafka's tool.
    tools.run(
        "kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", TOPIC,
        "--add-config", "kfs.table.enabled=true,kfs.table.partition.by=day(_timestamp)",
    )  # fmt: skip
    out = tools.run(
        "kafka-configs", "--describe", "--entity-type", "topics", "--entity-name", TOPIC
    ).stdout
    expect(
        "kfs.table.enabled=true" in out and "kfs.table.partition.by=day(_timestamp)" in out,
        "the topic's table configs",
        out,
    )
    bad = tools.run(
        "kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", TOPIC,
        "--add-config", "min.cleanable.dirty.ratio=2", check=False,
    )  # fmt: skip
    expect(bad.returncode != 0 and "InvalidConfigurationException" in bad.stderr + bad.stdout,
           "INVALID_CONFIG for a ratio of 2", bad.stderr)  # fmt: skip


def check_broker_configs(tools: ToolClient) -> None:
    out = tools.run(
        "kafka-configs", "--describe", "--all", "--entity-type", "brokers", "--entity-name", "0"
    ).stdout
    expect("message.max.bytes=" in out, "the broker's static configs", out)
    # Dynamic configs: one of this broker's own, and a cluster-wide default.
    broker = ("--entity-type", "brokers", "--entity-name", "0")
    default = ("--entity-type", "brokers", "--entity-default")
    altered = tools.run(
        "kafka-configs", "--alter", *broker, "--add-config", "log.cleaner.threads=2"
    ).stdout
    expect("Completed updating config for broker 0." in altered, "the broker's change", altered)
    tools.run("kafka-configs", "--alter", *default, "--add-config", "log.retention.ms=86400000")
    own = tools.run("kafka-configs", "--describe", *broker).stdout
    expect(
        "Dynamic configs for broker 0 are:" in own
        and "log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
        "log.cleaner.threads=2, DEFAULT_CONFIG:log.cleaner.threads=1}"
        in own,
        "the broker's dynamic config and its synonyms",
        own,
    )
    defaults = tools.run("kafka-configs", "--describe", *default).stdout
    expect(
        "log.retention.ms=86400000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=86400000}" in defaults,
        "the cluster default",
        defaults,
    )
    tools.run("kafka-configs", "--alter", *broker, "--delete-config", "log.cleaner.threads")
    tools.run("kafka-configs", "--alter", *default, "--delete-config", "log.retention.ms")
    after = tools.run("kafka-configs", "--describe", *broker).stdout
    expect("log.cleaner.threads" not in after, "the broker's config deleted", after)


def check_broker_loggers(tools: ToolClient) -> None:
    logger = "kfs_core.server.apis.topics"
    described = tools.run(
        "kafka-configs", "--describe", "--entity-type", "broker-loggers", "--entity-name", "0"
    ).stdout
    expect(f"{logger}=INFO" in described and "root=INFO" in described, "the loggers", described)
    tools.run(
        "kafka-configs", "--alter", "--entity-type", "broker-loggers", "--entity-name", "0",
        "--add-config", f"{logger}=DEBUG",
    )  # fmt: skip
    after = tools.run(
        "kafka-configs", "--describe", "--entity-type", "broker-loggers", "--entity-name", "0"
    ).stdout
    expect(f"{logger}=DEBUG" in after, "the level changed", after)
    tools.run(
        "kafka-configs", "--alter", "--entity-type", "broker-loggers", "--entity-name", "0",
        "--delete-config", logger,
    )  # fmt: skip


def check_console_round_trip(tools: ToolClient) -> None:
    lines = "".join(f"{headers}\t{key}:{value}\n" for headers, key, value in RECORDS)
    tools.run(
        "kafka-console-producer", "--topic", TOPIC,
        "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
        "--reader-property", "parse.headers=true",
        "--producer-property", "acks=all", "--producer-property", "partitioner.class="
        "org.apache.kafka.clients.producer.RoundRobinPartitioner",
        stdin=lines,
    )  # fmt: skip
    out = tools.run(
        "kafka-console-consumer", "--topic", TOPIC, "--from-beginning", "--group", GROUP,
        "--max-messages", str(len(RECORDS)), "--timeout-ms", "30000",
        "--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
    ).stdout  # fmt: skip
    got = sorted(tuple(line.split("\t")) for line in out.splitlines() if line.count("\t") == 2)
    expect(got == sorted(RECORDS), f"the {len(RECORDS)} records with keys and headers", out)


def _group_rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.startswith(GROUP)]


def check_consumer_groups(tools: ToolClient) -> None:
    listed = tools.run("kafka-consumer-groups", "--list").stdout.split()
    expect(GROUP in listed, f"{GROUP} listed", " ".join(listed))
    described = tools.run("kafka-consumer-groups", "--describe", "--group", GROUP).stdout
    rows = _group_rows(described)  # GROUP TOPIC PARTITION CURRENT LOG-END LAG ...
    expect(len(rows) == 4 and all(r[5] == "0" for r in rows), "4 partitions at lag 0", described)
    expect(sum(int(r[4]) for r in rows) == len(RECORDS), "the log-end offsets", described)
    tools.run(
        "kafka-consumer-groups", "--reset-offsets", "--group", GROUP, "--topic", TOPIC,
        "--to-earliest", "--execute",
    )  # fmt: skip
    reset = _group_rows(tools.run("kafka-consumer-groups", "--describe", "--group", GROUP).stdout)
    expect(sum(int(r[5]) for r in reset) == len(RECORDS), "the whole topic as lag", str(reset))
    deleted = tools.run("kafka-consumer-groups", "--delete", "--group", GROUP).stdout
    expect("successful" in deleted, "the group deleted", deleted)
    gone = tools.run("kafka-consumer-groups", "--list").stdout.split()
    expect(GROUP not in gone, f"{GROUP} gone", " ".join(gone))


def _offsets(tools: ToolClient, *args: str) -> dict[int, int]:
    out = tools.run("kafka-get-offsets", "--topic", TOPIC, *args).stdout
    return {int(p): int(o) for _, p, o in (line.rsplit(":", 2) for line in out.split())}


def check_offsets(tools: ToolClient) -> None:
    latest = _offsets(tools, "--time", "-1")
    expect(sum(latest.values()) == len(RECORDS) and len(latest) == 4, "latest offsets", str(latest))
    expect(set(_offsets(tools, "--time", "-2").values()) == {0}, "earliest 0", str(latest))
    newest = _offsets(tools, "--time", "-3")  # KIP-734: the record with the max timestamp
    expect(
        all(newest.get(p, -1) == o - 1 for p, o in latest.items() if o),
        "max-timestamp",
        str(newest),
    )
    future = _offsets(tools, "--time", str(int(time.time() * 1000) + 3_600_000))
    expect(future == {}, "nothing at a future time", str(future))


def check_delete_records(tools: ToolClient) -> None:
    latest = _offsets(tools, "--time", "-1")
    partition = next(p for p, o in sorted(latest.items()) if o > 0)
    plan = tools.scratch / "delete-records.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": partition, "offset": 1}]}))  # fmt: skip
    out = tools.run("kafka-delete-records", "--offset-json-file", str(plan)).stdout
    expect(f"partition: {TOPIC}-{partition}\tlow_watermark: 1" in out, "low watermark 1", out)
    expect(_offsets(tools, "--time", "-2")[partition] == 1, "earliest moved to 1", out)


def check_log_dirs(tools: ToolClient) -> None:
    out = tools.run("kafka-log-dirs", "--describe", "--topic-list", TOPIC).stdout
    report = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    partitions = {
        p["partition"] for b in report["brokers"] for d in b["logDirs"] for p in d["partitions"]
    }
    expect({f"{TOPIC}-{i}" for i in range(4)} <= partitions, "the topic's partitions", out)


def check_perf_tests(tools: ToolClient) -> None:
    topic = f"{TOPIC}-perf"
    produced = tools.run(
        "kafka-producer-perf-test", "--topic", topic, "--num-records", "2000",
        "--record-size", "1024", "--throughput", "-1", "--command-property", "acks=all",
    ).stdout  # fmt: skip
    expect("2000 records sent" in produced, "2000 records sent", produced)
    consumed = tools.run(
        "kafka-consumer-perf-test", "--topic", topic, "--num-records", "2000", "--timeout", "30000"
    ).stdout
    row = consumed.strip().splitlines()[-1].split(", ")
    expect(len(row) >= 5 and row[4] == "2000", "2000 records consumed", consumed)


def check_transactions(tools: ToolClient) -> None:
    topic, txn = f"{TOPIC}-txn", "compat-tools-txn"
    tools.run(
        "kafka-producer-perf-test", "--topic", topic, "--num-records", "500",
        "--record-size", "100", "--throughput", "-1", "--transactional-id", txn,
        "--transaction-duration-ms", "100",
    )  # fmt: skip
    listed = tools.run("kafka-transactions", "list").stdout
    expect(any(line.split()[:1] == [txn] for line in listed.splitlines()), f"{txn} listed", listed)
    described = tools.run("kafka-transactions", "describe", "--transactional-id", txn).stdout
    expect("CompleteCommit" in described, "its last transaction committed", described)
    producers = tools.run(
        "kafka-transactions", "describe-producers", "--topic", topic, "--partition", "0"
    ).stdout
    expect(len(producers.strip().splitlines()) == 2, "one producer of the partition", producers)
    hanging = tools.run("kafka-transactions", "find-hanging", "--broker-id", "0").stdout
    expect(txn not in hanging, "no hanging transaction", hanging)


def check_acls(tools: ToolClient) -> None:
    principal = "User:compat-reader"
    tools.run(
        "kafka-acls", "--add", "--allow-principal", principal, "--operation", "Read",
        "--topic", TOPIC, "--group", GROUP,
    )  # fmt: skip
    out = tools.run("kafka-acls", "--list", "--topic", TOPIC).stdout
    expect(principal in out and "operation=READ" in out, "the READ ACL listed", out)
    tools.run(
        "kafka-acls", "--remove", "--force", "--allow-principal", principal,
        "--operation", "Read", "--topic", TOPIC,
    )  # fmt: skip
    after = tools.run("kafka-acls", "--list", "--topic", TOPIC).stdout
    expect(principal not in after, "the ACL removed", after)


def check_acls_need_an_authorizer(tools: ToolClient) -> None:
    out = tools.run("kafka-acls", "--list", check=False)
    expect(out.returncode != 0 and "SecurityDisabledException" in out.stdout + out.stderr,
           "SecurityDisabledException, as Kafka without an authorizer", out.stderr)  # fmt: skip


def check_scram_credentials(tools: ToolClient) -> None:
    out = tools.run(
        "kafka-configs", "--alter", "--entity-type", "users", "--entity-name", "compat-bob",
        "--add-config", "SCRAM-SHA-256=[iterations=8192,password=bob-secret]",
    ).stdout  # fmt: skip
    expect("Completed updating config for user compat-bob." in out, "the credential set", out)
    described = tools.run(
        "kafka-configs", "--describe", "--entity-type", "users", "--entity-name", "compat-bob"
    ).stdout
    expect("SCRAM-SHA-256=iterations=8192" in described, "the credential described", described)


def check_features(tools: ToolClient) -> None:
    out = tools.run("kafka-features", "describe").stdout
    expect("Feature: " in out, "feature levels", out)


def check_metadata_quorum(tools: ToolClient) -> None:
    out = tools.run("kafka-metadata-quorum", "describe", "--status").stdout
    expect("LeaderId:" in out, "the quorum's status", out)


CHECKS: Sequence[Check] = (
    Check("kafka-broker-api-versions", check_api_versions),
    Check("kafka-topics", check_topics),
    Check("kafka-configs topics", check_topic_configs),
    Check("kafka-configs brokers", check_broker_configs),
    Check("kafka-configs broker-loggers", check_broker_loggers),
    Check("kafka-console-producer/consumer", check_console_round_trip),
    Check("kafka-consumer-groups", check_consumer_groups),
    Check("kafka-get-offsets", check_offsets),
    Check("kafka-delete-records", check_delete_records),
    Check("kafka-log-dirs", check_log_dirs),
    Check("kafka-producer/consumer-perf-test", check_perf_tests),
    Check("kafka-transactions", check_transactions),
    Check("kafka-acls", check_acls, needs="authorizer"),
    Check("kafka-acls without an authorizer", check_acls_need_an_authorizer, needs="no-authorizer"),
    Check("kafka-configs users", check_scram_credentials, needs="sasl"),
    Check("kafka-features", check_features),
    Check("kafka-metadata-quorum", check_metadata_quorum),
)


def run_kafka_tools(
    tools: ToolClient, *, suite: str, kinds: frozenset[str], only: Sequence[str] = ()
) -> SuiteResult:
    """Run the checks whose ``needs`` is in ``kinds`` (``only``: those names) in order."""
    result = SuiteResult(suite)
    started = time.monotonic()
    for check in CHECKS:
        if only and check.name not in only:
            continue
        if check.needs not in kinds:
            continue
        try:
            check.run(tools)
        except (AssertionError, subprocess.SubprocessError, OSError, ValueError, KeyError) as exc:
            result.outcomes.append(Outcome(check.name, "failed", f"{type(exc).__name__}: {exc}"))
        else:
            result.outcomes.append(Outcome(check.name, "passed"))
    result.seconds = time.monotonic() - started
    return result
