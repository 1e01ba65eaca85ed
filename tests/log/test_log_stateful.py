"""A Hypothesis state machine drives the log -- append, fetch, flush, restart -- against a dict.

The model is, per partition, the list of acknowledged (offset, value) pairs.
After any sequence of steps: the high watermark is the model's length, every
fetch returns whole batches starting with the one holding its offset and
matching the model record for record, and nothing acknowledged is lost or
duplicated by a flush, a graceful restart or a crash.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kfs_core.log import LogManager
from kfs_core.storage.local import LocalObjectStore
from tests.log.log_helpers import TOPIC, Harness, decode_all, make_batch, read_all

PARTITIONS = 2


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="kfs-log-machine-"))
        self.runner = asyncio.Runner()
        # Small segments and a small pool, so size flushes and backpressure happen.
        self.harness = Harness(
            LocalObjectStore(self.directory / "store"),
            self.directory,
            segment_bytes=1500,
            pool_bytes=16_000,
        )
        self.model: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        self.produced = 0
        self.logs: LogManager = self.runner.run(self._open(create=True))

    async def _open(self, *, create: bool = False) -> LogManager:
        logs = await self.harness.open()
        if create:
            await logs.create_topic(TOPIC, partitions=PARTITIONS)
        return logs

    def teardown(self) -> None:
        try:
            self.runner.run(self.harness.close_all())
        finally:
            self.runner.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    @rule(
        partition=st.integers(0, PARTITIONS - 1),
        counts=st.lists(st.integers(1, 4), min_size=1, max_size=3),
        size=st.integers(1, 300),
    )
    def append(self, partition: int, counts: list[int], size: int) -> None:
        values: list[bytes] = []
        produce = b""
        for count in counts:
            batch_values = [
                f"{self.produced}-{i}:".encode().ljust(size, b".") for i in range(count)
            ]
            self.produced += 1
            values += batch_values
            produce += make_batch(batch_values)
        result = self.runner.run(self.logs.append(TOPIC, partition, produce, timeout_s=10))
        records = self.model[partition]
        assert result.base_offset == len(records)
        records += [(result.base_offset + i, v) for i, v in enumerate(values)]

    @precondition(lambda self: any(self.model.values()))
    @rule(data=st.data(), max_bytes=st.sampled_from([1, 200, 1000, 1 << 20]))
    def fetch(self, data: st.DataObject, max_bytes: int) -> None:
        partition = data.draw(st.sampled_from([p for p, r in self.model.items() if r]))
        records = self.model[partition]
        offset = data.draw(st.integers(0, len(records) - 1))
        result = self.runner.run(self.logs.read(TOPIC, partition, offset, max_bytes))
        assert result.high_watermark == len(records)
        batches = decode_all(result.records)
        assert batches[0].base_offset <= offset <= batches[0].last_offset
        assert len(batches) == 1 or len(result.records) <= max_bytes
        got = [(r.offset, r.value) for b in batches for r in b.records]
        first = batches[0].base_offset
        assert got == records[first : first + len(got)]

    @rule(partition=st.one_of(st.none(), st.integers(0, PARTITIONS - 1)))
    def flush(self, partition: int | None) -> None:
        self.runner.run(self.logs.flush(TOPIC if partition is not None else None, partition))

    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        stop = self.harness.crash if crash else self.harness.shutdown
        self.runner.run(stop(self.logs))
        self.logs = self.runner.run(self._open())

    @invariant()
    def high_watermarks_match_the_model(self) -> None:
        for partition, records in self.model.items():
            hw = self.runner.run(self.logs.high_watermark(TOPIC, partition))
            assert hw == len(records)

    def check_everything(self) -> None:
        for partition, records in self.model.items():
            data = self.runner.run(read_all(self.logs, TOPIC, partition, max_bytes=700))
            assert [(r.offset, r.value) for b in decode_all(data) for r in b.records] == records


class CheckedLogMachine(LogMachine):
    def teardown(self) -> None:
        try:
            self.check_everything()  # every acknowledged record, once, in order
        finally:
            super().teardown()


TestLogMachine = CheckedLogMachine.TestCase
TestLogMachine.settings = settings(
    max_examples=25,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
