"""The tables job: append each table-enabled topic's new records to its Iceberg table.

Per topic with ``kfs.table.enabled=true`` (`TableTopic`), commit by commit:

1. Plan on the driver: the table's covered offsets (`kfs_core.tables.covered_offsets`)
   against each partition's log start and last stable offset; at most
   ``--max-records`` per partition per commit.
2. Read the range with the ``kfs`` data source (`spark_jobs.topic_source`),
   ``read_committed``: aborted records and markers never reach a table.
3. Turn values into rows (`spark_jobs.tables.schema`), evolving the schema.
4. One Iceberg transaction: schema and partition spec changes, for a
   compacted topic the delete of every key the range holds, the append, and
   the snapshot summary naming the range.  A concurrent commit fails it
   (the catalog's compare-and-swap); the job reloads the table and plans
   again, so a range lands once.
5. The snapshot's data-quality report (`spark_jobs.tables.report`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kfs_core.catalog import PartitionField, TopicConfig, TopicRegistry
from kfs_core.reports import TABLES_JOB
from kfs_core.tables import (
    DEFAULT_CATALOG,
    SUMMARY_DEAD_LETTERS,
    SUMMARY_NEXT_OFFSETS,
    SUMMARY_OFFSETS,
    SUMMARY_REPORT,
    SUMMARY_SCHEMA_CHANGES,
    SUMMARY_TOPIC,
    covered_offsets,
    open_catalog,
    table_identifier,
    table_location,
)
from spark_jobs import common
from spark_jobs.common import JobContext, JobOptions, JobResult, UsageError
from spark_jobs.tables import report as quality
from spark_jobs.tables.schema import (
    Rows,
    Struct,
    added_columns,
    arrow_schema,
    rows_for,
    settled,
    shape_of,
)
from spark_jobs.topic_source import SOURCE_NAME, Bounds, SourceOptions, partition_plans

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table, Transaction

JOB = TABLES_JOB
#: Records per partition per commit: every row of a commit passes through the driver.
DEFAULT_MAX_RECORDS = 100_000
DEFAULT_MAX_COMMITS = 20
#: Commits lost to a concurrent writer before a topic's turn ends (the next run goes on).
MAX_CONFLICTS = 5


def build_parser() -> argparse.ArgumentParser:
    from spark_jobs.tables import __doc__ as package_doc

    parser = common.job_parser(JOB, package_doc)
    parser.add_argument(
        "--catalog",
        default=DEFAULT_CATALOG,
        help="pyiceberg catalog name: from ~/.pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__* "
        "when defined there, else the embedded SQLite catalog (default 'kfs')",
    )
    parser.add_argument(
        "--max-records",
        type=_positive,
        default=DEFAULT_MAX_RECORDS,
        help=f"records per partition per commit (default {DEFAULT_MAX_RECORDS})",
    )
    parser.add_argument(
        "--max-commits",
        type=_positive,
        default=DEFAULT_MAX_COMMITS,
        help=f"commits per topic per run; the next run goes on (default {DEFAULT_MAX_COMMITS})",
    )
    parser.add_argument(
        "--no-report",
        dest="report",
        action="store_false",
        help="commit without the data-quality report (and its Data Docs)",
    )
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


@dataclass(frozen=True)
class TablesOptions(JobOptions):
    """`JobOptions` plus the catalog name and the size of a commit."""

    catalog: str = DEFAULT_CATALOG
    max_records: int = DEFAULT_MAX_RECORDS
    max_commits: int = DEFAULT_MAX_COMMITS
    report: bool = True


@dataclass(frozen=True)
class TableTopic:
    """A topic whose table the job keeps: its name, partitions and table configs."""

    name: str
    partitions: int
    compacted: bool
    partition_by: tuple[PartitionField, ...]

    @classmethod
    def of(cls, name: str, partitions: int, config: TopicConfig) -> TableTopic:
        return cls(name, partitions, config.compacted, config.kfs_table_partition_by)


@dataclass
class TopicOutcome:
    """What one run did for one topic."""

    topic: str
    table: str
    commits: int = 0
    records: int = 0
    rows: int = 0
    dead_letters: int = 0
    lag: int = 0
    conflicts: int = 0
    gaps: list[str] = field(default_factory=list)  # offsets deleted before the table got them
    schema_changes: list[str] = field(default_factory=list)
    reports: list[str] = field(default_factory=list)
    failed_reports: int = 0
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run(
    options: TablesOptions | argparse.Namespace | Sequence[str] | None = None,
    spark: Any = None,
) -> dict[str, Any]:
    """Bring every table-enabled topic's table up to date; the run summary."""
    opts = common.coerce_options(options, build_parser(), TablesOptions)
    return common.execute(JOB, opts, lambda ctx: _tables_job(ctx, opts), spark)


