r"""Tables: keep an Iceberg table of every topic with ``kfs.table.enabled=true``.

Run it with ``spark-submit spark_jobs/tables/__main__.py --store-url URL --namespace NS``
(or ``python -m spark_jobs.tables``, ``kfs jobs run tables``; flags: `build_parser`)::

    spark-submit spark_jobs/tables/__main__.py --store-url s3://bucket/kfs --namespace prod \\
        [--topics a,b] [--catalog kfs] [--max-records 100000] [--max-commits 20] [--dry-run]

Each run appends to each table the topic's records committed to the
catalog since the table's last snapshot, exactly once per offset range
(`spark_jobs.tables.job`): the offsets a snapshot covers are in its
summary, committed atomically with its rows.  JSON values become columns
with a schema inferred from the data and evolved as fields appear
(`spark_jobs.tables.schema`); a value that does not fit is kept as a dead
letter (``_error``, ``_value``).  A compacted topic's table holds each key's
latest value; a delete topic's table appends.  Every snapshot gets a Great
Expectations report (`spark_jobs.tables.report`).  Topic configs:

``kfs.table.enabled``
    ``true`` to keep a table of the topic.
``kfs.table.format``
    ``iceberg`` (the only format).
``kfs.table.partition.by``
    Iceberg partition fields: ``_partition``, ``day(_timestamp)``,
    ``bucket(16, user_id)``, ``truncate(4, name)``...; a value column named
    here joins the spec once the column exists.  Changing it evolves the
    spec (files already written keep theirs).

Spark reads the records (the ``kfs`` data source); the driver turns them
into rows and pyiceberg writes the Parquet files and commits them, so a
commit's rows pass through the driver: ``--max-records`` (per partition per
commit) bounds its memory.  (Iceberg's own Spark runtime does not support the
pinned Spark release.)  The table's catalog is `kfs_core.tables.open_catalog`'s.
"""

from spark_jobs.tables.job import TablesOptions, build_parser, main, run

__all__ = ["TablesOptions", "build_parser", "main", "run"]
