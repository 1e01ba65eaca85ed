"""Tests of kfs_core.groups: the group coordinator and its benchmark."""
