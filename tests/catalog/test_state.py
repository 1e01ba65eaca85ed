"""Replay: what each action does to a partition, and every rule a commit must obey."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from kfs_core.catalog import (
    Action,
    AddSegment,
    Commit,
    RemoveSegment,
    ReplaceSegments,
    SegmentEntry,
    SegmentRef,
    SetLogStartOffset,
    SetTopicConfig,
)
from kfs_core.catalog import state as state_module
from kfs_core.catalog.actions import encode_document
from kfs_core.catalog.state import (
    Checkpoint,
    PartitionState,
    StateBuilder,
    decode_checkpoint,
    decode_pointer,
    encode_pointer,
)
from kfs_core.errors import (
    CorruptCatalog,
    InvalidCatalogAction,
    LogStartOffsetRegression,
    RemoveConflict,
    ReplaceConflict,
    SegmentOverlap,
)
from tests.catalog.conftest import PARTITION, TOPIC, seg

HOUR = 3_600_000


def builder(retention_ms: int = HOUR) -> StateBuilder:
    return StateBuilder(TOPIC, PARTITION, tombstone_retention_ms=retention_ms)


def commit(b: StateBuilder, *actions: Action, ts: int = 1_000_000) -> None:
    """Validate as a writer would, then apply as the next version."""
    ops = b.plan(actions)
    b.apply_ops(ops, b.version + 1, ts)


def replay(b: StateBuilder, *actions: Action, ts: int = 1_000_000) -> None:
    version = b.version + 1
    b.apply(
        Commit(
            version=version,
            commit_id=f"c{version}",
            writer="w",
            timestamp_ms=ts,
            operation="t",
            actions=actions,
        ),
        f"_log/{version}",
    )


def add(*segments: SegmentEntry) -> list[Action]:
    return [AddSegment(segment=s) for s in segments]


def remove(segment: SegmentEntry, when: int = 0) -> RemoveSegment:
    return RemoveSegment(key=segment.key, base_offset=segment.base_offset, removed_ms=when)


def replace(
    inputs: Sequence[SegmentEntry], outputs: Sequence[SegmentEntry], when: int = 0
) -> ReplaceSegments:
    return ReplaceSegments(
        inputs=tuple(SegmentRef.of(s) for s in inputs), outputs=tuple(outputs), removed_ms=when
    )


def bases(b: StateBuilder) -> list[int]:
    return [s.base_offset for s in b.snapshot().segments]


# --- replay ------------------------------------------------------------------------


def test_empty_state() -> None:
    state = builder().snapshot()
    assert state.version == -1
    assert state.segments == ()
    assert (state.log_start_offset, state.high_watermark) == (0, 0)


def test_adds_keep_segments_sorted_and_move_the_high_watermark() -> None:
    b = builder()
    commit(b, *add(seg(20), seg(0)))
    commit(b, *add(seg(10)))
    state = b.snapshot()
    assert bases(b) == [0, 10, 20]
    assert state.version == 1
    assert state.high_watermark == 30
    assert state.record_count == 30
    assert state.size_bytes == 3000


def test_remove_makes_a_tombstone_with_its_removal_time() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10)))
    commit(b, remove(seg(0), when=999_000), ts=1_000_000)
    state = b.snapshot()
    assert bases(b) == [10]
    [tombstone] = state.tombstones
    assert (tombstone.key, tombstone.index_key) == (seg(0).key, seg(0).index_key)
    assert tombstone.removed_ms == 999_000
    assert (tombstone.base_offset, tombstone.last_offset, tombstone.size_bytes) == (0, 9, 1000)


def test_replace_swaps_inputs_for_outputs() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10), seg(20)))
    merged = seg(0, 20, suffix="-c1")
    commit(b, replace([seg(0), seg(10)], [merged]))
    state = b.snapshot()
    assert [s.key for s in state.segments] == [merged.key, seg(20).key]
    assert {t.key for t in state.tombstones} == {seg(0).key, seg(10).key}
    assert state.high_watermark == 30


def test_compaction_may_leave_offset_gaps() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10)))
    commit(b, replace([seg(0), seg(10)], [seg(2, 3, suffix="-c1"), seg(15, 2, suffix="-c1")]))
    assert bases(b) == [2, 15]
    assert b.snapshot().high_watermark == 20  # never moves back


def test_log_start_offset_moves_forward_only_and_not_past_the_high_watermark() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10)))
    commit(b, SetLogStartOffset(offset=10))
    commit(b, SetLogStartOffset(offset=10))  # idempotent
    assert b.snapshot().log_start_offset == 10
    with pytest.raises(LogStartOffsetRegression, match="may not move back from 10 to 9"):
        b.plan([SetLogStartOffset(offset=9)])
    with pytest.raises(LogStartOffsetRegression, match="past the high watermark 20"):
        b.plan([SetLogStartOffset(offset=21)])
    commit(b, SetLogStartOffset(offset=20))
    assert b.snapshot().log_start_offset == 20


def test_high_watermark_never_moves_back_when_segments_go() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10)))
    commit(b, remove(seg(10)))
    assert b.snapshot().high_watermark == 20
    # ... so the removed offsets cannot be handed out again
    commit(b, *add(seg(20)))
    assert b.snapshot().high_watermark == 30


def test_retention_removes_and_advances_log_start_in_one_commit() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10), seg(20)))
    commit(b, remove(seg(0)), remove(seg(10)), SetLogStartOffset(offset=20))
    state = b.snapshot()
    assert bases(b) == [20]
    assert state.log_start_offset == 20


def test_topic_config_is_the_latest_recorded() -> None:
    b = builder()
    commit(b, SetTopicConfig(configs={"retention.ms": "1"}))
    commit(b, SetTopicConfig(configs={"cleanup.policy": "compact"}))
    assert dict(b.snapshot().config) == {"cleanup.policy": "compact"}


def test_state_lookups() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10), seg(30)))
    state = b.snapshot()
    assert state.segment_for(0) == seg(0)
    assert state.segment_for(19) == seg(10)
    assert state.segment_for(25) is None
    assert state.segment_for(40) is None
    assert [s.base_offset for s in state.segments_from(15)] == [10, 30]
    assert [s.base_offset for s in state.segments_from(25)] == [30]
    assert list(state.segments_from(40)) == []
    assert state.find(seg(10).key) == seg(10)
    assert state.find("nope") is None


# --- the rules -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "count"),
    [(10, 10), (5, 10), (15, 10), (12, 3), (0, 40), (19, 1), (0, 11)],
    ids=["same", "left", "right", "inside", "around", "last-offset", "first-offset"],
)
def test_overlapping_add_is_rejected(base: int, count: int) -> None:
    b = builder()
    commit(b, *add(seg(10)))
    with pytest.raises(
        SegmentOverlap, match=r"overlaps live segment .*segment-00000000000000000010"
    ):
        b.plan(add(seg(base, count, suffix="-x")))


def test_adjacent_and_out_of_order_adds_are_fine() -> None:
    b = builder()
    commit(b, *add(seg(10)))
    commit(b, *add(seg(20), seg(0)))
    commit(b, *add(seg(50)))  # gaps are allowed
    assert bases(b) == [0, 10, 20, 50]


def test_adds_within_one_commit_may_not_overlap_each_other() -> None:
    with pytest.raises(SegmentOverlap):
        builder().plan(add(seg(0), seg(5, suffix="-x")))


def test_add_below_the_log_start_offset_is_rejected() -> None:
    b = builder()
    commit(b, *add(seg(10)))
    commit(b, remove(seg(10)), SetLogStartOffset(offset=20))
    with pytest.raises(SegmentOverlap, match="below the log start offset 20"):
        b.plan(add(seg(15, 5, suffix="-x")))


def test_segment_keys_are_never_reused() -> None:
    b = builder()
    commit(b, *add(seg(0)))
    with pytest.raises(InvalidCatalogAction, match="already in the catalog"):
        b.plan(add(seg(0, 5)))  # same key, different range
    commit(b, remove(seg(0)))
    with pytest.raises(InvalidCatalogAction, match="awaits deletion"):
        b.plan(add(seg(0)))


def test_keys_must_be_in_the_partition_directory() -> None:
    with pytest.raises(InvalidCatalogAction, match="not in this partition's directory orders/0/"):
        builder().plan(add(seg(0, partition=1)))


def test_replace_with_an_input_removed_meanwhile_conflicts() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10)))
    commit(b, remove(seg(10)))
    with pytest.raises(ReplaceConflict, match=r"no longer live: .*segment-00000000000000000010"):
        b.plan([replace([seg(0), seg(10)], [seg(0, 20, suffix="-c1")])])


def test_replace_outputs_must_stay_within_the_inputs_offsets() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10), seg(20)))
    with pytest.raises(InvalidCatalogAction, match="outside its inputs' offsets"):
        b.plan([replace([seg(0)], [seg(0, 11, suffix="-c1")])])


def test_replace_outputs_may_not_overlap() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10)))
    with pytest.raises(SegmentOverlap):
        b.plan([replace([seg(0), seg(10)], [seg(0, 12, suffix="-a"), seg(10, 10, suffix="-b")])])


def test_replace_names_each_input_once() -> None:
    b = builder()
    commit(b, *add(seg(0)))
    with pytest.raises(InvalidCatalogAction, match="twice"):
        b.plan([replace([seg(0), seg(0)], [])])


def test_remove_of_a_segment_not_live_conflicts() -> None:
    b = builder()
    commit(b, *add(seg(0)))
    commit(b, remove(seg(0)))
    with pytest.raises(RemoveConflict):
        b.plan([remove(seg(0))])
    with pytest.raises(ReplaceConflict):  # a remove is a replace without outputs
        b.plan([remove(seg(0))])


def test_a_ref_must_name_the_right_base_offset() -> None:
    b = builder()
    commit(b, *add(seg(0)))
    with pytest.raises(InvalidCatalogAction, match="starts at 0, not 3"):
        b.plan([RemoveSegment(key=seg(0).key, base_offset=3, removed_ms=0)])


def test_a_failing_commit_changes_nothing() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10)))
    before = b.snapshot()
    with pytest.raises(ReplaceConflict):
        b.plan([remove(seg(0)), SetLogStartOffset(offset=10), replace([seg(0)], [])])
    assert b.snapshot() == before


def test_apply_requires_the_next_version() -> None:
    b = builder()
    with pytest.raises(Exception, match="cannot apply version 5 on top of -1"):
        b.apply_ops([], 5, 0)


def test_a_replayed_commit_that_does_not_apply_is_corruption() -> None:
    b = builder()
    replay(b, *add(seg(0)))
    with pytest.raises(CorruptCatalog, match="does not apply to version 0") as caught:
        replay(b, *add(seg(5, suffix="-x")))
    assert caught.value.object_name == "_log/1"


def test_replay_does_not_apply_writer_only_checks() -> None:
    # A reader with a longer tombstone retention may still hold a tombstone a
    # writer had already expired; replaying the writer's commit must not fail.
    b = builder()
    replay(b, *add(seg(0)))
    replay(b, remove(seg(0)))
    b.plan(add(seg(0)), writer_checks=False)


# --- tombstone expiry, checkpoints -----------------------------------------------------


def test_tombstones_expire_on_the_log_clock() -> None:
    b = builder(retention_ms=1000)
    commit(b, *add(seg(0), seg(10)), ts=10_000)
    commit(b, remove(seg(0), when=10_000), ts=10_000)
    assert len(b.snapshot().tombstones) == 1
    commit(b, *add(seg(20)), ts=11_000)  # exactly at the edge: kept
    assert len(b.snapshot().tombstones) == 1
    commit(b, *add(seg(30)), ts=11_001)
    assert b.snapshot().tombstones == ()


def test_tombstone_expiry_does_not_depend_on_where_replay_started() -> None:
    full = builder(retention_ms=1000)
    replay(full, *add(seg(0), seg(10), seg(20)), ts=0)
    replay(full, remove(seg(0), when=0), ts=0)
    checkpoint = decode_checkpoint(full.encode_checkpoint(), "cp", 1)
    replay(full, remove(seg(10), when=900), ts=900)
    replay(full, *add(seg(30)), ts=1500)

    resumed = StateBuilder.from_checkpoint(
        checkpoint, TOPIC, PARTITION, "cp", tombstone_retention_ms=1000
    )
    replay(resumed, remove(seg(10), when=900), ts=900)
    replay(resumed, *add(seg(30)), ts=1500)
    assert resumed.snapshot() == full.snapshot()
    assert [t.key for t in full.snapshot().tombstones] == [seg(10).key]


def test_checkpoint_round_trip() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10), seg(20)))
    commit(
        b,
        replace([seg(0), seg(10)], [seg(0, 20, suffix="-c1")]),
        SetTopicConfig(configs={"a": "b"}),
    )
    data = b.encode_checkpoint()
    checkpoint = decode_checkpoint(data, "cp", 1)
    assert isinstance(checkpoint, Checkpoint)
    restored = StateBuilder.from_checkpoint(checkpoint, TOPIC, PARTITION, "cp")
    assert restored.snapshot() == b.snapshot()
    assert restored.encode_checkpoint() == data  # stable bytes
    text = data.decode()
    assert text.count("\n") == 2 + 2 + 2 + 1  # header, 2 segments, "],"tombstones", 2, end


def test_checkpoint_with_overlapping_segments_is_corrupt() -> None:
    b = builder()
    commit(b, *add(seg(0), seg(10)))
    data = b.encode_checkpoint().replace(b'"base_offset":10,', b'"base_offset":5,')
    with pytest.raises(CorruptCatalog, match="overlap") as caught:
        StateBuilder.from_checkpoint(decode_checkpoint(data, "cp", 0), TOPIC, PARTITION, "cp")
    assert caught.value.object_name == "cp"


def test_checkpoint_of_the_wrong_version_is_corrupt() -> None:
    b = builder()
    commit(b, *add(seg(0)))
    with pytest.raises(CorruptCatalog, match="key says 3"):
        decode_checkpoint(b.encode_checkpoint(), "cp", 3)


def test_pointer_round_trip() -> None:
    pointer = decode_pointer(encode_pointer(40, 1234), "p")
    assert (pointer.version, pointer.size) == (40, 1234)
    with pytest.raises(CorruptCatalog):
        decode_pointer(b"{}", "p")


# --- a long partition: a commit costs what it changes, not what the state holds ----


def _reference_checkpoint(b: StateBuilder) -> bytes:
    """The checkpoint bytes, encoded from scratch from the state (no kept lines or blocks)."""
    state = b.snapshot()
    header = {
        "format": 1,
        "version": state.version,
        "timestamp_ms": state.timestamp_ms,
        "log_start_offset": state.log_start_offset,
        "high_watermark": state.high_watermark,
        "config": dict(state.config),
    }
    return encode_document(
        header,
        [
            ("segments", [s.model_dump_json() for s in state.segments]),
            ("tombstones", [t.model_dump_json() for t in state.tombstones]),
        ],
    )


def test_flushes_compactions_and_expiry_keep_state_and_checkpoint_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Random flushes, out-of-order adds, retention and compaction, against a plain model.

    The builder extends its last snapshot on a flush's commit and keeps the
    checkpoint's lines in blocks (4 lines here, so many blocks form); every
    step's state, `gone_since`, `holds` and checkpoint bytes must match what
    a rebuild from scratch gives.
    """
    monkeypatch.setattr(state_module, "_BLOCK_LINES", 4)
    rng = random.Random(20261126)
    b = builder(retention_ms=5_000)
    live: dict[int, SegmentEntry] = {}  # the model: base offset -> live segment
    gaps: list[int] = []  # free 10-offset ranges below the newest segment
    removed: list[SegmentEntry] = []
    next_base, ts, made = 0, 0, 0
    previous = b.snapshot()
    for step in range(300):
        ts += 500
        roll = rng.random()
        sorted_live = [live[k] for k in sorted(live)]
        if roll < 0.6 or len(live) < 3:  # a flush: one or two segments after all others
            new = [seg(next_base), seg(next_base + 20)][: rng.randint(1, 2)]
            gaps.append(next_base + 10)
            next_base += 40
            commit(b, *add(*new), ts=ts)
            live.update((s.base_offset, s) for s in new)
        elif roll < 0.7 and gaps:  # an add below others (out of order)
            base = gaps.pop(rng.randrange(len(gaps)))
            commit(b, *add(seg(base)), ts=ts)
            live[base] = seg(base)
        elif roll < 0.85:  # retention: the oldest goes
            oldest = sorted_live[0]
            commit(b, remove(oldest, when=ts), ts=ts)
            del live[oldest.base_offset]
            removed.append(oldest)
        else:  # compaction: two neighbours become one
            i = rng.randrange(len(sorted_live) - 1)
            first, second = sorted_live[i], sorted_live[i + 1]
            made += 1
            span = second.last_offset - first.base_offset + 1
            merged = seg(first.base_offset, span, suffix=f"-c{made}")
            commit(b, replace([first, second], [merged], when=ts), ts=ts)
            gaps = [g for g in gaps if not first.base_offset <= g <= second.last_offset]
            del live[first.base_offset], live[second.base_offset]
            live[merged.base_offset] = merged
            removed += [first, second]
        state = b.snapshot()
        assert state.segments == tuple(live[k] for k in sorted(live)), f"step {step}"
        live_keys = {s.key for s in live.values()}
        expected_gone = [s.key for s in previous.segments if s.key not in live_keys]
        assert [s.key for s in state.gone_since(previous)] == expected_gone
        assert all(state.holds(s) for s in live.values())
        assert not any(state.holds(s) for s in removed[-20:])
        unexpired = {s.key for s in removed if ts - 5_000 <= _removed_at(state, s)}
        assert {t.key for t in state.tombstones} == unexpired
        if step % 10 == 0:
            assert b.encode_checkpoint() == _reference_checkpoint(b), f"step {step}"
            _assert_lines_held_once(b)
        previous = state
    assert b.encode_checkpoint() == _reference_checkpoint(b)
    _assert_lines_held_once(b)
    assert len(removed) > 20 and made > 10  # the run did exercise each kind of change