def table_topics(ctx: JobContext, wanted: Sequence[str] | None) -> list[TableTopic]:
    """The topics (all, or ``wanted``) whose ``kfs.table.enabled`` is true."""
    registry = TopicRegistry(ctx.store, ctx.namespace)
    names = list(wanted) if wanted else registry.list_topics()
    topics = []
    for name in names:
        description = registry.describe(name)  # UnknownTopic for a name asked for: exit 2
        if description.config.kfs_table_enabled:
            topics.append(TableTopic.of(name, description.partitions, description.config))
    return topics


def _tables_job(ctx: JobContext, options: TablesOptions) -> JobResult:
    with ctx.phase("plan"):
        topics = table_topics(ctx, options.topics)
    if not topics:
        return JobResult(common.STATUS_OK, "no topic has kfs.table.enabled=true", {"topics": 0})
    try:
        catalog = open_catalog(
            options.store_url,
            options.namespace,
            name=options.catalog,
            s3_endpoint_url=options.s3_endpoint_url,
        )
    except Exception as exc:
        raise UsageError(f"table catalog {options.catalog!r}: {exc}") from exc
    outcomes = []
    for topic in topics:
        outcome = TopicOutcome(topic.name, ".".join(table_identifier(ctx.namespace, topic.name)))
        try:
            _sync_topic(ctx, options, catalog, topic, outcome)
        except Exception as exc:  # noqa: BLE001 - one topic's failure is reported, the rest go on
            outcome.error = f"{type(exc).__name__}: {exc}"
        outcomes.append(outcome)
        if ctx.check_paused():
            break
    return _result(outcomes, options)


def _result(outcomes: Sequence[TopicOutcome], options: TablesOptions) -> JobResult:
    counts = {
        "topics": len(outcomes),
        "commits": sum(o.commits for o in outcomes),
        "records": sum(o.records for o in outcomes),
        "rows": sum(o.rows for o in outcomes),
        "dead_letters": sum(o.dead_letters for o in outcomes),
        "lag": sum(o.lag for o in outcomes),
        "failed_topics": sum(1 for o in outcomes if o.error),
        "failed_reports": sum(o.failed_reports for o in outcomes),
    }
    details = {"tables": [o.as_dict() for o in outcomes]}
    if options.dry_run:
        message = f"would append {counts['lag']} records to {len(outcomes)} table(s) (dry run)"
    else:
        message = (
            f"appended {counts['records']} records to {len(outcomes)} table(s) "
            f"in {counts['commits']} commit(s)"
        )
    if counts["dead_letters"]:
        message += f"; {counts['dead_letters']} dead letters (_error column)"
    if counts["lag"] and not options.dry_run:
        message += f"; {counts['lag']} records still to go"
    failed = [o for o in outcomes if o.error]
    if failed:
        return JobResult(
            common.STATUS_FAILED,
            f"{message}; {len(failed)} table(s) failed ({failed[0].topic}: {failed[0].error})",
            counts,
            details,
        )
    if counts["failed_reports"]:
        message += f"; {counts['failed_reports']} data-quality report(s) with failed expectations"
    return JobResult(common.STATUS_OK, message, counts, details)


# --- one topic ----------------------------------------------------------------------


@dataclass(frozen=True)
class CommitPlan:
    """The offsets one commit covers: ``[start, end)`` per partition, and where all stands."""

    ranges: Mapping[int, tuple[int, int]]
    next_offsets: Mapping[int, int]  # every partition's next offset once this commit lands
    lag: int  # records of the topic past this commit's ends
    gaps: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return all(start >= end for start, end in self.ranges.values())


