"""A damaged WAL after ``kill -9``, through a real `kfs serve`.

The daemon holds its records in the WAL only (an hour's flush interval), is
killed, and the WAL is damaged on disk before the restart:

* past the last acknowledged frame -- an unacknowledged frame cut midway,
  its tail zeroed, or a bit flipped in it: the daemon starts, reports the torn
  tail at exactly the byte where the acknowledged data ends, and every
  acknowledged record reads back while the unacknowledged one is gone;
* inside acknowledged data: the daemon refuses to start, naming the file and
  byte offset and the way out; started once with ``--wal-accept-loss`` it cuts
  the WAL there, serves the records before the damage, and takes new ones
  from the first offset lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kfs_core.formats.wal import encode_record_frame, scan_wal
from kfs_core.records.batch import Record, encode_batch
from testkit.daemon import Daemon, DaemonFactory
from tests.server.conftest import consume_confluent, create_topic, produce_confluent

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "damaged"
ROUNDS = 8
PER_ROUND = 25
# Nothing leaves the WAL for the store while the test runs.
ARGS = ["--flush-interval-ms", "3600000", "--segment-bytes", "64MiB"]


def _wal_files(daemon: Daemon) -> list[Path]:
    return sorted((daemon.data_dir / "wal").glob("*.wal"))


def _killed_with_acknowledged_records(daemons: DaemonFactory, name: str) -> tuple[Daemon, list]:
    """A daemon killed after ``ROUNDS`` acknowledged produce rounds: one WAL frame each at least."""
    daemon = daemons.start(name=name, extra_args=ARGS)
    create_topic(daemon.bootstrap, 1, TOPIC)
    acked = []
    for r in range(ROUNDS):
        values = [b"round %d record %d" % (r, i) for i in range(PER_ROUND)]
        acked += produce_confluent(daemon.bootstrap, TOPIC, values, partitions=1)
    assert [offset for _, offset, _ in acked] == list(range(ROUNDS * PER_ROUND))
    daemon.kill()
    return daemon, acked


@pytest.mark.parametrize("damage", ["cut-midway", "zeroed-tail", "flipped-bit"])
def test_damage_past_the_last_acknowledged_frame_is_cut_exactly_there(
    daemons: DaemonFactory, damage: str
) -> None:
    daemon, acked = _killed_with_acknowledged_records(daemons, f"torn-{damage}")
    last = _wal_files(daemon)[-1]
    data = bytearray(last.read_bytes())
    end = scan_wal(data, str(last)).end  # where the acknowledged frames end
    unacknowledged = Record(len(acked), 1_700_000_000_000, b"k", b"never acknowledged" * 20)
    frame = bytearray(
        encode_record_frame(TOPIC, 0, encode_batch([unacknowledged], base_offset=len(acked)))
    )
    if damage == "cut-midway":
        frame = frame[: len(frame) // 2]
    elif damage == "zeroed-tail":
        frame[len(frame) // 2 :] = bytes(len(frame) - len(frame) // 2)
    else:
        frame[len(frame) // 2] ^= 0x20
    data[end : end + len(frame)] = frame
    last.write_bytes(bytes(data))

    daemon.start()
    assert f"{last}: torn tail at byte {end}" in daemon.log()
    stored = consume_confluent(daemon.bootstrap, TOPIC, 1, len(acked))
    assert stored == acked
    # The unacknowledged record is gone: the next record takes its offset.
    again = produce_confluent(daemon.bootstrap, TOPIC, [b"after the restart"], partitions=1)
    assert again == [(0, len(acked), b"after the restart")]
    assert daemon.stop() == 0


def test_damage_inside_acknowledged_data_refuses_to_start_until_the_loss_is_accepted(
    daemons: DaemonFactory,
) -> None:
    daemon, acked = _killed_with_acknowledged_records(daemons, "damaged-acknowledged")
    last = _wal_files(daemon)[-1]
    data = bytearray(last.read_bytes())
    frames = [f for f in scan_wal(data, str(last)).frames if f.record().topic == TOPIC]
    victim = frames[len(frames) // 2]
    first_lost = victim.record().base_offset
    assert 0 < first_lost < len(acked)
    data[victim.payload_position + 30] ^= 0x01
    last.write_bytes(bytes(data))

    with pytest.raises(RuntimeError, match="exited early"):
        daemon.start()
    log = daemon.log()
    assert f"{last}: corrupt at byte {victim.position}" in log
    assert "KFS_WAL_ACCEPT_LOSS" in log
    assert last.read_bytes() == bytes(data)  # nothing repaired behind the operator's back

    daemon.args.append("--wal-accept-loss")
    daemon.start()
    assert f"WAL {last} damaged at byte {victim.position}" in daemon.log()
    stored = consume_confluent(daemon.bootstrap, TOPIC, 1, first_lost)
    assert stored == acked[:first_lost]
    again = produce_confluent(daemon.bootstrap, TOPIC, [b"after the cut"], partitions=1)
    assert again == [(0, first_lost, b"after the cut")]
    assert daemon.stop() == 0
