"""Tests of the benchmarks (bench/): each runs in a short form and prints its rows.

The only part of tests/ that imports ``bench`` (tests/test_layers.py holds
that line); what the benchmarks share with the tests lives in testkit.
"""
