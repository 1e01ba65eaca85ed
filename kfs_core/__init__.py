"""KFS core: Kafka record formats, segment files, object stores, the catalog and the daemon.

Nothing in this package imports pyspark or airflow; Spark jobs and DAGs build on it.
"""

__version__ = "0.1.0"
