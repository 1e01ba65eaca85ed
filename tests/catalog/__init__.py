"""Tests of kfs_core.catalog: actions, replay, the partition commit log, the topic registry."""
