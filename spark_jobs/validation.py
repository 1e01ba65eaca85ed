"""Segment validation: check every live segment and index, publish a data-quality report.

Run it with ``spark-submit spark_jobs/validation.py --store-url URL --namespace NS``
(or ``python -m spark_jobs.validation``; flags: `build_parser`).

What is checked, per live segment (in Spark executors, reading through
``kfs_core.storage``):

- the segment object exists (``segment_missing``) and its index exists
  (``index_missing``), as the catalog says they should;
- header: magic, version, codec bits, base offset equal to the object name's
  (``header_ok``); footer: magic (``footer_ok``); the body CRC-32C
  (``body_crc_ok``); every batch's own CRC-32C (``crc_failures`` counts them,
  the walk does not stop at the first);
- the batches can be walked to the footer, offsets strictly increasing
  inside the segment (``batches_ok``; gaps are allowed and counted in
  ``offset_gaps``); header message count, footer last offset and first batch
  agree with the batches (``counts_ok``); the catalog entry's offsets, record
  count and size agree with the object (``catalog_ok``);
- the index opens (magic, version, size, increasing entries) and every entry
  sits on a batch start with that batch's base offset (``index_ok``,
  ``index_problems``);
- transactions (``txn_ok``, ``control_batches``): every control batch is
  transactional and holds one marker (key version 0, type abort or commit;
  value version 0 and the coordinator epoch); each aborted transaction the
  catalog entry lists (``aborted``, what ``read_committed`` reads answer
  from) has its abort marker, of its producer, at its last offset in this
  segment, and starts at or before it; each transaction it lists open at
  the segment's end starts at or before that end.

Per partition, on the driver: adjacent live segments must not overlap
(``overlap_prev``); gaps between them are allowed and counted
(``gap_before``, in offsets).  The partition prefix is listed and every object
no catalog state references (live or tombstoned segment or index; ``_log/``
is the catalog's own) is an orphan row, unless younger than
``--orphan-grace-s`` (an upload whose commit may be under way).

The rows form a table with `RESULT_SCHEMA` (a Spark DataFrame from
`validate`).  A Great Expectations suite (`build_expectations`;
``meta.critical`` marks the critical ones, ``meta.index`` the ones
index_rebuild can repair) runs over the same table as pandas (`rows_pandas`);
the report JSON (per expectation: success, observed value, failing rows;
counts, critical failures, ``index_only_failure``, timings) and GX Data Docs
are uploaded under ``{ns}/_reports/validation/<run-id>/`` (``report.json``,
``data_docs/index.html``), and the run summary to
``{ns}/_reports/validation/<run-id>.json``.  The exit status is non-zero
when an expectation selected by ``--fail-on`` (critical | any | none) fails.

The job never writes anything outside ``{ns}/_reports/validation/``; with
``--dry-run`` it writes only the run summary.

Where the time goes: the checks run at about the page cache's speed, so a
run is mostly fixed costs, and those are overlapped or cut.  One Spark job
checks every segment, in as many tasks as there are slots (`scan_chunks`:
each task costs tens of milliseconds); the partition prefixes are listed on
driver threads meanwhile; Great Expectations is imported and its context,
suite, checkpoint and Data Docs templates prepared on a driver thread
meanwhile too (`PreparedExpectations`, `spark_jobs.validation_docs`); the
suite runs over a pandas table built from the rows the driver holds, with
no round trip through the JVM.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import math
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfs_core.catalog import PartitionState, layout
from kfs_core.errors import CorruptionError, ObjectNotFound
from kfs_core.formats.index import IndexReader
from kfs_core.formats.index_check import check_index
from kfs_core.formats.segment import MAX_SEGMENT_SIZE, SEGMENT_OVERHEAD
from kfs_core.formats.segment_check import SegmentCheck, check_segment_bytes
from kfs_core.records import decode_batch
from kfs_core.records.batch import CONTROL_ABORT, CONTROL_COMMIT, parse_control_key
from kfs_core.reports import VALIDATION_JOB, ValidationReport, validation_report_key
from kfs_core.storage import ObjectStore
from spark_jobs import common
from spark_jobs.common import JobContext, JobOptions, JobResult, SegmentDescriptor

if TYPE_CHECKING:
    import pandas as pd
    from great_expectations.expectations.expectation import Expectation
    from pyspark.sql import DataFrame, SparkSession

JOB = VALIDATION_JOB
FAIL_ON = ("critical", "any", "none")
DEFAULT_ORPHAN_GRACE_S = 600.0
#: Rows with problems kept in the report (all of them are in the DataFrame).
MAX_REPORTED_ROWS = 1000
#: Failing rows listed under each expectation in the report.
MAX_ROWS_PER_EXPECTATION = 100
#: Bytes of segments one scan task reads at most (when slots do not split them finer).
SCAN_CHUNK_BYTES = 1 << 30
#: Driver threads listing partition prefixes (I/O bound: one request per 1000 keys).
LISTING_THREADS = 8

ROW_SEGMENT = "segment"
ROW_ORPHAN = "orphan"

#: One row per live segment plus one per orphan object; None where a check
#: could not run (the segment is missing, or the row is an orphan).
RESULT_SCHEMA = (
    "row_type string, topic string, partition int, key string, index_key string, "
    "base_offset long, last_offset long, catalog_last_offset long, size_bytes long, "
    "index_size_bytes long, record_count long, batch_count long, crc_failures int, "
    "body_crc_ok boolean, header_ok boolean, footer_ok boolean, batches_ok boolean, "
    "counts_ok boolean, catalog_ok boolean, index_ok boolean, index_missing boolean, "
    "index_problems int, index_interval int, segment_missing boolean, "
    "overlap_prev boolean, gap_before long, offset_gaps int, orphan boolean, error string, "
    "control_batches int, txn_ok boolean"
)
COLUMNS = tuple(part.strip().split(" ")[0] for part in RESULT_SCHEMA.split(","))


@dataclass(frozen=True)
class ValidationOptions(JobOptions):
    """The shared flags plus validation's own."""

    fail_on: str = "critical"
    max_orphans: int = 0
    orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S
    max_segment_bytes: int = MAX_SEGMENT_SIZE
    data_docs: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.fail_on not in FAIL_ON:
            raise ValueError(f"fail_on must be one of {FAIL_ON}, got {self.fail_on!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = common.job_parser(JOB, __doc__)
    parser.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        default="critical",
        help="which failed expectations make the exit status non-zero (default critical)",
    )
    parser.add_argument(
        "--max-orphans", type=int, default=0, help="orphan objects tolerated (default 0)"
    )
    parser.add_argument(
        "--orphan-grace-s",
        type=float,
        default=DEFAULT_ORPHAN_GRACE_S,
        help="objects younger than this are uploads in flight, not orphans (default 600)",
    )
    parser.add_argument(
        "--max-segment-bytes",
        type=int,
        default=MAX_SEGMENT_SIZE,
        help="largest acceptable segment object (default 2 GiB - 1)",
    )
    parser.add_argument(
        "--no-data-docs",
        dest="data_docs",
        action="store_false",
        help="skip building Great Expectations Data Docs",
    )
    return parser


