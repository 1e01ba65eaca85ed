"""KFS's fault campaigns: repeated crashes (and, later, other faults) against a real daemon.

Each campaign returns a `report.Row`; ``python -m soak`` (``make soak``) runs
the long forms and prints one table, exiting non-zero if any acknowledged
record was lost or changed.  ``make test`` runs a short form of each.
"""
