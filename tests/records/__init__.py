"""Tests of kfs_core.records: RecordBatch v2, codecs, CRCs, varints, merges and rewrites."""