# --- per-segment checks (executors) ---------------------------------------------


class _Row:
    """Accumulates one result row and its error messages."""

    def __init__(self, **values: Any) -> None:
        self.values: dict[str, Any] = dict.fromkeys(COLUMNS)
        self.values.update(values)
        self.errors: list[str] = []

    def fail(self, column: str, message: str, value: Any = False) -> None:
        self.values[column] = value
        self.errors.append(message)

    def finish(self) -> dict[str, Any]:
        self.values["error"] = "; ".join(self.errors) if self.errors else None
        return self.values


def check_segment(store: ObjectStore, d: SegmentDescriptor) -> dict[str, Any]:
    """Every per-object check of one live segment and its index; one result row."""
    row = _Row(
        row_type=ROW_SEGMENT,
        topic=d.topic,
        partition=d.partition,
        key=d.key,
        index_key=d.index_key,
        base_offset=d.base_offset,
        last_offset=d.last_offset,
        catalog_last_offset=d.last_offset,
        size_bytes=d.size_bytes,
        segment_missing=False,
        index_missing=False,
        orphan=False,
    )
    name = d.segment_object_key
    data: bytes | None
    try:
        data = store.get(name)
    except ObjectNotFound:
        data = None
        row.fail("segment_missing", f"segment object {name} is missing", True)
    openable = False
    if data is not None:
        openable = _check_segment_bytes(data, name, d, row)
    _check_index_object(store, d, data if openable else None, row)
    return row.finish()