def plan_commit(
    ends: Mapping[int, tuple[int, int]], covered: Mapping[int, int], max_records: int
) -> CommitPlan:
    """The next commit from each partition's ``(log start, last stable offset)`` and ``covered``.

    A partition whose log start passed what the table holds (retention ran
    ahead of the table) starts at its log start, and the gap is reported.
    """
    ranges: dict[int, tuple[int, int]] = {}
    next_offsets = dict(covered)
    gaps = []
    lag = 0
    for partition, (log_start, stable) in sorted(ends.items()):
        start = covered.get(partition, 0)
        if start < log_start:
            gaps.append(f"partition {partition}: offsets {start}..{log_start - 1}")
            start = log_start
        end = max(start, min(stable, start + max_records))
        ranges[partition] = (start, end)
        next_offsets[partition] = end
        lag += max(0, stable - end)
    return CommitPlan(ranges, next_offsets, lag, tuple(gaps))


def _sync_topic(
    ctx: JobContext,
    options: TablesOptions,
    catalog: Catalog,
    topic: TableTopic,
    outcome: TopicOutcome,
) -> None:
    table = _table(catalog, options, topic)
    while outcome.commits < options.max_commits:
        plan = plan_commit(_partition_ends(ctx, topic), covered_offsets(table), options.max_records)
        outcome.lag = plan.lag
        if plan.empty:
            break
        outcome.lag += sum(end - start for start, end in plan.ranges.values())
        if options.dry_run:
            return
        with ctx.phase("read"):
            records = _read(ctx, options, topic, plan)
        before = shape_of(table.schema().as_arrow())
        with ctx.phase("rows"):
            rows = rows_for(_records(records), before)
        changes = added_columns(before, rows.shape)
        prefix = quality.report_prefix(ctx, table.name()[-1], outcome.commits + outcome.conflicts)
        properties = _summary_properties(topic, rows, plan, changes)
        if options.report:
            properties[SUMMARY_REPORT] = prefix + "report.json"
        with ctx.phase("commit"):
            committed = _commit(table, topic, rows, properties, changed=bool(changes))
        if committed is None:  # a concurrent writer committed first: plan again
            outcome.conflicts += 1
            if outcome.conflicts >= MAX_CONFLICTS:
                break
            table = catalog.load_table(table.name())
            continue
        table = committed
        outcome.commits += 1
        outcome.records += records.num_rows
        outcome.rows += len(rows.merged()) if topic.compacted else len(rows.rows)
        outcome.dead_letters += rows.dead_letters
        outcome.gaps.extend(plan.gaps)
        outcome.schema_changes.extend(changes)
        outcome.lag = plan.lag
        if options.report:
            with ctx.phase("report"):
                report = quality.report_snapshot(
                    ctx,
                    table,
                    topic.name,
                    rows,
                    plan,
                    changes,
                    prefix=prefix,
                    compacted=topic.compacted,
                )
            outcome.reports.append(report.key)
            outcome.failed_reports += 0 if report.success else 1


