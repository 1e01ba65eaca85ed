"""Shared fixtures: object stores on both backends, a moto S3 server over HTTP.

The moto server itself, `wait_for` and the free-port helper live in testkit
(bench and soak start them too).

`store` is parametrised over the local-directory store and the S3 store on a
moto server, so a test that takes it runs against both backends.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import testkit.moto_s3

# moto needs credentials present, never real ones.
testkit.moto_s3.fake_credentials()

# Airflow reads its configuration once, at import: point it at a private home
# (SQLite database, this repository's dags/ and plugins/) before anything imports it.
REPO = Path(__file__).resolve().parent.parent
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="kfs-airflow-home-"))
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)
os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}"
# py4j logs "Closing down clientserver connection" from a finaliser at interpreter
# exit, after Airflow's logging set-up has closed its stream: a traceback, not a failure.
logging.getLogger("py4j").setLevel(logging.WARNING)


SmallDisk = Callable[[int], Path]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """Mounts a tmpfs of the asked size (bytes) under ``tmp_path``: a real disk that fills up.

    Root only; skipped where mounting is not allowed.  Unmounted afterwards.
    """
    mounts: list[Path] = []

    def mount(size: int) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        target = tmp_path / f"small-disk-{len(mounts)}"
        target.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounts.append(target)
        return target

    try:
        yield mount
    finally:
        for target in mounts:
            subprocess.run(["umount", "-l", str(target)], check=False)


def fill_disk(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file; returns it (unlink it to free the space)."""
    filler = disk / "filler"
    chunk = bytes(64 << 10)
    with open(filler, "wb", buffering=0) as f:  # unbuffered: closing has nothing left to write
        try:
            while f.write(chunk):
                pass
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler


def wal_spare_ready(wal_dir: Path, size: int) -> bool:
    """The WAL's next file, prepared ahead, exists at full size (so filling the disk spares it)."""
    return wal_dir.is_dir() and any(
        p.name.endswith(".wal.tmp") and p.stat().st_size == size for p in wal_dir.iterdir()
    )


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server on a free loopback port; yields its endpoint URL."""
    with testkit.moto_s3.moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def s3_bucket(moto_server: str) -> str:
    import boto3

    bucket = "kfs-test-bucket"
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture
def local_store(tmp_path: Path):
    from kfs_core.storage.local import LocalObjectStore

    store = LocalObjectStore(tmp_path / "store")
    yield store
    store.close()


@pytest.fixture
def s3_store(moto_server: str, s3_bucket: str):
    from kfs_core.storage.s3 import S3ObjectStore

    # A fresh prefix per test keeps tests independent on one shared bucket.
    store = S3ObjectStore(s3_bucket, prefix=f"t-{uuid.uuid4().hex[:12]}", endpoint_url=moto_server)
    yield store
    store.close()


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest):
    """The same test against the local-directory store and S3 on moto."""
    return request.getfixturevalue(f"{request.param}_store")
