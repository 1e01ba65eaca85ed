"""The soak table: one row per campaign, and whether the campaign kept KFS's promise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Row:
    """What one campaign did and found."""

    campaign: str
    store: str
    cycles: int  # cycles or cases run
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    changed: int = 0
    max_recovery_s: float | None = None  # the longest kill -> /readyz
    seed: int | None = None
    problems: list[str] = field(default_factory=list)  # a line each, the first few of a kind
    details: list[str] = field(default_factory=list)  # figures beyond the columns, a line each

    @property
    def passed(self) -> bool:
        return not (self.lost or self.duplicated or self.changed or self.problems)


COLUMNS = ("campaign", "store", "cycles", "acked", "lost", "dup", "changed", "recovery", "seed")


def format_table(rows: Sequence[Row]) -> str:
    """The rows as a fixed-width table, then each row's details and each failing row's problems."""
    cells = [COLUMNS] + [
        (
            row.campaign,
            row.store,
            str(row.cycles),
            str(row.acknowledged),
            str(row.lost),
            str(row.duplicated),
            str(row.changed),
            "-" if row.max_recovery_s is None else f"{row.max_recovery_s:.2f} s",
            "-" if row.seed is None else str(row.seed),
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        for line in cells
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.extend(f"{row.campaign} ({row.store}): {line}" for row in rows for line in row.details)
    lines.extend(
        f"{row.campaign} ({row.store}): {problem}" for row in rows for problem in row.problems
    )
    return "\n".join(lines)
