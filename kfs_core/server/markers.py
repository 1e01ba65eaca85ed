"""Transaction markers to the partition's leader, this daemon or another: `MarkerRouter`.

The transaction coordinator (`kfs_core.groups.transactions`) has every
partition of a transaction take its commit or abort marker.  A partition
this daemon leads takes it from the log directly
(`kfs_core.log.log_manager.LogManager.write_marker`); one another daemon
leads gets a WriteTxnMarkers request (`kfs_core.cluster.peers`), whose
handler there does the same (`kfs_core.server.apis.transactions`), settling
transactional offsets too where the partition is of ``__consumer_offsets``.
A refusal comes back as the error the local write would have raised, so the
coordinator's retries treat both alike: NOT_LEADER_OR_FOLLOWER (the
partition moved on; the next attempt asks its new leader), an unknown
partition, INVALID_PRODUCER_EPOCH (a newer epoch already wrote there).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from kfs_core.cluster.peers import PeerClient
from kfs_core.cluster.view import ClusterView
from kfs_core.errors import LogError, NotLeaderOrFollower, UnknownTopicOrPartition
from kfs_core.log.producer_state import InvalidProducerEpoch
from kfs_core.server.protocol.messages import WriteTxnMarkersRequest

__all__ = ["MARKER_TIMEOUT_S", "MarkerRouter"]

#: How long one marker append may wait for the WAL (and a peer for its answer).
MARKER_TIMEOUT_S: Final = 30.0
#: WriteTxnMarkers v1: the first flexible version, which every KFS daemon serves.
_VERSION: Final = 1

LocalWrite = Callable[..., Awaitable[object]]


def _refusal(code: int, topic: str, partition: int, node_id: int) -> LogError:
    where = f"{topic}-{partition} (asked node {node_id})"
    if code == UnknownTopicOrPartition.kafka_error_code:
        return UnknownTopicOrPartition(f"{where}: no such partition")
    if code == InvalidProducerEpoch.kafka_error_code:
        return InvalidProducerEpoch(f"{where}: a newer producer epoch wrote there")
    if code == NotLeaderOrFollower.kafka_error_code:
        return NotLeaderOrFollower(f"{where}: not its leader", topic=topic, partition=partition)
    error = LogError(f"{where}: the marker was refused with error code {code}")
    error.kafka_error_code = code  # type: ignore[misc]
    return error


class MarkerRouter:
    """The coordinator's `MarkerWriter`: the local log, or the leading daemon."""

    def __init__(
        self, cluster: Callable[[], ClusterView], write_local: LocalWrite, peers: PeerClient
    ) -> None:
        self._cluster = cluster
        self._write_local = write_local
        self._peers = peers

    async def __call__(
        self,
        topic: str,
        partition: int,
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> object:
        cluster = self._cluster()
        leader = cluster.leader(topic, partition).node_id
        if leader in (-1, cluster.node_id):
            # Here, or nobody yet: the local log takes the partition, or says it may not.
            return await self._write_local(
                topic,
                partition,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                commit=commit,
                coordinator_epoch=coordinator_epoch,
                timeout_s=MARKER_TIMEOUT_S,
            )
        marker = WriteTxnMarkersRequest.WritableTxnMarker
        request = WriteTxnMarkersRequest(
            version=_VERSION,
            markers=[
                marker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=commit,
                    topics=[
                        marker.WritableTxnMarkerTopic(name=topic, partition_indexes=[partition])
                    ],
                    coordinator_epoch=coordinator_epoch,
                )
            ],
        )
        response: Any = await self._peers.request(leader, request)
        for result in response.markers:
            for topic_result in result.topics:
                for partition_result in topic_result.partitions:
                    if partition_result.error_code:
                        raise _refusal(partition_result.error_code, topic, partition, leader)
        return None
