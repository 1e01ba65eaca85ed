"""`KfsNewSegmentsSensor`: wait until the catalog holds new segments, and its trigger.

The sensor reads the partition catalogs of a ``kfs`` connection's namespace
(`KfsHook.partition_states`) and is done when either

- a partition's catalog version is beyond the one given for it in
  ``since_versions`` (a daemon flush, a compaction or a retention run committed
  something since), or
- at least ``min_segments`` live segments were created after ``created_after``.

With neither given it waits for segments created after the DAG run started.
It works in ``poke`` and ``reschedule`` mode, and with ``deferrable=True`` it
hands the wait to the triggerer (`KfsNewSegmentsTrigger`).  When done it returns
(as its XCom) the versions it saw - the ``since_versions`` of a later wait::

    {"versions": {"orders/0": 12, ...}, "changed": ["orders/0"], "new_segments": 3}
"""

from __future__ import annotations

import asyncio
import datetime as _dt
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from kfs_airflow.hooks import KfsHook

if TYPE_CHECKING:
    from airflow.sdk import Context

    from kfs_core.catalog import PartitionState

__all__ = ["KfsNewSegmentsSensor", "KfsNewSegmentsTrigger", "new_segments"]


def _topics(value: str | Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    topics = sorted({t.strip() for t in value if t.strip()})
    return topics or None


def _epoch_ms(value: _dt.datetime | str | int | float | None) -> int | None:
    """Milliseconds since the epoch from a datetime, an ISO string or a number of ms."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        value = _dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.UTC)
    return int(value.timestamp() * 1000)


def new_segments(
    states: Iterable[PartitionState],
    *,
    since_versions: int | Mapping[str, int] | None = None,
    created_after_ms: int | None = None,
    min_segments: int = 1,
) -> dict[str, Any] | None:
    """What changed in ``states`` against the baseline; None when nothing did (yet).

    ``since_versions`` is one version for every partition or a map of
    ``"topic/partition"`` to version (partitions missing from it count from -1,
    "no commits", so a new partition counts as changed).
    """
    states = list(states)
    versions = {f"{s.topic}/{s.partition}": s.version for s in states}
    changed: list[str] = []
    if since_versions is not None:
        for key, version in versions.items():
            baseline = (
                since_versions
                if isinstance(since_versions, int)
                else int(since_versions.get(key, -1))
            )
            if version > baseline:
                changed.append(key)
    fresh = 0
    if created_after_ms is not None:
        fresh = sum(1 for s in states for seg in s.segments if seg.created_ms > created_after_ms)
    if changed or (created_after_ms is not None and fresh >= min_segments):
        return {"versions": versions, "changed": changed, "new_segments": fresh}
    return None


class KfsNewSegmentsSensor(BaseSensorOperator):
    """Wait until the topics (or any topic) of a KFS namespace hold new segments.

    :param topics: topics to watch, a list or a comma-separated string; None or
        empty: every topic (templated).
    :param since_versions: catalog version(s) to exceed: one int for every
        partition, or ``{"topic/partition": version}`` such as the ``versions``
        of an earlier run's XCom (templated).
    :param created_after: count segments created after this instant: a datetime,
        an ISO-8601 string (e.g. ``"{{ data_interval_start }}"``) or epoch ms
        (templated).  Default, when ``since_versions`` is None too: the start
        of the DAG run.
    :param min_segments: how many new segments ``created_after`` needs.
    :param kfs_conn_id: the ``kfs`` connection.
    :param deferrable: wait in the triggerer instead of occupying a worker slot.
    """

    template_fields: Sequence[str] = ("topics", "since_versions", "created_after")
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        topics: str | Sequence[str] | None = None,
        since_versions: int | Mapping[str, int] | None = None,
        created_after: _dt.datetime | str | int | None = None,
        min_segments: int = 1,
        kfs_conn_id: str = KfsHook.default_conn_name,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if min_segments < 1:
            raise ValueError(f"min_segments must be >= 1, got {min_segments}")
        self.topics = topics
        self.since_versions = since_versions
        self.created_after = created_after
        self.min_segments = min_segments
        self.kfs_conn_id = kfs_conn_id
        self.deferrable = deferrable

    def _baseline(self, context: Context) -> tuple[int | Mapping[str, int] | None, int | None]:
        since = self.since_versions
        if isinstance(since, str):  # a template rendered without native objects
            since = int(since) if since.strip().lstrip("-").isdigit() else None
        created_after = _epoch_ms(self.created_after)
        if since is None and created_after is None:
            dag_run = context.get("dag_run")
            start = getattr(dag_run, "start_date", None) if dag_run is not None else None
            if start is None:
                raise AirflowException("no baseline: give since_versions or created_after")
            created_after = _epoch_ms(start)
        return since, created_after

    def poke(self, context: Context) -> PokeReturnValue:
        since, created_after = self._baseline(context)
        states = KfsHook(kfs_conn_id=self.kfs_conn_id).partition_states(_topics(self.topics))
        found = new_segments(
            states,
            since_versions=since,
            created_after_ms=created_after,
            min_segments=self.min_segments,
        )
        if found is None:
            self.log.info("no new segments yet in %d partitions", len(states))
        else:
            self.log.info("new segments: %s", found["changed"] or found["new_segments"])
        return PokeReturnValue(is_done=found is not None, xcom_value=found)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        since, created_after = self._baseline(context)
        self.defer(
            trigger=KfsNewSegmentsTrigger(
                kfs_conn_id=self.kfs_conn_id,
                topics=_topics(self.topics),
                since_versions=since,
                created_after_ms=created_after,
                min_segments=self.min_segments,
                poll_interval=float(self.poke_interval),
            ),
            method_name="execute_complete",
            timeout=_dt.timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> Any:
        if event.get("status") != "done":
            raise AirflowException(f"waiting for new segments failed: {event.get('message')}")
        return event["found"]


class KfsNewSegmentsTrigger(BaseTrigger):
    """Polls the catalog every ``poll_interval`` seconds until `new_segments` finds some."""

    def __init__(
        self,
        *,
        kfs_conn_id: str,
        topics: list[str] | None,
        since_versions: int | Mapping[str, int] | None,
        created_after_ms: int | None,
        min_segments: int = 1,
        poll_interval: float = 60.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger.__init__ is unannotated
        self.kfs_conn_id = kfs_conn_id
        self.topics = topics
        self.since_versions = since_versions
        self.created_after_ms = created_after_ms
        self.min_segments = min_segments
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "kfs_conn_id": self.kfs_conn_id,
                "topics": self.topics,
                "since_versions": (
                    dict(self.since_versions)
                    if isinstance(self.since_versions, Mapping)
                    else self.since_versions
                ),
                "created_after_ms": self.created_after_ms,
                "min_segments": self.min_segments,
                "poll_interval": self.poll_interval,
            },
        )

    def _check(self) -> dict[str, Any] | None:
        states = KfsHook(kfs_conn_id=self.kfs_conn_id).partition_states(self.topics)
        return new_segments(
            states,
            since_versions=self.since_versions,
            created_after_ms=self.created_after_ms,
            min_segments=self.min_segments,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                found = await asyncio.to_thread(self._check)
            except Exception as exc:  # noqa: BLE001 - the task reports it
                message = f"{type(exc).__name__}: {exc}"
                # Airflow's TriggerEvent.__init__ is unannotated
                yield TriggerEvent({"status": "error", "message": message})  # type: ignore[no-untyped-call]
                return
            if found is not None:
                yield TriggerEvent({"status": "done", "found": found})  # type: ignore[no-untyped-call]
                return
            await asyncio.sleep(self.poll_interval)
