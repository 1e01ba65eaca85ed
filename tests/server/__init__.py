"""Tests of kfs_core.server: the wire protocol, the APIs and a real `kfs serve` under clients."""