def _check_segment_bytes(data: bytes, name: str, d: SegmentDescriptor, row: _Row) -> bool:
    """The segment's own checks, then the catalog's; True when the index can be checked."""
    check = check_segment_bytes(data, name)
    v = row.values
    v["size_bytes"] = check.size_bytes
    for column in (
        "header_ok",
        "footer_ok",
        "body_crc_ok",
        "batches_ok",
        "counts_ok",
        "crc_failures",
        "batch_count",
        "record_count",
        "offset_gaps",
    ):
        v[column] = getattr(check, column)
    row.errors.extend(check.problems)
    header, last = check.header, check.last_offset
    if header is None:
        return False
    if check.counts_ok is not None:
        v["last_offset"] = last
    catalog: list[str] = []
    if header.base_offset != d.base_offset:
        catalog.append(f"catalog base offset {d.base_offset}, header {header.base_offset}")
    if v["batches_ok"] and last is not None and last != d.last_offset:
        catalog.append(f"catalog last offset {d.last_offset}, segment ends at {last}")
    if v["batches_ok"] and v["record_count"] != d.record_count:
        catalog.append(f"catalog record count {d.record_count}, segment holds {v['record_count']}")
    if len(data) != d.size_bytes:
        catalog.append(f"catalog size {d.size_bytes} bytes, object is {len(data)}")
    v["catalog_ok"] = not catalog
    row.errors.extend(catalog)
    if check.batches_ok:
        _check_transactions(data, check, d, row)
    return check.index_checkable


def _check_transactions(data: bytes, check: SegmentCheck, d: SegmentDescriptor, row: _Row) -> None:
    """Control batches and the catalog's transaction entries of one segment (``txn_ok``)."""
    problems: list[str] = []
    aborts: dict[int, int] = {}  # marker offset -> producer id
    controls = 0
    for batch in check.batches:
        header = batch.header
        if not header.is_control:
            continue
        controls += 1
        where = f"control batch at offset {header.base_offset}"
        if not header.is_transactional:
            problems.append(f"{where} is not transactional")
        try:
            records = decode_batch(data, batch.position, verify_crc=False).records
            if len(records) != 1:
                raise ValueError(f"{len(records)} records, not one marker")
            version, kind = parse_control_key(records[0].key)
            value = records[0].value or b""
            if version != 0 or kind not in (CONTROL_ABORT, CONTROL_COMMIT):
                raise ValueError(f"marker key version {version}, type {kind}")
            if len(value) < 6 or int.from_bytes(value[:2], "big", signed=True) != 0:
                raise ValueError("marker value is not version 0 with a coordinator epoch")
        except (CorruptionError, ValueError) as exc:
            problems.append(f"{where}: {exc}")
            continue
        if kind == CONTROL_ABORT:
            aborts[records[0].offset] = header.producer_id
    problems.extend(
        f"aborted transaction of producer {a.producer_id} ({a.first_offset}..{a.last_offset}) "
        f"has no abort marker of its producer at {a.last_offset}"
        for a in d.entry.aborted
        if aborts.get(a.last_offset) != a.producer_id or a.first_offset > a.last_offset
    )
    problems.extend(
        f"open transaction of producer {o.producer_id} starts at {o.first_offset}, "
        "after the segment ends"
        for o in d.entry.open_txns
        if o.first_offset > d.last_offset
    )
    row.values["control_batches"] = controls
    row.values["txn_ok"] = not problems
    row.errors.extend(problems)


def _check_index_object(
    store: ObjectStore, d: SegmentDescriptor, segment: bytes | None, row: _Row
) -> None:
    name = d.index_object_key
    try:
        index = store.get(name)
    except ObjectNotFound:
        row.fail("index_missing", f"index object {name} is missing", True)
        return
    v = row.values
    v["index_size_bytes"] = len(index)
    try:
        reader = IndexReader(index, name)
    except CorruptionError as exc:
        v["index_problems"] = 1
        row.fail("index_ok", f"index: {exc}")
        return
    v["index_interval"] = reader.interval
    if segment is None:
        return  # nothing to check the entries against; index_ok stays unknown
    try:
        problems = check_index(segment, reader, segment_name=d.segment_object_key, index_name=name)
    except CorruptionError as exc:
        row.errors.append(f"index not checked: {exc}")
        return
    v["index_problems"] = len(problems)
    v["index_ok"] = not problems
    row.errors.extend(f"index: {p}" for p in problems[:3])


def check_segments(store: ObjectStore, chunk: Sequence[SegmentDescriptor]) -> list[dict[str, Any]]:
    """`check_segment` for each descriptor of a chunk: one Spark task's work."""
    return [check_segment(store, d) for d in chunk]


