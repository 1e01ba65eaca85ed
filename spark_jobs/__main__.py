"""``python -m spark_jobs <job> [flags]``: run a maintenance job by name.

``python -m spark_jobs`` alone lists the jobs.  Each job also runs on its own
(``python -m spark_jobs.<job>`` or ``spark-submit spark_jobs/<job>.py``) with
the same flags.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Sequence

import spark_jobs
from kfs_core.reports import EXIT_OK, EXIT_USAGE

_NOT_JOBS = {"common", "server", "__main__"}


def jobs() -> list[str]:
    """Modules of the package that are jobs (they define ``main``)."""
    names = []
    for info in pkgutil.iter_modules(spark_jobs.__path__):
        if info.name in _NOT_JOBS or info.name.startswith("_"):
            continue
        if hasattr(importlib.import_module(f"spark_jobs.{info.name}"), "main"):
            names.append(info.name)
    return sorted(names)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    available = jobs()
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m spark_jobs JOB [flags]   (JOB --help for its flags)")
        print("jobs: " + ", ".join(available))
        return EXIT_OK if args else EXIT_USAGE
    job, rest = args[0].replace("-", "_"), args[1:]
    if job not in available:
        print(f"spark_jobs: unknown job {args[0]!r}; jobs: {', '.join(available)}", file=sys.stderr)
        return EXIT_USAGE
    return int(importlib.import_module(f"spark_jobs.{job}").main(rest))


if __name__ == "__main__":
    sys.exit(main())
