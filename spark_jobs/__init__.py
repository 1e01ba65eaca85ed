"""PySpark maintenance jobs, one application per module (issue "Spark maintenance jobs")."""