def _assert_lines_held_once(b: StateBuilder) -> None:
    """A segment's checkpoint line is kept once: in a block, or in the builder's dict."""
    blocked = b._block_order[b._block_first : b._block_first + b._blocked]
    in_blocks = {s.key for s in blocked}
    assert b._blocked == sum(block.count(b"\n") + 1 for block in b._segment_blocks)
    assert not in_blocks & b._lines.keys()
    state = b.snapshot()
    live_or_gone = {s.key for s in state.segments} | {"\0" + t.key for t in state.tombstones}
    assert b._lines.keys() <= live_or_gone


def _removed_at(state: PartitionState, segment: SegmentEntry) -> int:
    """When ``segment`` was removed, per its tombstone; -inf-like when it has expired."""
    for t in state.tombstones:
        if t.key == segment.key:
            return t.removed_ms
    return -(10**18)


def test_gone_since_a_state_loaded_from_a_checkpoint_looks_at_the_segments() -> None:
    """A state loaded cold cannot know what was removed before its checkpoint: it compares."""
    full = builder()
    replay(full, *add(seg(0), seg(10), seg(20)))
    before = full.snapshot()
    replay(full, remove(seg(0)))
    checkpoint = decode_checkpoint(full.encode_checkpoint(), "cp", 1)
    loaded = StateBuilder.from_checkpoint(checkpoint, TOPIC, PARTITION, "cp")
    replay(loaded, *add(seg(30)))
    assert loaded.snapshot().gone_since(before) == [seg(0)]
    assert loaded.snapshot().gone_since(full.snapshot()) == []
    assert full.snapshot().removals_through == 1
    assert before.removals_through == -1


