"""The fixed top level, the README's two commands and CI hold together (compose: test_compose.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_architecture_page_the_code_cites_is_in_the_repository() -> None:
    assert (ROOT / "docs" / "architecture.md").is_file()
    for package in ("kfs_core", "spark_jobs", "plugins", "dags"):
        for path in sorted((ROOT / package).rglob("*.py")):
            assert "DESIGN.md" not in path.read_text(), path


@pytest.mark.integration
def test_make_lint_mypy_passes() -> None:
    """``make lint``'s mypy line, run as written: strict per pyproject's [tool.mypy].

    CI runs ``make test``, not ``make lint``, so this keeps the type check in CI.
    It shares ``make lint``'s .mypy_cache: about 30 s without one, 1 s with one.
    """
    makefile = (ROOT / "Makefile").read_text()
    commands = re.findall(r"^\t\$\(BIN\)/mypy (.*)$", makefile, re.M)
    assert len(commands) == 1, commands
    paths = commands[0].split()
    assert paths == ["kfs_core", "spark_jobs", "plugins/kfs_airflow"]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
