"""Tests of the soak campaigns (soak/) in short form: crash cycles, store faults, fuzzing."""
