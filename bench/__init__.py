"""Benchmarks (`make bench`): each prints a table beside a same-run baseline, as ratios."""
