"""Tests of kfs_core.security: SASL, TLS listeners and ACLs."""
