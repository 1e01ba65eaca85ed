"""Run the fault campaigns' long forms and print one table (``make soak``).

    python -m soak [--cycles 100] [--seed N] [--wal-gib 1] [--maintenance-rounds 20] [--fuzz-cases 50000] [--skip-decoder-fuzz]
                   [--failover-cycles 100] [--failover-pauses 5] [--network-cuts 10] [--failover-only] [--maintenance-move-rounds 10]
                   [--eos-cycles 100]
                   [--only CAMPAIGN ...]

- kill -9 cycles of a real `kfs serve` under load, in ``cautious`` and
  ``normal`` mode, over the local store and over S3 on a moto server;
- exactly-once: a transactional consume-transform-produce app through kill
  -9 of the daemon and crashes of its own, each input record's output once;
- failover of three ``store``-mode daemons sharing a namespace: kill -9,
  SIGSTOP past the session timeout and a rolling restart on the local store,
  kill -9 on S3, each timed until every partition is served again; and
  kill -9 then restart of one of three ``cautious`` daemons (its local WAL
  alone holds what it acknowledged last);
- network cuts of one of three ``store``-mode daemons on S3, run in a
  network namespace of its own: its path to the store, or to its clients,
  cut with blackhole routes and restored;
- object-store faults (errors, slow responses, reset uploads, a 2-minute
  outage) through a fault proxy in front of the moto server, under load;
- compaction, retention, checkpoint and index_rebuild in rounds (and two at
  once) against a live daemon on a delete and a compact topic;
- the same jobs while partitions move between three ``store``-mode daemons:
  a daemon killed (kill -9) or stopped inside each compaction pass, its
  partitions back by hand-over while compaction and checkpoints run;
- protocol fuzzing of a live daemon (every API key and version, mutated
  bodies, frame abuse, slow-loris and 3,000 idle connections) while a
  producer and a consumer work;
- the restart of a daemon whose WAL holds ``--wal-gib`` GiB, timed to ready;
- the decoder fuzzing (``tests/fuzz``) at its soak size.

Every randomised campaign prints its seed; ``--seed`` replays a run.  The
exit status is 1 if any campaign lost, duplicated or changed a record or
reported a problem.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from soak import (
    crash_cycles,
    exactly_once,
    failover,
    maintenance_failover,
    maintenance_live,
    network_cuts,
    protocol_fuzz,
    store_faults,
    wal_recovery,
)
from soak.fault_proxy import FaultProxy
from soak.report import Row, format_table
from testkit.daemon import DaemonFactory
from testkit.moto_s3 import moto_server

ROOT = Path(__file__).resolve().parent.parent
#: The campaigns, in the order they run; ``--only`` names some of them.
CAMPAIGNS = (
    "failover",
    "network-cuts",
    "crash-cycles",
    "exactly-once",
    "store-faults",
    "maintenance",
    "maintenance-move",
    "protocol-fuzz",
    "wal-recovery",
    "decoder-fuzz",
)
#: What ``--failover-only`` runs.
FAILOVER_CAMPAIGNS = ("failover", "network-cuts")


def _s3_store(endpoint: str) -> dict[str, str]:
    import boto3

    bucket = f"kfs-soak-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return {"store_url": f"s3://{bucket}/kfs", "s3_endpoint_url": endpoint}


def store_fault_row(factory: DaemonFactory, endpoint: str, seed: int) -> Row:
    """The object-store faults at full length, through a proxy in front of the moto server."""
    store = _s3_store(endpoint)
    pool = 32 << 20
    with FaultProxy(endpoint, seed=seed) as proxy:
        daemon = factory.start(
            name="store-faults",
            store_url=store["store_url"],
            s3_endpoint_url=proxy.url,
            extra_args=store_faults.daemon_args(pool),
        )
        row, _ = store_faults.run(
            daemon,
            proxy,
            store_url=store["store_url"],
            moto_endpoint=endpoint,
            pool_bytes=pool,
            scale=1.0,
            seed=seed,
            progress=lambda line: print(f"  store faults: {line}", flush=True),
        )
        daemon.kill()
    print(format_table([row]), flush=True)
    return row


def maintenance_row(factory: DaemonFactory, rounds: int, seed: int) -> Row:
    """Every mutating job, in rounds and two at once, against a live daemon (local store)."""
    from spark_jobs.common import get_spark  # the jobs' own session: local, loopback only

    spark = get_spark("kfs-soak", "local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        daemon = factory.start(name="maintained", extra_args=maintenance_live.daemon_args())
        row = maintenance_live.run(
            daemon,
            spark,
            rounds=rounds,
            seed=seed,
            store_url=daemon.store_url,
            progress=lambda line: print(f"  maintenance: {line}", flush=True),
        )
        daemon.kill()
    finally:
        spark.stop()
    print(format_table([row]), flush=True)
    return row


def maintenance_failover_row(root: Path, rounds: int, seed: int) -> Row:
    """The jobs while partitions move between three ``store``-mode daemons (local store)."""
    from spark_jobs.common import get_spark

    spark = get_spark("kfs-soak-moves", "local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    factory = DaemonFactory(root / "maintenance-failover")
    try:
        store_url = (factory.root / "store").as_uri()
        cluster = maintenance_failover.start_cluster(factory, store_url=store_url)
        row, _ = maintenance_failover.run(
            cluster,
            spark,
            actions=maintenance_failover.plan(seed, rounds),
            seed=seed,
            store_url=store_url,
            progress=lambda line: print(f"  maintenance while moving: {line}", flush=True),
        )
    finally:
        factory.close()
        spark.stop()
    print(format_table([row]), flush=True)
    return row


def fuzz_row() -> Row:
    """The decoder fuzzing at soak size, as one row (cases: the tests that ran)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/fuzz"],
        cwd=ROOT,
        env={**os.environ, "HYPOTHESIS_PROFILE": "soak"},
        capture_output=True,
        text=True,
        check=False,  # failures become the row's problems
    )
    passed = re.search(r"(\d+) passed", result.stdout)
    row = Row("decoder fuzzing (5,000 a decoder)", "-", int(passed.group(1)) if passed else 0)
    if result.returncode != 0:
        row.problems.append(result.stdout.strip().splitlines()[-1])
    return row


