"""Fuzz tests: every decoder of stored bytes decodes or raises a `KfsError`."""
