"""The tables job's entry file: ``python -m spark_jobs.tables`` and what spark-submit runs.

It only calls the job imported by its package name, so anything Spark
pickles refers to ``spark_jobs.tables.*``, never to this copy.
"""

from spark_jobs.common import exit_driver
from spark_jobs.tables import main

if __name__ == "__main__":
    exit_driver(main())
