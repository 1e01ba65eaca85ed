"""Tests of kfs_core.formats: segment, index and WAL files, golden bytes and corrupt input."""
