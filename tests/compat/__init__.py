"""Tests of the compatibility suites (compat/) in short form, against a real `kfs serve`."""
