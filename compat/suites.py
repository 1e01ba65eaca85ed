"""Outcomes of a compatibility suite, the expected-failure list, and the table `make compat` prints.

A suite reports an `Outcome` per test: ``passed``, ``failed`` or
``skipped`` (by the suite itself, for example a test needing a feature the
server does not advertise).  ``compat/expected_failures.txt`` holds one
line per test expected to fail, ``suite<TAB>test<TAB>reason``; `judge`
finds the surprises: a failure not on the list, and a listed test that
passed.  Either makes the run fail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "EXPECTED_FAILURES",
    "Outcome",
    "SuiteResult",
    "judge",
    "load_expected",
    "render_table",
]

EXPECTED_FAILURES = Path(__file__).with_name("expected_failures.txt")

Status = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True)
class Outcome:
    """One test of a suite: its name (unique in the suite), status and, for a failure, why."""

    test: str
    status: Status
    detail: str = ""


@dataclass
class SuiteResult:
    """Every outcome of one suite run, and how long it took."""

    suite: str
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: Status) -> int:
        return sum(1 for o in self.outcomes if o.status == status)


def load_expected(path: Path = EXPECTED_FAILURES) -> dict[tuple[str, str], str]:
    """``{(suite, test): reason}`` from the list; `ValueError` for a line without a reason."""
    expected: dict[tuple[str, str], str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not all(p.strip() for p in parts):
            raise ValueError(f"{path.name}:{number}: expected suite<TAB>test<TAB>reason")
        expected[(parts[0], parts[1])] = parts[2].strip()
    return expected


def judge(results: Iterable[SuiteResult], expected: Mapping[tuple[str, str], str]) -> list[str]:
    """The surprises, one line each: new failures and expected failures that passed."""
    surprises = []
    for result in results:
        for outcome in result.outcomes:
            listed = (result.suite, outcome.test) in expected
            if outcome.status == "failed" and not listed:
                surprises.append(f"{result.suite} {outcome.test}: failed: {outcome.detail}")
            elif outcome.status == "passed" and listed:
                surprises.append(
                    f"{result.suite} {outcome.test}: passed, but is listed as an expected "
                    "failure: remove it from compat/expected_failures.txt"
                )
    return surprises


def render_table(results: Sequence[SuiteResult], expected: Mapping[tuple[str, str], str]) -> str:
    """Suite, tests run, passed, failed (of them expected), skipped, seconds: Markdown."""
    lines = [
        "| suite | run | passed | failed | of them expected | skipped | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        failed = [o for o in r.outcomes if o.status == "failed"]
        known = sum(1 for o in failed if (r.suite, o.test) in expected)
        run = r.count("passed") + len(failed)
        lines.append(
            f"| {r.suite} | {run} | {r.count('passed')} | {len(failed)} | {known} "
            f"| {r.count('skipped')} | {r.seconds:.0f} |"
        )
    return "\n".join(lines)
