"""Tests of the Spark maintenance jobs: compaction, retention, checkpoints, validation."""
