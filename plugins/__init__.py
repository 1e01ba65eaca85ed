"""The KFS Airflow plugin: hook, operators, sensor and the KFS UI page (issue "Airflow platform")."""
