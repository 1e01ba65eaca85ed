"""Tests of kfs_core.log: appends, reads, flushes, compression, the WAL and its recovery."""
