"""Tests of kfs_core.cli: the kfs command, its subcommands and the kfs run supervisor."""
