"""Consumer groups: the group coordinator and committed offsets, with no wire types.

- `coordinator`: `GroupCoordinator`, Kafka's classic group protocol
  (join, sync, heartbeat, leave, static membership, generation fencing),
  committed offsets and their retention, group admin.
- `offset_log`: committed offsets made durable in ``__consumer_offsets``.
- `consumer_protocol`: the consumer protocol's subscription and assignment
  bytes, read only to describe groups.
- `errors`: what the coordinator refuses, with the Kafka error codes.

The Kafka APIs over it live in `kfs_core.server.apis.groups`.
"""