def _table(catalog: Catalog, options: TablesOptions, topic: TableTopic) -> Table:
    """The topic's table, created with KFS's columns when it does not exist."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

    identifier = table_identifier(options.namespace, topic.name)
    if catalog.table_exists(identifier):
        return catalog.load_table(identifier)
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(identifier[0])
    try:
        return catalog.create_table(
            identifier,
            schema=arrow_schema(Struct()),
            location=table_location(options.store_url, options.namespace, topic.name),
            properties={SUMMARY_TOPIC: topic.name},
        )
    except TableAlreadyExistsError:  # another run created it meanwhile
        return catalog.load_table(identifier)


def _partition_ends(ctx: JobContext, topic: TableTopic) -> dict[int, tuple[int, int]]:
    """(log start, last stable offset) of every partition, from the catalog (the run's store)."""
    source = SourceOptions(ctx.options.store_url, ctx.namespace, (topic.name,))
    plans = partition_plans(ctx.store, source, Bounds())
    return {p.partition: (p.log_start, p.last_stable) for p in plans}


def _read(ctx: JobContext, options: TablesOptions, topic: TableTopic, plan: CommitPlan) -> pa.Table:
    """The plan's records through the ``kfs`` data source, in (partition, offset) order."""
    from spark_jobs.topic_source import KfsTopicSource

    spark = ctx.spark
    spark.dataSource.register(KfsTopicSource)
    wanted = {p: r for p, r in plan.ranges.items() if r[0] < r[1]}
    reader = spark.read.format(SOURCE_NAME).option("storeUrl", options.store_url)
    if options.s3_endpoint_url:
        reader = reader.option("s3EndpointUrl", options.s3_endpoint_url)
    frame = (
        reader.option("namespace", options.namespace)
        .option("topic", topic.name)
        .option("partitions", ",".join(str(p) for p in sorted(wanted)))
        .option(
            "startingOffsets", json.dumps({topic.name: {str(p): r[0] for p, r in wanted.items()}})
        )
        .option(
            "endingOffsets", json.dumps({topic.name: {str(p): r[1] for p, r in wanted.items()}})
        )
        .option("isolationLevel", "read_committed")
        .load()
        .select("partition", "offset", "timestamp", "key", "value")
    )
    return frame.toArrow().sort_by([("partition", "ascending"), ("offset", "ascending")])


def _records(records: pa.Table) -> Any:
    columns = [
        records.column(n).to_pylist() for n in ("partition", "offset", "timestamp", "key", "value")
    ]
    return zip(*columns, strict=True)


def _summary_properties(
    topic: TableTopic, rows: Rows, plan: CommitPlan, changes: Sequence[str]
) -> dict[str, str]:
    return {
        SUMMARY_TOPIC: topic.name,
        SUMMARY_OFFSETS: json.dumps({str(p): list(r) for p, r in sorted(plan.ranges.items())}),
        SUMMARY_NEXT_OFFSETS: json.dumps({str(p): o for p, o in sorted(plan.next_offsets.items())}),
        SUMMARY_DEAD_LETTERS: str(rows.dead_letters),
        SUMMARY_SCHEMA_CHANGES: json.dumps(list(changes)),
    }


def _commit(
    table: Table, topic: TableTopic, rows: Rows, properties: dict[str, str], *, changed: bool
) -> Table | None:
    """One atomic catalog commit of ``rows``; the table after it, or None if another won."""
    from pyiceberg.exceptions import CommitFailedException

    data = rows.table(rows.merged() if topic.compacted else None)
    try:
        with table.transaction() as tx:
            if changed:
                with tx.update_schema() as update:
                    update.union_by_name(arrow_schema(settled(rows.shape)))
            _evolve_spec(tx, topic.partition_by)
            if topic.compacted:
                _delete_keys(tx, rows)
            tx.append(data, snapshot_properties=properties)
    except CommitFailedException:
        return None
    return table


def _delete_keys(tx: Transaction, rows: Rows) -> None:
    """A compacted topic: the rows of every key the commit holds go (`Rows.merged` replaces them)."""
    from pyiceberg import expressions

    ex: Any = expressions  # its predicates are pydantic models whose __init__ mypy misreads
    keys = rows.keys()
    if keys and tx.table_metadata.current_snapshot() is not None:
        tx.delete(ex.In("_key", sorted(keys)))


def _evolve_spec(tx: Transaction, wanted: Sequence[PartitionField]) -> None:
    """The table's partition spec as ``kfs.table.partition.by`` says, for columns it has."""
    from pyiceberg.transforms import (
        BucketTransform,
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )

    transforms: dict[str, Any] = {
        "identity": lambda f: IdentityTransform(),
        "year": lambda f: YearTransform(),
        "month": lambda f: MonthTransform(),
        "day": lambda f: DayTransform(),
        "hour": lambda f: HourTransform(),
        "bucket": lambda f: BucketTransform(f.width),
        "truncate": lambda f: TruncateTransform(f.width),
    }
    metadata = tx.table_metadata
    schema = metadata.schema()
    columns = {f.name for f in schema.fields}
    current = {
        (schema.find_column_name(f.source_id), str(f.transform)): f.name
        for f in metadata.spec().fields
    }
    desired = {
        (f.column, str(transforms[f.transform](f))): f for f in wanted if f.column in columns
    }
    if set(current) == set(desired):
        return
    with tx.update_spec() as update:
        for key, name in current.items():
            if key not in desired:
                update.remove_field(name)
        for key, spec_field in desired.items():
            if key not in current:
                update.add_field(key[0], transforms[spec_field.transform](spec_field))


def main(argv: Sequence[str] | None = None) -> int:
    return common.main(run, build_parser(), argv)
