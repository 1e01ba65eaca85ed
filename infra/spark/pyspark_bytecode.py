"""Add compiled bytecode to the installed pyspark's ``python/lib/pyspark.zip``.

spark-submit puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every
driver's and Python worker's path, and the zip that the pyspark wheel ships
holds sources only.  Python caches no bytecode for modules imported from a zip,
so every process compiles pyspark again: about 0.9 s of CPU for a driver (1.3 s
instead of 0.4 s to import ``pyspark.sql``), and most of that again in each
worker daemon.  On a small machine that is a tenth of a scheduled task.

This adds a ``.pyc`` beside every ``.py`` in the zip (unchecked hash-based
bytecode, PEP 552), which ``zipimport`` loads instead of compiling.  The sources
stay, so tracebacks still show them.  Bytecode of another Python version is
ignored by ``zipimport`` (it compiles the source, as before), and upgrading
pyspark replaces the zip, so neither can run stale code.  Run by ``make
install`` and the image build; running it again is a no-op.

    python infra/spark/pyspark_bytecode.py [ZIP]

It imports nothing but the standard library, so it runs before KFS is installed.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import tempfile
import zipfile
from pathlib import Path

#: PEP 552 flags: hash-based, source not checked.
_UNCHECKED_HASH = 0b01


def installed_zip() -> Path:
    """``pyspark.zip`` of the pyspark this interpreter imports."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SystemExit("pyspark is not installed in this Python")
    return Path(spec.origin).parent / "python" / "lib" / "pyspark.zip"


def bytecode(source: bytes, name: str) -> bytes:
    """``source`` compiled, as the contents of an unchecked hash-based ``.pyc``."""
    code = compile(source, name, "exec", dont_inherit=True)
    return b"".join(
        (
            importlib.util.MAGIC_NUMBER,
            _UNCHECKED_HASH.to_bytes(4, "little"),
            importlib.util.source_hash(source),
            marshal.dumps(code),
        )
    )


def has_bytecode(path: Path) -> bool:
    """Whether the zip already carries this Python's bytecode for its modules."""
    with zipfile.ZipFile(path) as archive:
        try:
            header = archive.read("pyspark/__init__.pyc")[:4]
        except KeyError:
            return False
    return header == importlib.util.MAGIC_NUMBER


def add_bytecode(path: Path) -> int:
    """Rewrite ``path`` with a ``.pyc`` per ``.py``; the number of modules compiled.

    The new zip is written beside the old one and renamed over it, so an
    interrupted run leaves the original in place.
    """
    if has_bytecode(path):
        return 0
    compiled = 0
    fd, tmp = tempfile.mkstemp(prefix=".pyspark-", suffix=".zip", dir=path.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(path) as source, zipfile.ZipFile(tmp, "w") as target:
            for info in source.infolist():
                if info.filename.endswith(".pyc"):
                    continue  # another Python's, replaced below
                data = source.read(info)
                target.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
                if info.filename.endswith(".py"):
                    pyc = zipfile.ZipInfo(info.filename + "c", info.date_time)
                    pyc.external_attr = info.external_attr
                    # Named as zipimport names the module's file (pyspark's traceback
                    # trimming compares frames' file names with that place).
                    target.writestr(
                        pyc,
                        bytecode(data, str(path / info.filename)),
                        compress_type=zipfile.ZIP_DEFLATED,
                    )
                    compiled += 1
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return compiled


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else installed_zip()
    if not path.is_file():
        print(f"{path}: no such file (is pyspark installed?)", file=sys.stderr)
        return 1
    compiled = add_bytecode(path)
    if compiled:
        print(f"{path}: bytecode added for {compiled} modules")
    else:
        print(f"{path}: already carries bytecode for this Python")
    return 0


if __name__ == "__main__":
    sys.exit(main())
