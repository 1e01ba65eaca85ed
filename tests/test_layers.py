"""The layer rules of docs/architecture.md, read from the source with `ast`.

Every ``import`` counts: at module level, inside functions (a late import
hides a dependency, it does not remove it) and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The storage engine's layers, lowest first: a layer imports nothing of a later one.
ENGINE_LAYERS = (
    ("kfs_core.records",),
    ("kfs_core.formats",),
    ("kfs_core.storage", "kfs_core.catalog"),
    ("kfs_core.cluster",),
    ("kfs_core.log",),
    ("kfs_core.groups", "kfs_core.server"),
)
#: Modules shared by the daemon, the jobs and the plugin: none of them imports the daemon.
CONTRACTS = (
    "kfs_core.namespace",
    "kfs_core.maintenance_pause",
    "kfs_core.errors",
    "kfs_core.config",
    "kfs_core.reports",
)
DAEMON = ("kfs_core.cluster", "kfs_core.log", "kfs_core.groups", "kfs_core.server")
#: The kfs_core modules that drive Kafka clients: the `kfs` command and the admin wrapper
#: it shares with the Airflow plugin (which imports it, so it takes neither click nor the daemon).
KAFKA_CLIENTS = ("kfs_core.cli", "kfs_core.kafka_admin")
#: The Kafka protocol layer is a leaf of the daemon: frames, types, messages, error codes.
PROTOCOL = "kfs_core.server.protocol"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> Iterator[str]:
    """Every module ``path`` imports; ``from a import b`` yields ``a`` and ``a.b``."""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _modules(package: str) -> dict[str, list[str]]:
    """Module name -> what it imports, for every module of ``package``."""
    return {
        _module_name(path): list(_imports(path))
        for path in sorted((ROOT / package.replace(".", "/")).rglob("*.py"))
    }


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{module} imports {target}"
        for module, targets in _modules(package).items()
        for target in targets
        if _within(target, forbidden)
    )


def test_the_walk_sees_imports_of_every_kind() -> None:
    # Guards the guard: a rule that finds nothing because the walk is blind passes vacuously.
    assert (
        "kfs_core.formats.segment.SegmentReader"
        in _modules("kfs_core")["kfs_core.formats.index_check"]
    )
    assert any(_within(t, ("pyspark",)) for t in _modules("spark_jobs")["spark_jobs.common"])


def test_spark_jobs_never_import_the_daemon() -> None:
    assert _violations("spark_jobs", ("kfs_core.log", "kfs_core.server")) == []


def test_plugins_never_import_spark_jobs() -> None:
    assert _violations("plugins", ("spark_jobs",)) == []


def test_kfs_core_never_imports_airflow_or_pyspark() -> None:
    assert _violations("kfs_core", ("airflow", "pyspark")) == []


def test_only_the_cli_and_kafka_admin_drive_kafka_clients() -> None:
    modules = _modules("kfs_core")
    found = [
        f"{module} imports {target}"
        for module, targets in modules.items()
        if not _within(module, KAFKA_CLIENTS)
        for target in targets
        if _within(target, ("confluent_kafka",))
    ]
    found += [
        f"kfs_core.kafka_admin imports {target}"
        for target in modules["kfs_core.kafka_admin"]
        if _within(target, (*DAEMON, "click", "kfs_core.cli"))
    ]
    assert found == []


def test_contract_modules_never_import_the_daemon() -> None:
    modules = _modules("kfs_core")
    found = [
        f"{module} imports {target}"
        for module in CONTRACTS
        for target in modules[module]
        if _within(target, DAEMON)
    ]
    assert found == []


def test_the_protocol_package_imports_nothing_of_the_daemon_above_it() -> None:
    # The broker, the APIs and the app use it; it takes the served versions as an argument.
    above = ("kfs_core.server", "kfs_core.log", "kfs_core.groups", "kfs_core.catalog")
    found = [
        v
        for v in _violations(PROTOCOL, (*above, "kfs_core.security", "kfs_core.storage"))
        if not _within(v.split(" imports ")[1], (PROTOCOL,))
    ]
    assert found == []


@pytest.mark.parametrize("level", range(len(ENGINE_LAYERS) - 1))
def test_no_engine_layer_imports_a_later_one(level: int) -> None:
    later = tuple(p for layer in ENGINE_LAYERS[level + 1 :] for p in layer)
    found = [v for package in ENGINE_LAYERS[level] for v in _violations(package, later)]
    assert found == []


@pytest.mark.parametrize(
    "package",
    ["kfs_core.records", "kfs_core.formats", "kfs_core.storage", "kfs_core.log", PROTOCOL],
)
def test_no_import_cycle_inside_an_engine_package(package: str) -> None:
    modules = _modules(package)
    graph = {
        module: {t for t in targets if t in modules and t not in (module, package)}
        for module, targets in modules.items()
    }
    done: set[str] = set()

    def cycle_from(module: str, path: tuple[str, ...]) -> tuple[str, ...] | None:
        if module in path:
            return (*path[path.index(module) :], module)
        if module in done:
            return None
        for target in sorted(graph[module]):
            found = cycle_from(target, (*path, module))
            if found:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        assert cycle_from(module, ()) is None


# --- what runs from the repository: tests, benchmarks, fault campaigns, testkit -------


def test_the_walk_sees_the_benchmarks_tests_import_bench() -> None:
    assert "bench.wal" in _modules("tests")["tests.bench.test_bench_wal"]


def test_testkit_imports_none_of_tests_bench_or_soak() -> None:
    # What the three share: it depends on none of them.
    assert _violations("testkit", ("tests", "bench", "soak")) == []


def test_bench_never_imports_tests_or_soak() -> None:
    assert _violations("bench", ("tests", "soak")) == []


def test_soak_never_imports_bench_or_tests() -> None:
    assert _violations("soak", ("bench", "tests")) == []


def test_only_the_benchmarks_tests_import_bench() -> None:
    found = [v for v in _violations("tests", ("bench",)) if not _within(v, ("tests.bench",))]
    assert found == []
