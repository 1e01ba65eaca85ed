"""The daemon's ``/metrics`` (Prometheus text format) read back as numbers.

`parse_metrics` turns a scrape into ``{series: value}`` where the series is
the metric name with its labels as written (``kfs_requests_total{api="PRODUCE"}``);
`series_delta` is how much a metric grew between two scrapes.
"""

from __future__ import annotations


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format as {series (name plus labels): value}."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            values[series] = float(value)
    return values


def series_delta(
    after: dict[str, float], before: dict[str, float], name: str, labels: str = ""
) -> float:
    """How much the daemon's series ``name`` (those with ``labels``, summed) grew between scrapes."""
    return sum(
        value - before.get(series, 0.0)
        for series, value in after.items()
        if series.split("{", 1)[0] == name and labels in series
    )
