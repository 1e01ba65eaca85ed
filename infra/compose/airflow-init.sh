#!/usr/bin/env bash
# docker-compose's airflow-init: prepares Airflow's metadata database once,
# before the api-server, scheduler, dag-processor and triggerer start.
#
# 1. `airflow db migrate` on PostgreSQL (idempotent: a second run is a no-op);
# 2. the `kfs_spark` pool that bounds concurrent Spark jobs, as the plugin
#    defines it (kfs_airflow.dags_support: KFS_SPARK_POOL, KFS_SPARK_POOL_SLOTS;
#    `kfs run` and the plugin's listener create it the same way);
# 3. the simple auth manager's password file: user `admin` (from
#    AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS) with the password
#    KFS_AIRFLOW_ADMIN_PASSWORD, so the login is known instead of generated.
set -euo pipefail

: "${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:?must name the password file}"
: "${KFS_AIRFLOW_ADMIN_PASSWORD:?must be the admin password}"

airflow db migrate
python3 -c 'from kfs_airflow.dags_support import ensure_spark_pool; ensure_spark_pool()'

python3 - <<'PY'
import json
import os

path = os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
with open(path, "w", encoding="utf-8") as out:
    json.dump({"admin": os.environ["KFS_AIRFLOW_ADMIN_PASSWORD"]}, out)
    out.write("\n")
os.chmod(path, 0o600)
PY
echo "airflow-init: database migrated, pool ${KFS_SPARK_POOL:-kfs_spark} ready, login admin"
