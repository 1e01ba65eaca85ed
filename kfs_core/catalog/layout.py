"""Object keys of the catalog and of the segments it names.

Everything for a partition lives under ``{ns}/{topic}/{partition}/``::

    segment-{base_offset:020d}.kfs          segment data (key relative to {ns} in the catalog)
    segment-{base_offset:020d}.index        its offset index
    segment-{base_offset:020d}-e{epoch}.kfs a segment a daemon wrote as leader epoch `epoch`
    segment-{base_offset:020d}-c{run}.kfs   a compaction output (-m{run} merged; -r{hex} restored)
    _log/{version:020d}.json                commit `version` (0 is the first)
    _log/{version:020d}.checkpoint.json     full partition state at `version`
    _log/_last_checkpoint                   pointer to the newest checkpoint (a hint)

Twenty-digit zero padding makes key order version (and offset) order, so a
listing with ``start_after`` resumes exactly where a reader left off; in key
order ``N.checkpoint.json`` sorts before ``N.json`` and ``_last_checkpoint``
after every version.  A daemon that leads the partition as leader epoch
``E > 0`` writes its segments under keys suffixed `epoch_suffix` (``-eE``),
so a deposed owner's upload never lands on its successor's key; epoch 0 (a
partition never leased) keeps the plain keys.  The topic registry lives in
``{ns}/_topics/``; every directory directly under a namespace is named in
`kfs_core.namespace`.
"""

from __future__ import annotations

import re

from kfs_core.namespace import TOPICS_DIR

VERSION_DIGITS = 20
LOG_DIR = "_log"
POINTER_NAME = "_last_checkpoint"
COMMIT_SUFFIX = ".json"
CHECKPOINT_SUFFIX = ".checkpoint.json"
SEGMENT_SUFFIX = ".kfs"
INDEX_SUFFIX = ".index"

_LOG_ENTRY = re.compile(r"^(\d{20})(\.checkpoint)?\.json$")


def join(*parts: str) -> str:
    """Join key parts with '/', skipping empty ones (an empty namespace is allowed)."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def partition_dir(topic: str, partition: int) -> str:
    """``{topic}/{partition}``: the partition's directory relative to the namespace."""
    return f"{topic}/{partition}"


def segment_key(topic: str, partition: int, base_offset: int, suffix: str = "") -> str:
    """The segment key relative to the namespace.

    ``suffix`` distinguishes objects that share a base offset: segments are
    immutable, so a compacted output starting at an input's base offset needs
    a key of its own (for example ``suffix="-c1"``).  Key order stays offset
    order because the suffix follows the padded offset.
    """
    return f"{partition_dir(topic, partition)}/segment-{base_offset:0{VERSION_DIGITS}d}{suffix}{SEGMENT_SUFFIX}"


def epoch_suffix(epoch: int) -> str:
    """The segment key suffix of leader epoch ``epoch``: "" for 0, ``-e{epoch}`` otherwise."""
    if epoch < 0:
        raise ValueError(f"leader epoch must be >= 0, got {epoch}")
    return f"-e{epoch}" if epoch else ""


def index_key_for(segment_key_: str) -> str:
    """The ``.index`` key that belongs to a ``.kfs`` segment key."""
    if not segment_key_.endswith(SEGMENT_SUFFIX):
        raise ValueError(f"not a segment key: {segment_key_!r}")
    return segment_key_[: -len(SEGMENT_SUFFIX)] + INDEX_SUFFIX


def log_prefix(namespace: str, topic: str, partition: int) -> str:
    """``{ns}/{topic}/{partition}/_log/`` (with the trailing slash)."""
    return join(namespace, partition_dir(topic, partition), LOG_DIR) + "/"


def commit_name(version: int) -> str:
    return f"{version:0{VERSION_DIGITS}d}{COMMIT_SUFFIX}"


def checkpoint_name(version: int) -> str:
    return f"{version:0{VERSION_DIGITS}d}{CHECKPOINT_SUFFIX}"


def parse_log_name(name: str) -> tuple[int, bool] | None:
    """``(version, is_checkpoint)`` for a ``_log/`` entry name, None for anything else."""
    match = _LOG_ENTRY.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2) is not None


def topics_prefix(namespace: str) -> str:
    """``{ns}/_topics/`` (with the trailing slash)."""
    return join(namespace, TOPICS_DIR) + "/"
