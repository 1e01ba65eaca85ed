"""The data-quality trend as an inline SVG: one bar per validation run, oldest on the left.

A bar is as tall as the run's evaluated expectations: green for those that
passed, red on top for those that failed (darker when a critical one did).
Each bar carries a ``<title>`` (the browser's tooltip) and ``data-*``
attributes, so the chart needs no JavaScript and no CDN, and tests can read it.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

from kfs_airflow.overview import ValidationRun

__all__ = ["trend_svg"]

WIDTH = 640
HEIGHT = 200
_MARGIN_LEFT = 36
_MARGIN_RIGHT = 8
_MARGIN_TOP = 10
_MARGIN_BOTTOM = 34
_PASS = "#3d9a50"
_FAIL = "#d9822b"
_CRITICAL = "#c23030"


def _label(run: ValidationRun) -> str:
    """``MM-DD HH:MM`` of the run's start (run ids begin with their UTC start time)."""
    stamp = run.started_at or ""
    if len(stamp) >= 16 and stamp[4] == "-":
        return f"{stamp[5:10]} {stamp[11:16]}"
    head = run.run_id.split("-", 1)[0]
    if len(head) >= 13 and head[8] == "T":
        return f"{head[4:6]}-{head[6:8]} {head[9:11]}:{head[11:13]}"
    return run.run_id[:11]


def trend_svg(runs: Sequence[ValidationRun]) -> Markup:
    """The SVG for ``runs`` (oldest first, each with a report); empty markup for no runs."""
    if not runs:
        return Markup("")
    top = max(*(r.evaluated for r in runs), 1)
    plot_w = WIDTH - _MARGIN_LEFT - _MARGIN_RIGHT
    plot_h = HEIGHT - _MARGIN_TOP - _MARGIN_BOTTOM
    slot = plot_w / len(runs)
    bar_w = max(4.0, min(40.0, slot * 0.7))
    parts = [
        f'<svg id="dq-trend" class="chart" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="expectations passed and failed per validation run">',
        # axes and the top gridline
        f'<line x1="{_MARGIN_LEFT}" y1="{_MARGIN_TOP + plot_h}" x2="{WIDTH - _MARGIN_RIGHT}" '
        f'y2="{_MARGIN_TOP + plot_h}" class="axis"/>',
        f'<line x1="{_MARGIN_LEFT}" y1="{_MARGIN_TOP}" x2="{WIDTH - _MARGIN_RIGHT}" '
        f'y2="{_MARGIN_TOP}" class="grid"/>',
        f'<text x="{_MARGIN_LEFT - 4}" y="{_MARGIN_TOP + 4}" class="tick" '
        f'text-anchor="end">{top}</text>',
        f'<text x="{_MARGIN_LEFT - 4}" y="{_MARGIN_TOP + plot_h}" class="tick" '
        f'text-anchor="end">0</text>',
    ]
    for i, run in enumerate(runs):
        x = _MARGIN_LEFT + i * slot + (slot - bar_w) / 2
        passed_h = plot_h * run.successful / top
        failed_h = plot_h * run.unsuccessful / top
        base = _MARGIN_TOP + plot_h
        title = escape(
            f"{run.run_id}: {run.successful} of {run.evaluated} expectations passed"
            + (f"; failed: {', '.join(run.failed_expectations)}" if run.failed_expectations else "")
        )
        state = "pass" if run.success else "fail"
        parts.append(
            f'<g class="run {state}" data-run-id="{escape(run.run_id)}" '
            f'data-passed="{run.successful}" data-failed="{run.unsuccessful}">'
            f"<title>{title}</title>"
        )
        if passed_h > 0:
            parts.append(
                f'<rect x="{x:.1f}" y="{base - passed_h:.1f}" width="{bar_w:.1f}" '
                f'height="{passed_h:.1f}" fill="{_PASS}"/>'
            )
        if failed_h > 0:
            colour = _CRITICAL if run.critical_failures else _FAIL
            parts.append(
                f'<rect x="{x:.1f}" y="{base - passed_h - failed_h:.1f}" width="{bar_w:.1f}" '
                f'height="{failed_h:.1f}" fill="{colour}"/>'
            )
        parts.append("</g>")
    # Label the first and last runs (and the middle one when there are many).
    labelled = sorted({0, len(runs) - 1} | ({len(runs) // 2} if len(runs) > 4 else set()))
    for i in labelled:
        x = _MARGIN_LEFT + i * slot + slot / 2
        parts.append(
            f'<text x="{x:.1f}" y="{HEIGHT - 12}" class="tick" text-anchor="middle">'
            f"{escape(_label(runs[i]))}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
