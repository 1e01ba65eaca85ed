"""The compaction job's entry file: ``python -m spark_jobs.compaction`` and what spark-submit runs.

``spark-submit spark_jobs/compaction/__main__.py [flags]`` (the DAG's operator
and ``kfs jobs run --spark-submit compaction`` submit this file) runs it as
``__main__``.  It only calls the job imported by its package name, so the
executors' functions are pickled by reference to ``spark_jobs.compaction.*``,
never by value from this copy.
"""

from spark_jobs.common import exit_driver
from spark_jobs.compaction import main

if __name__ == "__main__":
    exit_driver(main())