def scan_chunks(
    descriptors: Sequence[SegmentDescriptor], slots: int, chunk_bytes: int = SCAN_CHUNK_BYTES
) -> list[list[SegmentDescriptor]]:
    """Consecutive runs of ``descriptors`` of about equal bytes, one per Spark task.

    As few tasks as keep every slot busy: ``slots`` of them, or a multiple of
    ``slots`` when one task would read more than ``chunk_bytes`` (fewer when
    big segments leave chunks empty).  Each task costs tens of milliseconds of
    scheduling and Python round trips, which at the page-cache speed of the
    checks is as much as the checks of a gigabyte.
    """
    if not descriptors:
        return []
    slots = max(1, slots)
    total = sum(max(1, d.size_bytes) for d in descriptors)
    count = max(slots, -(-total // chunk_bytes))
    count = min(len(descriptors), -(-count // slots) * slots)
    chunks: list[list[SegmentDescriptor]] = [[]]
    done = 0
    for d in descriptors:
        size = max(1, d.size_bytes)
        # A segment goes to the chunk its middle byte falls in (each holds 1/count).
        if chunks[-1] and done + size / 2 > total * len(chunks) / count:
            chunks.append([])
        chunks[-1].append(d)
        done += size
    return chunks


def list_partition_objects(store: ObjectStore, prefix: str) -> list[tuple[str, int, float]]:
    """``(key, size, last_modified)`` of every object under a partition prefix but ``_log/``."""
    log_dir = prefix + layout.LOG_DIR + "/"
    return [
        (info.key, info.size, info.last_modified)
        for info in store.list(prefix)
        if not info.key.startswith(log_dir)
    ]


# --- partition-level checks (driver) ---------------------------------------------


def _referenced_keys(state: PartitionState, namespace: str) -> set[str]:
    keys: set[str] = set()
    for segment in state.segments:
        keys.update((segment.key, segment.index_key))
    for tombstone in state.tombstones:
        keys.update((tombstone.key, tombstone.index_key))
    return {layout.join(namespace, key) for key in keys}


def _link_partition(rows: list[dict[str, Any]], log_start_offset: int) -> None:
    """Set ``overlap_prev`` and ``gap_before`` on one partition's rows (offset order)."""
    previous_last: int | None = None
    for row in rows:
        base, last = row["base_offset"], row["last_offset"]
        if previous_last is None:
            row["overlap_prev"] = False
            row["gap_before"] = max(0, base - log_start_offset)
        else:
            row["overlap_prev"] = base <= previous_last
            row["gap_before"] = max(0, base - previous_last - 1)
            if row["overlap_prev"]:
                message = f"offsets {base}.. overlap the previous segment (ends at {previous_last})"
                row["error"] = f"{row['error']}; {message}" if row["error"] else message
        previous_last = last if previous_last is None else max(previous_last, last)


def _orphan_row(namespace: str, state: PartitionState, key: str, size: int) -> dict[str, Any]:
    row = _Row(
        row_type=ROW_ORPHAN,
        topic=state.topic,
        partition=state.partition,
        key=key[len(namespace) + 1 :] if namespace else key,
        size_bytes=size,
        orphan=True,
    )
    row.errors.append(f"object {key} is not referenced by the catalog")
    return row.finish()


def collect_rows(
    spark: SparkSession,
    store: ObjectStore,
    namespace: str,
    topics: Sequence[str] | None = None,
    *,
    orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S,
    timings: JobContext | None = None,
) -> list[dict[str, Any]]:
    """All result rows (segments, then orphans) as dicts, checks done in executors.

    The partition prefixes are listed on driver threads while the executors
    check segments (a listing is one paginated request per 1000 objects, not
    worth a Spark job of its own); the ``listing`` phase is what is left to
    wait for once the checks are done.
    """
    phase = timings.phase if timings is not None else _no_phase
    with phase("catalog"):
        states = common.load_partitions(store, namespace, topics)
        descriptors = common.read_descriptors(store, namespace, states=states)
    prefixes = [
        layout.join(namespace, layout.partition_dir(s.topic, s.partition)) + "/" for s in states
    ]
    chunks = scan_chunks(descriptors, spark.sparkContext.defaultParallelism)
    with ThreadPoolExecutor(max(1, min(LISTING_THREADS, len(prefixes)))) as pool:
        listed = [pool.submit(list_partition_objects, store, prefix) for prefix in prefixes]
        with phase("segments"):
            parts = common.map_in_executors(
                spark, store, chunks, check_segments, num_slices=max(1, len(chunks))
            )
            rows = [row for part in parts for row in part]
        with phase("listing"):
            listings = [future.result() for future in listed]
    now = time.time()
    by_partition: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        by_partition.setdefault((row["topic"], row["partition"]), []).append(row)
    orphans: list[dict[str, Any]] = []
    for state, listing in zip(states, listings, strict=True):
        _link_partition(
            by_partition.get((state.topic, state.partition), []), state.log_start_offset
        )
        referenced = _referenced_keys(state, namespace)
        for key, size, modified in listing:
            if key not in referenced and now - modified >= orphan_grace_s:
                orphans.append(_orphan_row(namespace, state, key, size))
    return rows + orphans


@contextlib.contextmanager
def _no_phase(name: str) -> Any:
    yield


def rows_dataframe(spark: SparkSession, rows: Iterable[dict[str, Any]]) -> DataFrame:
    """Result rows as a DataFrame with `RESULT_SCHEMA`."""
    return spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], RESULT_SCHEMA)


def validate(
    spark: SparkSession,
    store: ObjectStore,
    namespace: str,
    topics: Sequence[str] | None = None,
    *,
    orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S,
) -> DataFrame:
    """The validation results of a namespace as a Spark DataFrame (one row per segment/orphan)."""
    rows = collect_rows(spark, store, namespace, topics, orphan_grace_s=orphan_grace_s)
    return rows_dataframe(spark, rows)


# --- data quality (Great Expectations) ---------------------------------------------


@dataclass(frozen=True)
class Check:
    """One expectation of the suite, with what the report says about it."""

    id: str
    critical: bool
    index: bool  # index_rebuild can repair what this one finds
    description: str
    expectation: Expectation


def _quiet_gx() -> None:
    """No usage statistics leave the cluster: set before Great Expectations is imported."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


def build_expectations(options: ValidationOptions) -> list[Check]:
    """The suite: critical ones guard data and catalog integrity, the rest hygiene."""
    _quiet_gx()
    # Each expectation from the module that defines it: great_expectations.expectations
    # re-exports them without declaring it (no __all__), which strict typing refuses.
    from great_expectations.expectations.core.expect_column_max_to_be_between import (
        ExpectColumnMaxToBeBetween,
    )
    from great_expectations.expectations.core.expect_column_sum_to_be_between import (
        ExpectColumnSumToBeBetween,
    )
    from great_expectations.expectations.core.expect_column_values_to_be_between import (
        ExpectColumnValuesToBeBetween,
    )
    from great_expectations.expectations.core.expect_column_values_to_be_in_set import (
        ExpectColumnValuesToBeInSet,
    )
    from great_expectations.expectations.core.expect_column_values_to_not_be_null import (
        ExpectColumnValuesToNotBeNull,
    )
    from great_expectations.expectations.row_conditions import Column

    segment_rows = {"row_condition": Column("row_type") == ROW_SEGMENT}

    def in_set(column: str, value: bool) -> dict[str, Any]:
        return {"column": column, "value_set": [value]}

    specs: list[tuple[str, bool, bool, str, type[Expectation], dict[str, Any]]] = [
        ("segment_present", True, False, "every live segment object exists",
         ExpectColumnValuesToBeInSet, in_set("segment_missing", False)),
        ("header_ok", True, False, "segment headers: magic, version, base offset",
         ExpectColumnValuesToBeInSet, in_set("header_ok", True)),
        ("footer_ok", True, False, "segment footers: magic, size",
         ExpectColumnValuesToBeInSet, in_set("footer_ok", True)),
        ("body_crc", True, False, "segment body CRC-32C matches the footer",
         ExpectColumnValuesToBeInSet, in_set("body_crc_ok", True)),
        ("batch_crc", True, False, "no batch fails its CRC-32C",
         ExpectColumnValuesToBeBetween, {"column": "crc_failures", "min_value": 0, "max_value": 0}),
        ("batches_ok", True, False, "batches walk to the footer with increasing offsets",
         ExpectColumnValuesToBeInSet, in_set("batches_ok", True)),
        ("counts_ok", True, False, "header count and footer last offset match the batches",
         ExpectColumnValuesToBeInSet, in_set("counts_ok", True)),
        ("catalog_ok", True, False, "catalog entries match the segment objects",
         ExpectColumnValuesToBeInSet, in_set("catalog_ok", True)),
        ("no_overlap", True, False, "adjacent segments of a partition do not overlap",
         ExpectColumnValuesToBeInSet, in_set("overlap_prev", False)),
        ("index_present", True, True, "every live segment has its index object",
         ExpectColumnValuesToBeInSet, in_set("index_missing", False)),
        ("index_ok", True, True, "index entries point at batch starts",
         ExpectColumnValuesToBeInSet, in_set("index_ok", True)),
        ("transactions_ok", True, False,
         "control batches are markers; the catalog's aborted transactions have theirs",
         ExpectColumnValuesToBeInSet, in_set("txn_ok", True)),
        ("key_present", True, False, "every row names its object",
         ExpectColumnValuesToNotBeNull, {"column": "key"}),
        ("orphans", False, False, f"at most {options.max_orphans} orphan objects",
         ExpectColumnSumToBeBetween, {"column": "orphan", "min_value": 0, "max_value": options.max_orphans}),
        ("segment_min_size", False, False, f"segments hold at least {SEGMENT_OVERHEAD} bytes",
         ExpectColumnValuesToBeBetween, {"column": "size_bytes", "min_value": SEGMENT_OVERHEAD, **segment_rows}),
        ("segment_max_size", False, False, f"no segment exceeds {options.max_segment_bytes} bytes",
         ExpectColumnMaxToBeBetween, {"column": "size_bytes", "max_value": options.max_segment_bytes}),
        ("offset_gaps", False, False, "offset gaps between segments (counted, allowed)",
         ExpectColumnValuesToBeBetween, {"column": "gap_before", "min_value": 0}),
    ]  # fmt: skip
    checks = []
    for check_id, critical, index, description, cls, kwargs in specs:
        meta = {"check": check_id, "critical": critical, "index": index, "notes": description}
        checks.append(Check(check_id, critical, index, description, cls(**kwargs, meta=meta)))
    return checks


#: pandas' nullable dtypes for the Spark types of `RESULT_SCHEMA`.
_PANDAS_DTYPES = {"string": "string", "int": "Int32", "long": "Int64", "boolean": "boolean"}


def rows_pandas(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Result rows as a pandas DataFrame: `RESULT_SCHEMA`'s columns, nullable dtypes.

    What the suite runs over.  Built on the driver from the rows it already
    holds: the same table as `rows_dataframe` without a round trip through
    the JVM (``createDataFrame`` + ``toPandas`` cost a Spark SQL job, seconds
    in a fresh session).
    """
    import pandas as pd

    types = dict(part.strip().split(" ") for part in RESULT_SCHEMA.split(","))
    return pd.DataFrame(
        {
            column: pd.array([r[column] for r in rows], dtype=_PANDAS_DTYPES[types[column]])
            for column in COLUMNS
        }
    )


class PreparedExpectations:
    """An ephemeral GX context with the suite, its checkpoint and (optionally) a Data Docs site.

    Everything but the data: `prepare_expectations` builds it while Spark
    scans segments, `run` validates the rows once they are in.
    """

    def __init__(self, checks: Sequence[Check], run_id: str, docs_dir: str | None) -> None:
        _quiet_gx()
        import great_expectations as gx
        from great_expectations.checkpoint.actions import UpdateDataDocsAction
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.checks = list(checks)
        self.run_id = run_id
        context = gx.get_context(mode="ephemeral")
        context.enable_analytics(False)
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        actions: list[Any] = []
        if docs_dir is not None:
            from spark_jobs import validation_docs

            context.add_data_docs_site(
                site_name="kfs", site_config=validation_docs.site_config(docs_dir)
            )
            validation_docs.compile_templates()
            actions.append(UpdateDataDocsAction(name="data_docs", site_names=["kfs"]))
        asset = context.data_sources.add_pandas("kfs").add_dataframe_asset("segments")
        batch_definition = asset.add_batch_definition_whole_dataframe("validation")
        suite = context.suites.add(gx.ExpectationSuite(name="kfs_segments"))
        for check in self.checks:
            suite.add_expectation(check.expectation)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name="kfs_segments", data=batch_definition, suite=suite)
        )
        self._checkpoint = context.checkpoints.add(
            gx.Checkpoint(
                name="kfs_validation",
                validation_definitions=[definition],
                actions=actions,
                result_format={"result_format": "COMPLETE"},
            )
        )

    def run(self, pdf: pd.DataFrame) -> list[dict[str, Any]]:
        """Run the suite over ``pdf``; one result dict per check, in suite order."""
        from great_expectations.core.run_identifier import RunIdentifier

        # The run time is given, because without one GX parses the run name as a
        # date: a KFS run id such as 20261124T103000Z-9146ad reads as an offset of
        # -91:46 and fails the whole run ("offset must be a timedelta ...").
        run_id = RunIdentifier(run_name=self.run_id, run_time=_dt.datetime.now(_dt.UTC))
        result = self._checkpoint.run(batch_parameters={"dataframe": pdf}, run_id=run_id)
        by_id = {check.id: check for check in self.checks}
        outcomes: list[dict[str, Any]] = []
        for validation in result.run_results.values():
            for item in validation.results:
                config = item.expectation_config
                if config is None:
                    continue
                check = by_id[config.meta["check"]]
                outcomes.append(_outcome(check, item, pdf))
        order = {check.id: i for i, check in enumerate(self.checks)}
        outcomes.sort(key=lambda o: order[o["id"]])
        return outcomes


