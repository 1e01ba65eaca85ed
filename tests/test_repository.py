"""The fixed top level, the README's two commands and CI hold together (compose: test_compose.py).

The README is the front door: short, with a layout naming every top-level
directory, and it and the pages under docs/ link only to files that exist and
describe the project, not the work that made it (no dated diary entries).
"""

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


README_MAX_LINES = 350


def _top_level_directories() -> list[str]:
    """Every directory git tracks at the top (``plugins/`` is named by its one package)."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    tops = sorted({path.split("/")[0] + "/" for path in listed if "/" in path})
    return ["plugins/kfs_airflow/" if top == "plugins/" else top for top in tops]


# The pages that describe the project to its users.
FRONT_PAGES = [
    "README.md",
    "docs/architecture.md",
    "docs/benchmarks.md",
    "docs/performance-notes.md",
    "docs/reliability.md",
]
# Words that date a text or tell of the work behind it rather than of the project.
# "session" alone stays allowed: Kafka's session timeouts, a SparkSession, a SASL session.
PROCESS_WORDS = re.compile(
    r"\b(?:this|that|next|last|previous|earlier|later|first|second|third|fourth|fifth|sixth|"
    r"seventh|eighth) session\b|\bthis (?:morning|afternoon|evening)\b|\byesterday\b|"
    r"\blast time\b|\btoday\b|\btonight\b|\b20\d\d-[01]\d-[0-3]\d\b",
    re.IGNORECASE,
)


def test_readme_is_a_front_door_of_under_350_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_readme_layout_names_every_top_level_directory() -> None:
    readme = (ROOT / "README.md").read_text()
    layout = re.search(r"^## Layout\n\n```\n(.*?)^```", readme, re.S | re.M)
    assert layout is not None, "README.md has no ## Layout block"
    named = {line.split()[0] for line in layout.group(1).splitlines() if line and line[0] != " "}
    missing = [d for d in _top_level_directories() if d not in named]
    assert not missing, missing
    for package in sorted((ROOT / "kfs_core").iterdir()):
        if (package / "__init__.py").is_file():
            assert f"  {package.name}/" in layout.group(1), f"layout lacks kfs_core/{package.name}/"


@pytest.mark.parametrize("page", FRONT_PAGES)
def test_front_pages_tell_of_the_project_not_of_the_work(page: str) -> None:
    for number, line in enumerate((ROOT / page).read_text().splitlines(), 1):
        found = PROCESS_WORDS.search(line)
        assert found is None, f"{page}:{number}: {found.group(0)!r} in {line.strip()!r}"


@pytest.mark.parametrize("page", FRONT_PAGES)
def test_front_pages_link_to_files_that_exist(page: str) -> None:
    path = ROOT / page
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", path.read_text())
    local = [link for link in links if "://" not in link]
    for link in local:
        assert (path.parent / link).exists(), f"{page} links to {link}, which does not exist"


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
    assert paths == [
        "kfs_core",
        "spark_jobs",
        "plugins/kfs_airflow",
        "bench",
        "soak",
        "dags",
        "testkit",
        "compat",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_architecture_page_names_every_package_and_module_of_kfs_core() -> None:
    """Its layer table is the map: every package and top-level module has a row or a mention."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    core = ROOT / "kfs_core"
    rooms = [f"kfs_core/{p.name}/" for p in core.iterdir() if (p / "__init__.py").exists()]
    rooms += [p.name for p in core.glob("*.py") if p.name != "__init__.py"]
    rooms += [f"{p.relative_to(ROOT)}/" for p in core.glob("*/*") if (p / "__init__.py").exists()]
    missing = [room for room in rooms if room not in page]
    assert not missing, f"docs/architecture.md does not name {missing}"


@pytest.mark.integration
def test_make_lint_ruff_passes() -> None:
    """``make lint``'s ruff lines, run as written: the rule set of pyproject's [tool.ruff]."""
    makefile = (ROOT / "Makefile").read_text()
    lint = makefile[makefile.index("\nlint:") : makefile.index("\nformat:")]
    commands = re.findall(r"^\t\$\(BIN\)/ruff (.*)$", lint, re.M)
    assert commands == ["check .", "format --check ."], commands
    for command in commands:
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command.split()],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, f"ruff {command}:\n{result.stdout}{result.stderr}"
