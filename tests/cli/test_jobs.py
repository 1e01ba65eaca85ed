"""`kfs jobs`: what a maintenance job gets when `kfs` starts it (the README runs it for real)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kfs_core.cli import main
from kfs_core.cli.jobs import available_jobs, job_command, job_environment
from kfs_core.config import Settings

pytestmark = pytest.mark.unit


def settings(tmp_path: Path) -> Settings:
    return Settings(store_url=(tmp_path / "store").as_uri(), namespace="ns1")


def test_a_job_gets_this_python_spark_home_and_kfs_store(tmp_path: Path) -> None:
    env = job_environment(settings(tmp_path), {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    # spark-submit finds spark-class here, not by asking the system python3.
    assert (Path(env["SPARK_HOME"]) / "bin" / "spark-class").is_file()
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert (env["KFS_STORE_URL"], env["KFS_NAMESPACE"]) == ((tmp_path / "store").as_uri(), "ns1")
    assert env["HOME"] == str(tmp_path)


def test_what_the_caller_set_wins(tmp_path: Path) -> None:
    base = {"SPARK_HOME": "/opt/spark", "PYSPARK_PYTHON": "/opt/py", "SPARK_CONF_DIR": "/etc/s"}
    env = job_environment(settings(tmp_path), base)
    assert (env["SPARK_HOME"], env["PYSPARK_PYTHON"], env["PYSPARK_DRIVER_PYTHON"]) == (
        "/opt/spark",
        "/opt/py",
        "/opt/py",
    )
    assert env["SPARK_CONF_DIR"] == "/etc/s"


def test_job_commands() -> None:
    assert job_command("validation", ("--dry-run",), spark_submit=False) == [
        sys.executable, "-m", "spark_jobs", "validation", "--dry-run",
    ]  # fmt: skip
    launcher, app, *rest = job_command("compaction", ("--dry-run",), spark_submit=True)
    assert launcher == str(Path(sys.executable).parent / "spark-submit")
    assert Path(app).parts[-2:] == ("compaction", "__main__.py") and Path(app).is_file()
    assert rest == ["--dry-run"]
    assert available_jobs() == [
        "checkpoint",
        "compaction",
        "index_rebuild",
        "retention",
        "tables",
        "validation",
    ]


def test_an_unknown_job_is_one_line() -> None:
    result = CliRunner().invoke(main, ["jobs", "run", "compactoin"])
    assert result.exit_code == 1
    assert result.output.startswith("kfs: error: unknown job 'compactoin'; jobs: checkpoint,")


@pytest.mark.integration
def test_job_flags_go_to_the_job(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kfs_core.cli", "jobs", "run", "retention", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--dry-run" in result.stdout and "spark_jobs.retention" in result.stdout