def prepare_expectations(
    checks: Sequence[Check], run_id: str, docs_dir: str | None
) -> PreparedExpectations:
    """The GX context, suite and checkpoint for ``checks`` (Data Docs into ``docs_dir``)."""
    return PreparedExpectations(checks, run_id, docs_dir)


def run_expectations(
    pdf: pd.DataFrame,
    checks: Sequence[Check],
    run_id: str,
    docs_dir: str | None,
) -> list[dict[str, Any]]:
    """Run the suite over ``pdf``; one result dict per check (Data Docs into ``docs_dir``)."""
    return prepare_expectations(checks, run_id, docs_dir).run(pdf)


def _outcome(check: Check, item: Any, pdf: pd.DataFrame) -> dict[str, Any]:
    result = item.result or {}
    failing: list[dict[str, Any]] = []
    for i in list(result.get("unexpected_index_list") or [])[:MAX_ROWS_PER_EXPECTATION]:
        record = pdf.loc[i] if i in pdf.index else None
        if record is not None:
            failing.append(
                {c: _plain(record[c]) for c in ("row_type", "topic", "partition", "key", "error")}
            )
    kwargs = item.expectation_config.kwargs
    return {
        "id": check.id,
        "expectation": item.expectation_config.type,
        "column": kwargs.get("column"),
        "description": check.description,
        "critical": check.critical,
        "index": check.index,
        "success": bool(item.success),
        "observed_value": _plain(result.get("observed_value")),
        "element_count": _plain(result.get("element_count")),
        "unexpected_count": _plain(result.get("unexpected_count")),
        "exception": (item.exception_info or {}).get("exception_message")
        if isinstance(item.exception_info, dict)
        else None,
        "failing_rows": failing,
    }


