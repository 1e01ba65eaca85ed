"""Consumer groups: the group coordinator and committed offsets, with no wire types.

- `coordinator`: `GroupCoordinator`, the one object the group APIs call: a
  thin façade that owns the lifecycle and hands each call to one of
  - `membership`: `GroupMembership`, Kafka's classic group protocol
    (join, sync, heartbeat, leave, static membership, generation fencing,
    rebalance timers), and listing and describing groups;
  - `offsets`: `CommittedOffsets`, committed offsets (commit, fetch, the
    rebuild from ``__consumer_offsets``, OffsetDelete, DeleteGroups,
    retention).
- `model`: the values those parts share: `Group`, `Member`, `GroupState`,
  `GroupSettings`, the join, sync and describe results.
- `offset_log`: committed offsets made durable in ``__consumer_offsets``.
- `consumer_protocol`: the consumer protocol's subscription and assignment
  bytes, read only to describe groups.

A transaction coordinator belongs beside these as a module of its own, as
Kafka keeps its TransactionCoordinator apart from the GroupCoordinator;
transactional offset commits would still be stored by `offsets`.

What the coordinator refuses (`GroupError` and its subclasses, each with
its Kafka error code) lives in `kfs_core.errors` with every other error.
The Kafka APIs over it live in `kfs_core.server.apis.groups`.
"""