def test_a_flush_commit_extends_the_last_snapshot() -> None:
    """The segments a flush adds are appended to the previous state's tuple, entries shared."""
    b = builder()
    commit(b, *add(*(seg(10 * i) for i in range(1000))))
    first = b.snapshot()
    commit(b, *add(seg(10_000), seg(10_010)))
    second = b.snapshot()
    assert second.segments[:1000] == first.segments
    assert all(x is y for x, y in zip(second.segments, first.segments, strict=False))
    assert second.segments[1000:] == (seg(10_000), seg(10_010))
    assert second.tombstones is first.tombstones  # nothing removed: the same tuple
    assert second.gone_since(first) == []
    assert second.holds(seg(10_010)) and not first.holds(seg(10_010))


def test_a_loaded_checkpoint_lends_its_lines_to_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    """A builder loaded from a checkpoint file writes the next one from that file's lines."""
    monkeypatch.setattr(state_module, "_BLOCK_LINES", 4)
    b = builder()
    replay(b, *add(*(seg(10 * i) for i in range(10))))
    data = b.encode_checkpoint()
    checkpoint = decode_checkpoint(data, "cp", 0)
    for given in (data, data.replace(b"\n", b"")):  # the file as written; one it cannot split
        restored = StateBuilder.from_checkpoint(checkpoint, TOPIC, PARTITION, "cp", data=given)
        assert restored._blocked == (10 if given is data else 0)
        replay(restored, *add(*(seg(100 + 10 * i) for i in range(5))))
        assert restored.encode_checkpoint() == _reference_checkpoint(restored)
        replay(restored, remove(seg(0)), *add(seg(200)))
        assert restored.encode_checkpoint() == _reference_checkpoint(restored)
        _assert_lines_held_once(restored)
    # A change that reorders before any checkpoint: the loaded file's lines go back to the dict.
    restored = StateBuilder.from_checkpoint(checkpoint, TOPIC, PARTITION, "cp", data=data)
    replay(restored, remove(seg(10)))
    assert restored._lines.keys() == {seg(10 * i).key for i in range(10) if i != 1}
    assert restored.encode_checkpoint() == _reference_checkpoint(restored)
    _assert_lines_held_once(restored)


def test_a_partition_of_many_flushes_keeps_each_checkpoint_line_once() -> None:
    """Blocks of 1,024 lines form as flushes come; the dict keeps only the lines after them."""
    b = builder()
    for i in range(2_500):
        commit(b, *add(seg(10 * i)))
        if i % 10 == 9:
            b.encode_checkpoint()
    assert b._blocked == 2_048
    assert len(b._lines) == 2_500 - 2_048
    _assert_lines_held_once(b)
    commit(b, remove(seg(0)), remove(seg(10)))  # retention: the oldest leave their block
    assert b._blocked == 2_046 and len(b._lines) == 2_500 - 2_048
    assert b.encode_checkpoint() == _reference_checkpoint(b)
    _assert_lines_held_once(b)
    commit(b, remove(seg(5_000)))  # from the middle: the blocks' lines go back to the dict
    assert b._blocked == 0
    assert len([k for k in b._lines if not k.startswith("\0")]) == 2_497  # tombstones apart
    assert b.encode_checkpoint() == _reference_checkpoint(b)
    _assert_lines_held_once(b)
