"""The compaction job's options: `CompactionOptions` and its command line (`build_parser`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from kfs_core.reports import COMPACTION_JOB
from spark_jobs import common
from spark_jobs.common import JobOptions, UsageError

JOB = COMPACTION_JOB
#: The first line of ``--help``.
DESCRIPTION = (
    "Compaction: merge small segments; key-compact ``cleanup.policy=compact`` topics as Kafka does."
)

MIB = 1 << 20
DEFAULT_MAX_READ_MB_PER_S = 50.0
DEFAULT_MIN_INPUTS = 4
DEFAULT_BATCH_BYTES = MIB
#: zstd level of rebuilt batches unless --compression-level says otherwise.
#: Measured on 1 MiB batches of the JSON-like records of bench/maintenance.py:
#: level 1 saves 80.6 % at about 460 MB/s per core, level 3 (Kafka's producer
#: default) 80.1 % at about 300 MB/s; on other text level 3 saves about one
#: point more.  Compressing is most of the job's CPU, so the job takes 1.
DEFAULT_ZSTD_LEVEL = 1
#: zstd's own bounds for --compression-level (gzip takes 0-9, lz4 0-16).
MIN_LEVEL, MAX_LEVEL = -(1 << 17), 22


@dataclass(frozen=True)
class CompactionOptions(JobOptions):
    """`JobOptions` plus the read budget, the merge threshold and the batch size."""

    max_read_mb_per_s: float = DEFAULT_MAX_READ_MB_PER_S
    min_inputs: int = DEFAULT_MIN_INPUTS
    batch_bytes: int = DEFAULT_BATCH_BYTES
    compression_level: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        level = self.compression_level
        if level is not None and not MIN_LEVEL <= level <= MAX_LEVEL:
            raise UsageError(
                f"--compression-level must be within {MIN_LEVEL}..{MAX_LEVEL}, got {level}"
            )
        if not self.max_read_mb_per_s >= 0:
            raise UsageError(f"--max-read-mb-per-s must be >= 0, got {self.max_read_mb_per_s}")
        if self.min_inputs < 2:
            raise UsageError(f"--min-inputs must be at least 2, got {self.min_inputs}")
        if self.batch_bytes < 1:
            raise UsageError(f"--batch-bytes must be positive, got {self.batch_bytes}")

    @property
    def read_bytes_per_s(self) -> float:
        """The job's total read budget in bytes per second (0: unlimited)."""
        return self.max_read_mb_per_s * MIB


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = common.job_parser(JOB, DESCRIPTION)
    parser.add_argument(
        "--max-read-mb-per-s",
        type=_non_negative_float,
        default=DEFAULT_MAX_READ_MB_PER_S,
        help="total segment read rate of the job in MiB/s, split over task slots "
        "(default 50; 0 = unlimited)",
    )
    parser.add_argument(
        "--min-inputs",
        type=_positive_int,
        default=DEFAULT_MIN_INPUTS,
        help="merge only runs of at least this many adjacent small segments (default 4)",
    )
    parser.add_argument(
        "--batch-bytes",
        type=_positive_int,
        default=DEFAULT_BATCH_BYTES,
        help="target uncompressed size of rebuilt record batches (default 1 MiB)",
    )
    parser.add_argument(
        "--compression-level",
        type=int,
        default=None,
        help=f"codec level of rebuilt batches (default: zstd {DEFAULT_ZSTD_LEVEL}, "
        "gzip 6, lz4 its fast mode; snappy has none)",
    )
    return parser