def _plain(value: Any) -> Any:
    """numpy/pandas scalars and NA to JSON-ready Python values."""
    if value is None:
        return None
    with contextlib.suppress(TypeError, ValueError):
        import pandas as pd

        if pd.isna(value):
            return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


# --- the job ------------------------------------------------------------------------


_SEGMENT_FLAGS = ("header_ok", "footer_ok", "body_crc_ok", "batches_ok", "counts_ok", "txn_ok")


def _counts(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    segments = [r for r in rows if r["row_type"] == ROW_SEGMENT]

    def total(column: str) -> int:
        return sum(r[column] or 0 for r in segments)

    def flagged(column: str, bad: bool) -> int:
        return sum(1 for r in segments if r[column] is bad)

    return {
        "partitions": len({(r["topic"], r["partition"]) for r in segments}),
        "segments": len(segments),
        "bytes": total("size_bytes"),
        "records": total("record_count"),
        "crc_failures": total("crc_failures"),
        "bad_segments": sum(1 for r in segments if any(r[c] is False for c in _SEGMENT_FLAGS)),
        "missing_segments": flagged("segment_missing", True),
        "missing_indexes": flagged("index_missing", True),
        "bad_indexes": flagged("index_ok", False),
        "catalog_mismatches": flagged("catalog_ok", False),
        "control_batches": total("control_batches"),
        "transaction_problems": flagged("txn_ok", False),
        "overlaps": flagged("overlap_prev", True),
        "gaps": sum(1 for r in segments if (r["gap_before"] or 0) > 0),
        "orphans": sum(1 for r in rows if r["row_type"] == ROW_ORPHAN),
    }


def run(
    options: ValidationOptions | JobOptions | argparse.Namespace | Sequence[str] | None = None,
    spark: SparkSession | None = None,
) -> dict[str, Any]:
    """Validate a namespace; the run summary (``details`` holds the report)."""
    opts = common.coerce_options(options, build_parser(), ValidationOptions)
    return common.execute(JOB, opts, lambda ctx: _validate_job(ctx, opts), spark)


def _validate_job(ctx: JobContext, options: ValidationOptions) -> JobResult:
    write_docs = options.data_docs and not options.dry_run

    def prepare(docs_dir: str) -> PreparedExpectations:
        # Importing Great Expectations and building its context take seconds of
        # driver time that would otherwise follow the scan: done meanwhile.
        with ctx.phase("expectations_setup"):
            checks = build_expectations(options)
            return prepare_expectations(checks, ctx.run_id, docs_dir if write_docs else None)

    with (
        tempfile.TemporaryDirectory(prefix="kfs-gx-") as docs_dir,
        ThreadPoolExecutor(1, thread_name_prefix="kfs-gx") as pool,
    ):
        prepared: Future[PreparedExpectations] = pool.submit(prepare, docs_dir)
        rows = collect_rows(
            ctx.spark,
            ctx.store,
            ctx.namespace,
            options.topics,
            orphan_grace_s=options.orphan_grace_s,
            timings=ctx,
        )
        with ctx.phase("expectations"):
            outcomes = prepared.result().run(rows_pandas(rows))
        with ctx.phase("data_docs_upload"):
            from spark_jobs import validation_docs  # GX: imported on the driver only

            docs_index = (
                validation_docs.upload_site(
                    ctx.store, ctx.report_prefix + "data_docs/", Path(docs_dir)
                )
                if write_docs
                else None
            )
    failed = [o for o in outcomes if not o["success"]]
    critical = [o["id"] for o in failed if o["critical"]]
    index_only = bool(critical) and all(o["index"] for o in failed if o["critical"])
    selected = {"critical": critical, "any": [o["id"] for o in failed], "none": []}
    failing = selected[options.fail_on]
    counts = _counts(rows)
    problems = [r for r in rows if r["error"]][:MAX_REPORTED_ROWS]
    report = ValidationReport.model_validate(
        {
            "run_id": ctx.run_id,
            "job": JOB,
            "namespace": ctx.namespace,
            "topics": list(options.topics) if options.topics is not None else None,
            "success": not failed,
            "fail_on": options.fail_on,
            "failed_expectations": [o["id"] for o in failed],
            "critical_failures": critical,
            "index_only_failure": index_only,
            "statistics": {
                "evaluated_expectations": len(outcomes),
                "successful_expectations": len(outcomes) - len(failed),
                "unsuccessful_expectations": len(failed),
            },
            "counts": counts,
            "expectations": outcomes,
            "problems": problems,
            "problems_truncated": len([r for r in rows if r["error"]]) > len(problems),
            "data_docs_index": docs_index,
            "timings": dict(ctx.timings),
        }
    )
    report_key = None
    if not options.dry_run:
        report_key = validation_report_key(ctx.namespace, ctx.run_id)
        ctx.store.put(report_key, report.to_json())
    status = common.STATUS_FAILED if failing else common.STATUS_OK
    if failed:
        message = (
            f"{len(failed)} of {len(outcomes)} expectations failed "
            f"({len(critical)} critical: {', '.join(critical) or 'none'})"
        )
    else:
        message = f"{counts['segments']} segments in {counts['partitions']} partitions passed"
    details = {
        "report_key": report_key,
        "data_docs_index": docs_index,
        "index_only_failure": index_only,
        "critical_failures": critical,
        "failed_expectations": report.failed_expectations,
        "report": report.model_dump(),
    }
    return JobResult(status, message, counts, details)


def main(argv: Sequence[str] | None = None) -> int:
    return common.main(run, build_parser(), argv)


if __name__ == "__main__":
    # Run the importable module, not this __main__ copy, so executors unpickle
    # the per-segment functions by reference to spark_jobs.validation.
    from spark_jobs.validation import main as _main

    common.exit_driver(_main())


__all__ = [
    "COLUMNS",
    "RESULT_SCHEMA",
    "Check",
    "PreparedExpectations",
    "ValidationOptions",
    "build_expectations",
    "build_parser",
    "check_segment",
    "check_segments",
    "collect_rows",
    "list_partition_objects",
    "main",
    "prepare_expectations",
    "rows_dataframe",
    "rows_pandas",
    "run",
    "run_expectations",
    "scan_chunks",
    "validate",
]
