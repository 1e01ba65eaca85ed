"""``python -m compat``: every compatibility suite against fresh daemons, one table (`make compat`).

Starts two daemons (`compat.daemons`: PLAINTEXT, and SASL_SSL with SCRAM and
ACLs), runs the suites named by ``--suites`` against them, prints the table
of `compat.suites.render_table` and every surprise (a failure the expected
list does not name, or a listed test that passed), and exits 1 if there was
one.  Each suite's output goes under ``--log-dir``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from compat import connect, franz_go, java_client, librdkafka, stream_apps
from compat.daemons import SaslSsl, plaintext_daemon, sasl_ssl_daemon
from compat.kafka_tools import ToolClient, run_kafka_tools
from compat.suites import SuiteResult, judge, load_expected, render_table
from testkit.daemon import Daemon, DaemonFactory
from testkit.pki import make_pki

# The last two restart the PLAINTEXT daemon (stream-apps with kill -9).
SUITES = ("kafka-tools", "java-client", "franz-go", "librdkafka", "stream-apps", "connect")
LIBRDKAFKA_TIMEOUT_S = 1800.0
DEFAULT_KGO_RECORDS = 50_000
KGO_TIMEOUT_S = 1200

Runner = Callable[[Daemon, SaslSsl, Path, argparse.Namespace], list[SuiteResult]]


def _kafka_tools(
    plain: Daemon, secured: SaslSsl, logs: Path, _: argparse.Namespace
) -> list[SuiteResult]:
    results = []
    for suite, tools, kinds in (
        (
            "kafka tools PLAINTEXT",
            ToolClient(plain.bootstrap, scratch=logs),
            {"any", "no-authorizer"},
        ),
        (
            "kafka tools SASL_SSL",
            ToolClient(secured.bootstrap, scratch=logs, command_config=secured.properties),
            {"any", "authorizer", "sasl"},
        ),
    ):
        results.append(run_kafka_tools(tools, suite=suite, kinds=frozenset(kinds)))
        (logs / f"{suite.replace(' ', '-')}.log").write_text("\n".join(tools.log))
    return results


def _franz_go(plain: Daemon, _: SaslSsl, logs: Path, args: argparse.Namespace) -> list[SuiteResult]:
    source = franz_go.fetch_source()
    return [
        franz_go.run_kgo(
            source,
            plain.bootstrap,
            records=args.kgo_records,
            timeout_s=KGO_TIMEOUT_S,
            log=logs / "franz-go-kgo.log",
        )
    ]


def _java_client(
    plain: Daemon, secured: SaslSsl, logs: Path, _: argparse.Namespace
) -> list[SuiteResult]:
    results = []
    for listener, bootstrap, properties in (
        ("PLAINTEXT", plain.bootstrap, None),
        ("SASL_SSL", secured.bootstrap, secured.properties),
    ):
        result = java_client.run_java_client(
            bootstrap, properties=properties, log=logs / f"java-client-{listener}.log"
        )
        result.suite = f"{result.suite} {listener}"
        results.append(result)
    return results


def _librdkafka(_: Daemon, __: SaslSsl, logs: Path, args: argparse.Namespace) -> list[SuiteResult]:
    # Its tests want daemons of their own (auto-creating topics, and not).
    factory = DaemonFactory(Path(tempfile.mkdtemp(prefix="kfs-librdkafka-")))
    try:
        runner = librdkafka.fetch_and_build()
        return [librdkafka.run_scenarios(runner, factory, None, LIBRDKAFKA_TIMEOUT_S, log_dir=logs)]
    finally:
        factory.close()


def _connect(plain: Daemon, _: SaslSsl, logs: Path, __: argparse.Namespace) -> list[SuiteResult]:
    def restart() -> None:
        plain.restart()

    return [connect.run_connect(plain.bootstrap, logs / "connect", restart)]


def _stream_apps(
    plain: Daemon, _: SaslSsl, logs: Path, __: argparse.Namespace
) -> list[SuiteResult]:
    def kill_and_start() -> None:
        plain.kill()
        plain.start()

    return [stream_apps.run_stream_apps(plain.bootstrap, logs / "stream-apps", kill_and_start)]


RUNNERS: dict[str, Runner] = {
    "kafka-tools": _kafka_tools,
    "java-client": _java_client,
    "franz-go": _franz_go,
    "librdkafka": _librdkafka,
    "stream-apps": _stream_apps,
    "connect": _connect,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m compat",
        description="Every compatibility suite against fresh daemons, one table (make compat).",
    )
    parser.add_argument(
        "--suites",
        default=",".join(SUITES),
        help=f"comma-separated, of {', '.join(SUITES)} (default: all)",
    )
    parser.add_argument(
        "--kgo-records",
        type=int,
        default=DEFAULT_KGO_RECORDS,
        help=f"KGO_TEST_RECORDS, records per franz-go ETL test (default {DEFAULT_KGO_RECORDS})",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=Path("test-artifacts/compat"),
        help="where each suite's output goes (default test-artifacts/compat)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    chosen = [name.strip() for name in args.suites.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(SUITES))
    if unknown:
        print(
            f"unknown suite(s): {', '.join(unknown)}; known: {', '.join(SUITES)}", file=sys.stderr
        )
        return 2
    expected = load_expected()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    results: list[SuiteResult] = []
    with tempfile.TemporaryDirectory(prefix="kfs-compat-") as scratch:
        root = Path(scratch)
        factory = DaemonFactory(root)
        try:
            plain = plaintext_daemon(factory)
            secured = sasl_ssl_daemon(factory, make_pki(root / "pki"), root)
            for name in sorted(chosen, key=SUITES.index):
                ran = RUNNERS[name](plain, secured, args.log_dir, args)
                print("\n".join(render_table(ran, expected).splitlines()[2:]), flush=True)
                results += ran
        finally:
            factory.close()
    print()
    print(render_table(results, expected))
    surprises = judge(results, expected)
    for line in surprises:
        print(f"SURPRISE: {line}")
    known = [
        f"  {r.suite} {o.test}: {expected[(r.suite, o.test)]}"
        for r in results
        for o in r.outcomes
        if o.status == "failed" and (r.suite, o.test) in expected
    ]
    if known:
        print("\nexpected failures:\n" + "\n".join(known))
    return 1 if surprises else 0


if __name__ == "__main__":
    sys.exit(main())
