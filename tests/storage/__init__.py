"""Tests of kfs_core.storage: one contract suite, subclassed per backend."""

import pytest

# The contract suite lives outside a test_*.py module; have pytest rewrite its
# asserts so failures show the values compared.
pytest.register_assert_rewrite("tests.storage.contract", "tests.storage.faults")
