"""Tests of kfs_core.cluster: heartbeats, liveness, the assignment and partition leases."""
