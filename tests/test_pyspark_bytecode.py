"""`infra/spark/pyspark_bytecode.py`: compiled bytecode inside pyspark.zip, used by zipimport.

On a small zip made here (the logic), and on the installed pyspark's own zip,
which ``make install`` prepares (what spark-submit's drivers and workers import).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "infra" / "spark" / "pyspark_bytecode.py"


def _module() -> object:
    spec = importlib.util.spec_from_file_location("pyspark_bytecode", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _import_from(archive: Path, name: str) -> tuple[str, str]:
    """``(module.__file__, module.VALUE)`` imported from ``archive`` in a fresh interpreter."""
    probe = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); import {name} as m; "
        "print(m.__file__); print(m.VALUE)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    file, value = done.stdout.split()
    return file, value


def test_bytecode_is_added_once_and_imported_instead_of_the_source(tmp_path: Path) -> None:
    tool = _module()
    archive = tmp_path / "pyspark.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("pyspark/__init__.py", "VALUE = 'package'\n")
        out.writestr("pyspark/sql/__init__.py", "VALUE = 'sql'\n")
        out.writestr("pyspark/sql/data.txt", "not python")
        # Bytecode of another Python (a wrong magic number): replaced, never kept.
        out.writestr("pyspark/sql/__init__.pyc", b"\x00\x00\r\n" + b"\x00" * 12)
    before = _import_from(archive, "pyspark.sql")
    assert before == (str(archive / "pyspark/sql/__init__.py"), "sql")

    assert tool.add_bytecode(archive) == 2  # type: ignore[attr-defined]
    with zipfile.ZipFile(archive) as result:
        names = sorted(result.namelist())
        assert result.read("pyspark/sql/data.txt") == b"not python"
        assert result.read("pyspark/sql/__init__.pyc")[:4] == importlib.util.MAGIC_NUMBER
    assert names == [
        "pyspark/__init__.py",
        "pyspark/__init__.pyc",
        "pyspark/sql/__init__.py",
        "pyspark/sql/__init__.pyc",
        "pyspark/sql/data.txt",
    ]
    assert _import_from(archive, "pyspark.sql") == (
        str(archive / "pyspark/sql/__init__.pyc"),
        "sql",
    )
    assert tool.add_bytecode(archive) == 0  # type: ignore[attr-defined]
    assert not list(tmp_path.glob(".pyspark-*"))  # no scratch file left behind


def test_a_missing_zip_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "nope.zip")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == f"{tmp_path / 'nope.zip'}: no such file (is pyspark installed?)"


def test_the_installed_pyspark_zip_carries_this_pythons_bytecode() -> None:
    """`make install` ran the tool: spark-submit's processes import pyspark precompiled."""
    tool = _module()
    archive = tool.installed_zip()  # type: ignore[attr-defined]
    if not archive.is_file():
        pytest.fail(f"{archive} is missing: is pyspark installed?")
    assert tool.has_bytecode(archive), "run `make install` (infra/spark/pyspark_bytecode.py)"  # type: ignore[attr-defined]
    probe = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); import pyspark; print(pyspark.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == str(archive / "pyspark" / "__init__.pyc")