def campaigns(only: list[str] | None, failover_only: bool, skip_decoder_fuzz: bool) -> set[str]:
    """The campaigns a run takes: those named by ``--only``, else the failover ones or all."""
    chosen = set(only or (FAILOVER_CAMPAIGNS if failover_only else CAMPAIGNS))
    if skip_decoder_fuzz:
        chosen.discard("decoder-fuzz")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=100, help="kill -9 cycles per row")
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    parser.add_argument("--wal-gib", type=float, default=1.0, help="WAL size for the recovery")
    parser.add_argument(
        "--maintenance-rounds", type=int, default=20, help="rounds of jobs against a live daemon"
    )
    parser.add_argument(
        "--fuzz-cases", type=int, default=50_000, help="requests sent to the live daemon"
    )
    parser.add_argument(
        "--skip-decoder-fuzz", action="store_true", help="leave out the decoder fuzzing"
    )
    parser.add_argument(
        "--failover-cycles",
        type=int,
        default=100,
        help="kill -9 cycles of the failover campaign on the local store (a quarter on S3, "
        "a quarter of cautious crashes)",
    )
    parser.add_argument(
        "--failover-pauses", type=int, default=5, help="SIGSTOP cycles of the failover campaign"
    )
    parser.add_argument(
        "--network-cuts",
        type=int,
        default=10,
        help="cycles of each network cut (store, clients) of a daemon in a network namespace",
    )
    parser.add_argument(
        "--failover-only",
        action="store_true",
        help="run only the failover campaigns (with the network cuts)",
    )
    parser.add_argument(
        "--eos-cycles",
        type=int,
        default=100,
        help="faults (kill -9 of the daemon, a crash of the app) of the exactly-once campaign",
    )
    parser.add_argument(
        "--maintenance-move-rounds",
        type=int,
        default=10,
        help="rounds of jobs with a partition moved between daemons inside each",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=CAMPAIGNS,
        metavar="CAMPAIGN",
        help=f"run only this campaign (repeatable): {', '.join(CAMPAIGNS)}",
    )
    args = parser.parse_args(argv)
    chosen = campaigns(args.only, args.failover_only, args.skip_decoder_fuzz)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}", flush=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="kfs-soak-") as tmp, moto_server() as endpoint:
        factory = DaemonFactory(Path(tmp))
        try:
            if "failover" in chosen:
                for row in failover.rows(
                    Path(tmp),
                    s3_store=lambda: _s3_store(endpoint),
                    kills=args.failover_cycles,
                    s3_kills=max(1, args.failover_cycles // 4),
                    pauses=args.failover_pauses,
                    rolling=1,
                    seed=seed,
                    crashes=max(1, args.failover_cycles // 4),
                    progress=lambda line: print(f"  failover {line}", flush=True),
                ):
                    rows.append(row)
                    print(format_table([row]), flush=True)
            if "network-cuts" in chosen:
                for row in network_cuts.rows(
                    Path(tmp),
                    store_cuts=args.network_cuts,
                    client_cuts=args.network_cuts,
                    seed=seed,
                    progress=lambda line: print(f"  network cuts: {line}", flush=True),
                ):
                    rows.append(row)
                    print(format_table([row]), flush=True)
            for backend in ("local", "s3") if "crash-cycles" in chosen else ():
                for mode in ("cautious", "normal"):
                    store = _s3_store(endpoint) if backend == "s3" else {}
                    daemon = factory.start(
                        name=f"cycles-{backend}-{mode}",
                        extra_args=[*crash_cycles.DAEMON_ARGS, "--durability", mode],
                        store_url=store.get("store_url"),
                        s3_endpoint_url=store.get("s3_endpoint_url"),
                    )

                    def progress(line: str, b: str = backend, m: str = mode) -> None:
                        print(f"  {b} {m}: {line}", flush=True)

                    row = crash_cycles.run(
                        daemon,
                        cycles=args.cycles,
                        seed=seed,
                        store=backend,
                        mode=mode,
                        progress=progress,
                    )
                    daemon.kill()
                    rows.append(row)
                    print(format_table([row]), flush=True)
            if "exactly-once" in chosen and args.eos_cycles > 0:
                daemon = factory.start(
                    name="exactly-once", extra_args=["--flush-interval-ms", "50"]
                )
                row = exactly_once.run(
                    daemon,
                    cycles=args.eos_cycles,
                    seed=seed,
                    store="local",
                    progress=lambda line: print(f"  exactly-once {line}", flush=True),
                )
                daemon.kill()
                rows.append(row)
                print(format_table([row]), flush=True)
            if "store-faults" in chosen:
                rows.append(store_fault_row(factory, endpoint, seed))
            if "maintenance" in chosen:
                rows.append(maintenance_row(factory, args.maintenance_rounds, seed))
            if "maintenance-move" in chosen and args.maintenance_move_rounds > 0:
                rows.append(maintenance_failover_row(Path(tmp), args.maintenance_move_rounds, seed))
            if "protocol-fuzz" in chosen:
                daemon = factory.start(name="fuzzed", extra_args=protocol_fuzz.daemon_args())
                row, outcomes = protocol_fuzz.run(
                    daemon,
                    cases=args.fuzz_cases,
                    seed=seed,
                    memory_bound=protocol_fuzz.MEMORY_BOUND,
                    idle=3000,
                    loris=100,
                    progress=lambda line: print(f"  protocol fuzzing: {line}", flush=True),
                )
                daemon.kill()
                rows.append(row)
                print(format_table([row]) + "\n" + outcomes.line(), flush=True)
            if "wal-recovery" in chosen:
                wal_bytes = int(args.wal_gib * (1 << 30))
                daemon = factory.start(
                    name="wal-recovery", extra_args=wal_recovery.daemon_args(wal_bytes)
                )
                rows.append(wal_recovery.run(daemon, wal_bytes=wal_bytes, seed=seed, store="local"))
                daemon.kill()
        finally:
            factory.close()
    if "decoder-fuzz" in chosen:
        rows.append(fuzz_row())
    return _finish(rows)


def _finish(rows: list[Row]) -> int:
    """Print the whole table; the exit status: 1 if any row failed."""
    print()
    print(format_table(rows))
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
