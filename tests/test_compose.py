"""docker-compose.yml and the Dockerfile hold together, checked without a Docker engine.

The file is parsed as Compose reads it (YAML merge keys, ``${VAR:-default}``
interpolation, env_file under environment) and every cross-reference is
followed: services, volumes, ports, mounted files, the image's files, and the
settings several services must agree on - the bucket, the store URL, the S3
endpoint and credentials, the Spark master, the Airflow database and API.
Where a setting is consumed by KFS or Airflow code, that code reads it: the
daemon's environment goes through `Settings.from_env`, the connections through
`KfsHook` and the Spark provider's `SparkSubmitHook`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.parse
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from kfs_core.config import Settings
from kfs_core.security.listeners import parse_listeners

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
KFS_IMAGE = "kfs:local"
AIRFLOW_COMMANDS = {"api-server", "scheduler", "dag-processor", "triggerer"}
DAEMONS = ("kfs-1", "kfs-2", "kfs-3")  # the `kfs serve` services, node ids 1..3
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$\$")


# --- reading the files as Compose and Docker do --------------------------------------


def interpolate(value: Any) -> Any:
    """Compose's interpolation with an empty environment: ``${X:-d}`` → d, ``$$`` → ``$``."""
    if isinstance(value, str):
        return _VARIABLE.sub(lambda m: "$" if m.group(0) == "$$" else (m.group(2) or ""), value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


@cache
def compose() -> dict[str, Any]:
    return interpolate(yaml.safe_load(COMPOSE.read_text()))


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def read_env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not KEY=VALUE: {line!r}"
        env[key.strip()] = value
    return env


def env_files(service: dict[str, Any]) -> list[Path]:
    entries = service.get("env_file", [])
    entries = [entries] if isinstance(entries, str | dict) else entries
    return [ROOT / (e["path"] if isinstance(e, dict) else e) for e in entries]


def effective_env(name: str) -> dict[str, str]:
    """A service's environment: its env_files, then ``environment`` over them."""
    service = services()[name]
    env: dict[str, str] = {}
    for path in env_files(service):
        env.update(read_env_file(path))
    environment = service.get("environment", {})
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    env.update({k: "" if v is None else str(v) for k, v in environment.items()})
    return env


def command(name: str) -> list[str]:
    cmd = services()[name].get("command", [])
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def published(name: str) -> dict[int, int]:
    """Container port → host port of a service's ``ports``."""
    ports = {}
    for spec in services()[name].get("ports", []):
        # "HOST:CONTAINER", "IP:HOST:CONTAINER" or "CONTAINER[/proto]"
        host, _, container = str(spec).partition("/")[0].rpartition(":")
        ports[int(container)] = int(host.rpartition(":")[2] or container)
    return ports


def mounts(name: str) -> list[tuple[str, str]]:
    """(source, target) of a service's short-syntax volumes."""
    return [tuple(v.split(":")[:2]) for v in services()[name].get("volumes", [])]  # type: ignore[misc]


def host_port(url_or_address: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(
        url_or_address if "//" in url_or_address else f"//{url_or_address}"
    )
    assert parts.hostname and parts.port, url_or_address
    return parts.hostname, parts.port


def airflow_services() -> list[str]:
    return [
        name
        for name in services()
        if command(name)[:1] == ["airflow"] or "airflow-init" in " ".join(command(name))
    ]


@cache
def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    steps = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            instruction, _, args = line.partition(" ")
            steps.append((instruction.upper(), args.strip()))
    return steps


def image_path(container_path: str) -> Path | None:
    """The repository file the image holds at ``container_path`` (via WORKDIR + COPY), or None."""
    workdir = PurePosixPath("/")
    target = PurePosixPath(container_path)
    found = None
    for instruction, args in dockerfile():
        if instruction == "WORKDIR":
            workdir = workdir / args
        elif instruction == "COPY":
            *sources, dest = args.split()
            destination = workdir / dest
            for source in sources:
                in_image = (
                    destination
                    if len(sources) == 1 and not dest.endswith("/")
                    else (destination / source)
                )
                if target == in_image or in_image in target.parents:
                    found = ROOT / source / target.relative_to(in_image)
    return found


# --- structure -------------------------------------------------------------------------


def test_every_service_has_an_image_and_kfs_ones_build_the_repository_dockerfile() -> None:
    built = []
    for name, service in services().items():
        assert "image" in service or "build" in service, name
        if "build" in service:
            build = service["build"]
            context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
            dockerfile_name = (
                "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            )
            assert (context / dockerfile_name).resolve() == DOCKERFILE, name
            assert service.get("image") == KFS_IMAGE, f"{name}: tag the one KFS image {KFS_IMAGE}"
            built.append(name)
        else:
            image = service["image"]
            assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image}"
    assert {*DAEMONS, "spark-master", "spark-worker", "airflow-init", "airflow-apiserver",
            "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"} <= set(built)  # fmt: skip
    assert {
        command(n)[1] for n in airflow_services() if command(n)[0] == "airflow"
    } == AIRFLOW_COMMANDS


def test_volumes_are_declared_and_used_and_mounted_files_exist() -> None:
    declared = set(compose().get("volumes", {}))
    used = set()
    for name in services():
        for source, target in mounts(name):
            assert target.startswith("/"), f"{name}: {target}"
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in declared, f"{name} uses undeclared volume {source}"
                used.add(source)
    assert declared == used, f"declared but unused: {declared - used}"


def test_env_files_exist() -> None:
    for name, service in services().items():
        for path in env_files(service):
            assert path.is_file(), f"{name}: env_file {path} is missing"


def test_host_ports_are_unique() -> None:
    host_ports = [p for name in services() for p in published(name).values()]
    assert len(host_ports) == len(set(host_ports)), sorted(host_ports)


def test_dependencies_exist_are_acyclic_and_their_conditions_can_be_met() -> None:
    graph = {}
    for name, service in services().items():
        depends = service.get("depends_on", {})
        depends = (
            {d: {"condition": "service_started"} for d in depends}
            if isinstance(depends, list)
            else depends
        )
        graph[name] = set(depends)
        for dep, spec in depends.items():
            assert dep in services(), f"{name} depends on unknown {dep}"
            condition = spec.get("condition", "service_started")
            if condition == "service_healthy":
                assert "healthcheck" in services()[dep], (
                    f"{name} waits for {dep}'s health: it has none"
                )
            elif condition == "service_completed_successfully":
                assert "restart" not in services()[dep], f"{dep} is a one-shot job: no restart"
            else:
                assert condition == "service_started", condition

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"dependency cycle: {' -> '.join((*path, node))}"
        for dep in graph[node]:
            visit(dep, (*path, node))

    for name in graph:
        visit(name, ())


def test_long_running_services_have_healthchecks_and_restart() -> None:
    one_shot = {name for name, s in services().items() if "restart" not in s}
    assert one_shot == {"minio", "minio-init", "airflow-init", "kfs-security-init"}
    for name, service in services().items():
        if name not in one_shot:
            assert "healthcheck" in service, name
            test = service["healthcheck"]["test"]
            assert test[0] in ("CMD", "CMD-SHELL"), name


def test_files_the_containers_use_are_in_the_image() -> None:
    for name in services():
        for part in command(name):
            if part.startswith("/opt/kfs/"):
                path = image_path(part)
                assert path is not None and path.exists(), f"{name}: {part} is not in the image"
    for env_name in ("SPARK_CONF_DIR",):
        [value] = [a.split("=", 1)[1] for i, a in dockerfile() if i == "ENV"
                   for a in a.split() if a.startswith(f"{env_name}=")]  # fmt: skip
        path = image_path(value)
        assert path is not None and path.is_dir(), value
        assert (path / "spark-defaults.conf").is_file()


# --- the Dockerfile -----------------------------------------------------------------------


def dockerignore() -> list[str]:
    return [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def ignored(path: str) -> bool:
    parts = PurePosixPath(path).parts
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(
        fnmatch.fnmatch(c, pattern.lstrip("/")) or fnmatch.fnmatch(c, pattern.removeprefix("**/"))
        for pattern in dockerignore()
        if not pattern.startswith("!")
        for c in candidates
    )


def test_dockerfile_builds_from_python_slim_with_java_and_the_pinned_package() -> None:
    steps = dockerfile()
    assert steps[0] == ("FROM", "python:3.11-slim-bookworm")
    runs = " ".join(args for instruction, args in steps if instruction == "RUN")
    assert "openjdk-17-jre-headless" in runs
    assert re.search(r"pip install -c constraints\.txt \.", runs)
    assert re.search(r"pip install --no-deps -c constraints\.txt \.", runs)
    assert ("USER", "kfs") in steps
    copied = [s for i, args in steps if i == "COPY" for s in args.split()[:-1]]
    assert {"kfs_core", "spark_jobs", "plugins", "dags", "infra", "constraints.txt"} <= set(copied)
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: no such file"
        assert not ignored(source), f"COPY {source}: excluded by .dockerignore"
    assert ignored(".venv") and ignored(".git") and ignored("kfs_core/__pycache__")


def test_image_python_matches_the_project() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.11,<3.13"' in pyproject
    assert dockerfile()[0][1].startswith("python:3.11-")


# --- settings the services must agree on -----------------------------------------------


def minio_bucket() -> str:
    entrypoint = services()["minio-init"]["entrypoint"]
    [bucket] = re.findall(r"mc mb (?:--ignore-existing )?kfs/([a-z0-9.-]+)", entrypoint)
    return bucket


def kfs_connection() -> dict[str, Any]:
    return json.loads(effective_env("airflow-scheduler")["AIRFLOW_CONN_KFS_DEFAULT"])


def daemon_settings(name: str) -> Settings:
    return Settings.from_env(effective_env(name))  # the daemon's own parser: bad values fail


def test_daemon_settings_parse_and_match_the_published_ports_and_volume() -> None:
    for name in DAEMONS:
        env = effective_env(name)
        settings = daemon_settings(name)
        assert command(name) == ["kfs", "serve"]
        assert settings.store_url.startswith("s3://")
        assert settings.s3_endpoint_url
        # The Kafka port is the same inside and outside: the advertised address works in both.
        host, port = host_port(settings.listen)
        assert host == "0.0.0.0", f"{name}: other containers and the host must reach it"
        assert published(name)[port] == port, name
        host, port = host_port(settings.metrics_listen)
        assert host == "0.0.0.0" and port in published(name), name
        wal_targets = [t for s, t in mounts(name) if not s.startswith((".", "/"))]
        assert any(
            PurePosixPath(settings.data_dir) == PurePosixPath(t)
            or PurePosixPath(t) in PurePosixPath(settings.data_dir).parents
            for t in wal_targets
        ), f"{name}: the WAL must live on a named volume"
        healthcheck = " ".join(services()[name]["healthcheck"]["test"])
        assert f"localhost:{host_port(settings.metrics_listen)[1]}/readyz" in healthcheck
        assert env["AWS_ACCESS_KEY_ID"] and env["AWS_SECRET_ACCESS_KEY"]


def test_three_daemons_share_the_namespace_with_their_own_node_ids_and_wal_volumes() -> None:
    settings = {name: daemon_settings(name) for name in DAEMONS}
    assert [s.node_id for s in settings.values()] == [1, 2, 3]
    assert {(s.store_url, s.namespace) for s in settings.values()} == {
        ("s3://kfs-data/kfs", "default")
    }
    # Acknowledged in the store: any daemon can take over a lost one's partitions.
    assert {s.durability for s in settings.values()} == {"store"}
    wal_volumes = {
        name: [src for src, t in mounts(name) if PurePosixPath(t) == PurePosixPath(s.data_dir)]
        for name, s in settings.items()
    }
    assert all(len(v) == 1 for v in wal_volumes.values()), wal_volumes
    assert len({v[0] for v in wal_volumes.values()}) == len(DAEMONS), wal_volumes
    for name, s in settings.items():
        advertised = {
            listener.protocol.value: (listener.host, listener.port)
            for listener in parse_listeners(s.advertised_listeners, name)
        }
        # In-network clients (the KFS page) follow Metadata to the service name.
        assert advertised["PLAINTEXT"] == (name, host_port(s.listen)[1]), advertised
        sasl_port = advertised["SASL_SSL"][1]
        assert published(name)[sasl_port] == sasl_port, name
    # Each daemon's ports differ, so all three can publish theirs on one machine.
    kafka_ports = [p for name in DAEMONS for p in published(name).values()]
    assert len(kafka_ports) == len(set(kafka_ports))


def test_the_bucket_endpoint_and_credentials_agree_everywhere() -> None:
    minio_env = effective_env("minio")
    bucket = minio_bucket()
    daemon = daemon_settings("kfs-1")
    conn = kfs_connection()
    assert urllib.parse.urlsplit(daemon.store_url).netloc == bucket
    assert conn["extra"]["store_url"] == daemon.store_url
    assert conn["extra"]["namespace"] == daemon.namespace
    # Every S3 client reaches MinIO's API port by its service name ...
    minio_port = 9000
    assert published("minio")[minio_port]
    for endpoint in (daemon.s3_endpoint_url, conn["extra"]["s3_endpoint_url"],
                     effective_env("spark-worker")["KFS_S3_ENDPOINT_URL"]):  # fmt: skip
        assert host_port(endpoint) == ("minio", minio_port)
    assert "http://minio:9000" in services()["minio-init"]["entrypoint"]
    # ... with MinIO's root credentials.
    creds = (minio_env["MINIO_ROOT_USER"], minio_env["MINIO_ROOT_PASSWORD"])
    assert (conn["login"], conn["password"]) == creds
    assert f"{creds[0]} {creds[1]}" in services()["minio-init"]["entrypoint"]
    for name in [*DAEMONS, "spark-worker", *airflow_services()]:
        env = effective_env(name)
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == creds, name


def spark_master_url() -> str:
    cmd = command("spark-master")
    assert cmd[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    host, port = cmd[cmd.index("--host") + 1], cmd[cmd.index("--port") + 1]
    assert host == "spark-master", "the master's host must be its service name"
    return f"spark://{host}:{port}"


def test_the_spark_worker_joins_the_master() -> None:
    cmd = command("spark-worker")
    assert cmd[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert cmd[2] == spark_master_url()
    ui_port = int(command("spark-master")[command("spark-master").index("--webui-port") + 1])
    assert ui_port in published("spark-master")


def test_airflow_components_share_one_database_and_api() -> None:
    envs = {name: effective_env(name) for name in airflow_services()}
    shared = ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
              "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY", "AIRFLOW__CORE__EXECUTOR",
              "AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__PLUGINS_FOLDER",
              "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", "AIRFLOW_CONN_KFS_DEFAULT",
              "AIRFLOW_CONN_SPARK_DEFAULT")  # fmt: skip
    for key in shared:
        values = {name: env.get(key) for name, env in envs.items()}
        assert len(set(values.values())) == 1 and None not in values.values(), (key, values)
    env = envs["airflow-scheduler"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__API_AUTH__JWT_SECRET"], "components must sign tokens with one secret"

    db = urllib.parse.urlsplit(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    postgres = effective_env("postgres")
    assert db.scheme == "postgresql+psycopg2" and db.hostname == "postgres"
    assert (db.username, db.password, db.path.lstrip("/")) == (
        postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"]
    )  # fmt: skip
    assert "psycopg2-binary==" in " ".join(a for i, a in dockerfile() if i == "RUN")

    api_host, api_port = host_port(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    api_cmd = command(api_host)
    assert api_cmd[:2] == ["airflow", "api-server"]
    assert int(api_cmd[api_cmd.index("--port") + 1]) == api_port
    assert api_port in published(api_host)
    assert f"localhost:{api_port}/" in " ".join(services()[api_host]["healthcheck"]["test"])

    # DAGs from the live mount, the plugin from the image.
    assert ("./dags", env["AIRFLOW__CORE__DAGS_FOLDER"]) in [
        (s, t) for s, t in mounts("airflow-scheduler")
    ]
    plugins = image_path(env["AIRFLOW__CORE__PLUGINS_FOLDER"])
    assert plugins == ROOT / "plugins" and (plugins / "kfs_airflow").is_dir()


def test_the_table_job_and_the_kfs_page_share_one_iceberg_catalog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kfs-jobs writes the tables of topics, the api-server's KFS page reads them: one catalog."""
    from pyiceberg.utils.config import Config

    def iceberg(name: str) -> dict[str, str]:
        return {k: v for k, v in effective_env(name).items() if k.startswith("PYICEBERG_")}

    writer, page = iceberg("kfs-jobs"), iceberg("airflow-apiserver")
    assert writer and writer == page
    for key, value in writer.items():
        monkeypatch.setenv(key, value)
    catalog = Config().get_catalog_config("kfs")
    assert catalog is not None
    uri = urllib.parse.urlsplit(catalog["uri"])
    assert (uri.scheme, uri.hostname) == ("postgresql+psycopg2", "postgres")
    assert "postgres" in services()["kfs-jobs"]["depends_on"]
    store = kfs_connection()["extra"]["store_url"]
    assert catalog["warehouse"] == f"{store}/{kfs_connection()['extra']['namespace']}/_tables"
    assert catalog["s3.endpoint"] == kfs_connection()["extra"]["s3_endpoint_url"]


def test_compose_overrides_what_the_shared_airflow_env_sets_for_the_embedded_default() -> None:
    [shared_file] = env_files(services()["airflow-scheduler"])
    assert shared_file == ROOT / "infra/airflow/airflow.env"
    shared = read_env_file(shared_file)
    env = effective_env("airflow-scheduler")
    # Paths, databases and the local Spark master belong to `kfs run`: compose sets its own.
    for key, value in shared.items():
        machine_specific = value.startswith("/") or "sqlite" in value or "local[" in value
        if machine_specific:
            assert services()["airflow-scheduler"]["environment"].get(key), key
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert spark["conn_type"] == "spark"


def test_airflow_init_migrates_creates_the_pool_and_the_login() -> None:
    init = services()["airflow-init"]
    cmd = command("airflow-init")
    assert cmd[0] == "bash"
    script = image_path(cmd[1])
    assert script is not None and script.is_file()
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "airflow db migrate" in text
    # The pool as the plugin defines it (kfs_airflow.dags_support), not a second definition.
    assert "from kfs_airflow.dags_support import ensure_spark_pool; ensure_spark_pool()" in text
    assert "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in text
    env = effective_env("airflow-init")
    assert env["KFS_AIRFLOW_ADMIN_PASSWORD"]
    users = [u.split(":") for u in env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(",")]
    assert ["admin", "admin"] in users
    assert init["depends_on"]["postgres"]["condition"] == "service_healthy"
    # The password file lives on the volume every Airflow component mounts.
    password_file = PurePosixPath(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    for name in airflow_services():
        assert any(PurePosixPath(t) in password_file.parents for s, t in mounts(name)
                   if not s.startswith(".")), name  # fmt: skip


def test_prometheus_scrapes_the_daemon_and_grafana_reads_prometheus() -> None:
    config = yaml.safe_load((ROOT / "infra/prometheus/prometheus.yml").read_text())
    assert ("./infra/prometheus/prometheus.yml", "/etc/prometheus/prometheus.yml") in mounts(
        "prometheus"
    )
    [kfs_job] = [j for j in config["scrape_configs"] if j["job_name"] == "kfs"]
    targets = [t for sc in kfs_job["static_configs"] for t in sc["targets"]]
    assert targets == [
        f"{name}:{host_port(daemon_settings(name).metrics_listen)[1]}" for name in DAEMONS
    ]
    assert kfs_job.get("metrics_path", "/metrics") == "/metrics"

    prometheus_port = 9090
    assert published("prometheus")[prometheus_port]
    datasources = yaml.safe_load(
        (ROOT / "infra/grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"]
    assert [host_port(d["url"]) for d in datasources] == [("prometheus", prometheus_port)]
    assert ("./infra/grafana/provisioning", "/etc/grafana/provisioning") in mounts("grafana")
    provider = yaml.safe_load((ROOT / "infra/grafana/provisioning/dashboards/kfs.yml").read_text())[
        "providers"
    ][0]
    dashboard_mounts = [
        t for s, t in mounts("grafana") if s == "./infra/grafana/kfs-dashboard.json"
    ]
    assert [str(PurePosixPath(t).parent) for t in dashboard_mounts] == [provider["options"]["path"]]


# --- the connections, read by the code that uses them --------------------------------------


@pytest.mark.airflow
def test_the_kfs_connection_is_what_the_hook_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    from kfs_airflow.hooks import KfsAdminHook, KfsHook

    env = effective_env("airflow-scheduler")
    monkeypatch.setenv("AIRFLOW_CONN_KFS_DEFAULT", env["AIRFLOW_CONN_KFS_DEFAULT"])
    hook = KfsHook()
    daemon = daemon_settings("kfs-1")
    assert (hook.store_url, hook.namespace, hook.is_s3) == (
        daemon.store_url,
        daemon.namespace,
        True,
    )
    assert hook.job_args() == [
        "--store-url", daemon.store_url, "--namespace", daemon.namespace,
        "--s3-endpoint-url", daemon.s3_endpoint_url,
    ]  # fmt: skip
    assert KfsAdminHook().bootstrap_servers == ",".join(
        f"{name}:{host_port(daemon_settings(name).listen)[1]}" for name in DAEMONS
    )
    minio = effective_env("minio")
    assert hook.job_env() == {
        "AWS_ACCESS_KEY_ID": minio["MINIO_ROOT_USER"],
        "AWS_SECRET_ACCESS_KEY": minio["MINIO_ROOT_PASSWORD"],
    }


def test_the_kfs_connection_names_the_daemons_kafka_listener() -> None:
    """The KFS page reads consumer groups from the daemons at the connection's bootstrap_servers."""
    servers = kfs_connection()["extra"]["bootstrap_servers"].split(",")
    # Other containers reach each daemon by its service name.
    assert [host_port(server) for server in servers] == [
        (name, host_port(daemon_settings(name).listen)[1]) for name in DAEMONS
    ]


def test_the_tasks_job_server_is_the_kfs_jobs_service_on_the_cluster() -> None:
    """jobs_server names kfs-jobs, which serves on that port, on the network only."""
    host, port = host_port(kfs_connection()["extra"]["jobs_server"])
    jobs = services()["kfs-jobs"]
    assert host == "kfs-jobs"
    argv = jobs["command"]
    assert argv[:3] == ["kfs", "jobs", "serve"]
    assert argv[argv.index("--listen") + 1] == f"0.0.0.0:{port}"
    assert argv[argv.index("--master") + 1] == spark_master_url()
    assert "ports" not in jobs, "the job server has no authentication: never publish it"
    assert f"localhost:{port}/healthz" in " ".join(jobs["healthcheck"]["test"])
    scheduler_needs = services()["airflow-scheduler"]["depends_on"]
    assert scheduler_needs["kfs-jobs"] == {"condition": "service_healthy"}


@pytest.mark.airflow
def test_the_spark_connection_submits_to_the_master_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    env = effective_env("airflow-scheduler")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", env["AIRFLOW_CONN_SPARK_DEFAULT"])
    connection = SparkSubmitHook(conn_id="spark_default")._connection
    assert connection["master"] == spark_master_url()
    assert connection["deploy_mode"] == "client"  # the driver runs in the task, on the scheduler
    assert connection["spark_binary"] == "spark-submit"


@pytest.mark.airflow
@pytest.mark.integration
def test_the_airflow_init_script_runs(tmp_path: Path) -> None:
    """The init script itself, on SQLite instead of PostgreSQL: pool and login are made."""
    script = image_path(command("airflow-init")[1])
    assert script is not None
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp_path / "passwords.json"),
        "KFS_AIRFLOW_ADMIN_PASSWORD": 'pa"ss word',
    }
    run = subprocess.run(
        ["bash", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert json.loads((tmp_path / "passwords.json").read_text()) == {"admin": 'pa"ss word'}
    pool = subprocess.run(
        [f"{bin_dir}/airflow", "pools", "get", "kfs_spark", "-o", "json"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert pool.returncode == 0, pool.stderr[-2000:]
    [row] = json.loads(pool.stdout)
    assert (row["pool"], int(row["slots"])) == ("kfs_spark", 2)


def test_the_sasl_ssl_listener_has_its_certificates_and_user(tmp_path: Path) -> None:
    """kfs-security-init makes what the daemon's TLS settings name, before the daemon starts."""
    import subprocess
    import sys

    from kfs_core.security.tls import ServerTls
    from kfs_core.server.app import listeners_of, tls_files

    init_env = effective_env("kfs-security-init")
    for name in DAEMONS:
        env = effective_env(name)
        settings = Settings.from_env(env)
        protocols = {listener.protocol.value: listener.port for listener in listeners_of(settings)}
        assert protocols.keys() == {"PLAINTEXT", "SASL_SSL"}, name
        assert all(published(name)[port] == port for port in protocols.values())
        assert services()[name]["depends_on"]["kfs-security-init"]["condition"] == (
            "service_completed_successfully"
        )
        assert init_env["KFS_STORE_URL"] == env["KFS_STORE_URL"] and init_env["KFS_SASL_PASSWORD"]
        certs = PurePosixPath(settings.tls_cert_file).parent
        for mounted_by in (name, "kfs-security-init"):
            assert any(
                PurePosixPath(t) == certs
                for _, t in [(s, t.split(":")[0]) for s, t in mounts(mounted_by)]
            )
    settings = daemon_settings("kfs-1")
    script = ROOT / "infra" / "compose" / "make_certs.py"
    out = tmp_path / "certs"
    for _ in range(2):  # the second run keeps the first certificate
        subprocess.run([sys.executable, str(script), str(out), "kfs", "localhost", "127.0.0.1"],
                       check=True, capture_output=True)  # fmt: skip
    local = dataclasses.replace(
        settings,
        tls_cert_file=str(out / PurePosixPath(settings.tls_cert_file).name),
        tls_key_file=str(out / PurePosixPath(settings.tls_key_file).name),
    )
    ServerTls(tls_files(local))  # the daemon accepts the pair
