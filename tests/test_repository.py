"""The fixed top level, the README's two commands, CI and docker-compose hold together."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_fixed_top_level_exists() -> None:
    for name in [
        "dags",
        "kfs_core",
        "spark_jobs",
        "plugins",
        "tests",
        "infra",
        "bench",
        "docker-compose.yml",
        "README.md",
        "pyproject.toml",
        "Makefile",
        ".ci/run",
    ]:
        assert (ROOT / name).exists(), name


def test_readme_opens_with_run_and_test_and_ci_calls_test() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert [c for c in commands if c] == ["make run", "make test"]
    assert "make test" in (ROOT / ".ci/run").read_text()


def test_make_help_documents_every_target() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^([a-z]+):", makefile, re.M)
    documented = set(re.findall(r"^([a-z]+):.*## ", makefile, re.M))
    assert {"run", "test", "bench", "help"} <= documented
    assert set(targets) - documented == set()


def test_compose_file_is_consistent() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    host_ports = [p.split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), "host ports must be unique"
    declared_volumes = set(compose.get("volumes", {}))
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        for dep in service.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown {dep}"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared_volumes, f"{name} uses undeclared volume {source}"
