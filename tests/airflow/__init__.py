"""Tests of the Airflow side: the kfs_airflow plugin (hooks, operators, page) and the DAGs."""
