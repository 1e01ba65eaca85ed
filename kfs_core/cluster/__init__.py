"""Several daemons on one namespace: heartbeats, the assignment, partition leases.

The design is in ``docs/architecture.md`` ("High availability").  The rooms:

- `view`: the plain values (`NodeInfo`, `Leader`) and `ClusterView`, what the
  daemon's APIs and its log ask of the cluster (who leads a partition, which
  daemons are live, does this daemon hold a partition and at which epoch).
- `nodes`: the heartbeat documents in ``{ns}/_cluster/nodes/`` and the
  liveness observer (a node is live while its heartbeat's sequence number moves,
  by this daemon's own monotonic clock); `NodeIdInUse`, the refusal to start
  under a node id another live daemon runs as.
- `assignment`: which live node each partition belongs to (rendezvous
  hashing with a fair share per node, then the operator's pins), the same on
  every daemon.
- `reassignments`: the operator's pins (`kfs partitions reassign`), one
  document per version in ``{ns}/_cluster/reassignments/``, and
  `ReassignmentFollower`, the cheap read a daemon makes of them every tick.
- `leases`: `LeaseKeeper`, the loop that writes the heartbeat, reads the
  others', takes the partitions assigned here (a ``lease`` commit in the
  partition's catalog) and hands over the ones assigned elsewhere.

Nothing here imports the daemon's network side; the log and the APIs import it.
"""
