# syntax=docker/dockerfile:1
#
# One image for every KFS container of docker-compose.yml: the daemon
# (`kfs serve`), Airflow (api-server, scheduler, dag-processor, triggerer, the
# init job) and the Spark master and worker.  Spark drivers run in the Airflow
# scheduler and executors on the Spark worker, so both must import the same
# kfs_core and spark_jobs: KFS is installed into the image's Python, pinned by
# constraints.txt exactly like `make install`.
#
#   docker build -t kfs:local .          (docker compose build does this)

FROM python:3.11-slim-bookworm

# Java for Spark (4.x needs 17 or 21); procps for the `ps` Spark's scripts call.
# JAVA_HOME stays unset: spark-class finds `java` on PATH, on amd64 and arm64 alike.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/kfs

# Dependencies first, in their own layer: it is rebuilt only when pyproject.toml
# or constraints.txt change, not on every code edit.  Empty package directories
# stand in for the code so that `pip install .` resolves the real dependency set.
# psycopg2 is the PostgreSQL driver of Airflow's metadata database in compose
# (the embedded default uses SQLite, so pyproject.toml does not list it).
COPY pyproject.toml constraints.txt README.md ./
RUN mkdir -p kfs_core spark_jobs plugins/kfs_airflow \
    && touch kfs_core/__init__.py spark_jobs/__init__.py plugins/kfs_airflow/__init__.py \
    && pip install -c constraints.txt . "psycopg2-binary==2.9.13" \
    && pip uninstall -y kfs \
    && rm -rf kfs_core spark_jobs plugins build ./*.egg-info

# The code: the installed package (imported by the daemon, DAGs, drivers and
# executors) plus the DAG and plugin folders Airflow reads and the infra files.
COPY kfs_core kfs_core
COPY spark_jobs spark_jobs
COPY plugins plugins
COPY dags dags
COPY infra infra
RUN pip install --no-deps -c constraints.txt . \
    && rm -rf build ./*.egg-info \
    && python infra/spark/pyspark_bytecode.py

# Everything runs as an unprivileged user, uid 50000 as in Airflow's own image.
# The directories below are created here, owned by it, so that the named volumes
# compose mounts on them start out writable.
RUN useradd --uid 50000 --gid 0 --home-dir /home/kfs --create-home kfs \
    && mkdir -p /var/lib/kfs /opt/airflow /var/lib/spark /etc/kfs/certs \
    && chown -R kfs:0 /var/lib/kfs /opt/airflow /var/lib/spark /etc/kfs/certs

ENV SPARK_CONF_DIR=/opt/kfs/infra/spark \
    SPARK_WORKER_DIR=/var/lib/spark/work \
    PYSPARK_PYTHON=python3 \
    PYSPARK_DRIVER_PYTHON=python3 \
    AIRFLOW_HOME=/opt/airflow \
    KFS_HOME=/var/lib/kfs \
    KFS_DATA_DIR=/var/lib/kfs/wal \
    KFS_LISTEN=0.0.0.0:9092 \
    KFS_METRICS_LISTEN=0.0.0.0:9644

USER kfs

# Kafka protocol (PLAINTEXT, and SASL_SSL when KFS_LISTENERS opens it), and /metrics, /livez, /readyz.
EXPOSE 9092 9093 9644
CMD ["kfs", "serve"]
