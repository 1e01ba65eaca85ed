"""Every API's error body, pinned: the bytes of what each answered before the schema builder.

The error bodies were one hand-written function per API; most are now
`kfs_core.server.apis.error_bodies.schema_error_body` shapes.  The digests
in ``error_bodies.json`` are those of the hand-written functions' frames
(before they were removed), for six sample requests per served version of
every API, with a code and a message (or none); the builder must give the
same bytes, and so must the error bodies still written by hand.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from kfs_core.server.apis import REGISTRY, SUPPORTED_VERSIONS
from kfs_core.server.apis.context import BrokerOptions
from kfs_core.server.protocol import MESSAGES, ApiKey, ErrorCode, decode_request, encode_response
from tests.server.test_protocol import client_frame, sample_message

PINNED: dict[str, str] = json.loads((Path(__file__).parent / "error_bodies.json").read_text())
OPTIONS = BrokerOptions("broker.example", 9092, "kfs-cluster-id")
SEEDS = 6


def _cases() -> Iterator[tuple[ApiKey, int, int, ErrorCode, str | None]]:
    for key, (low, high) in sorted(SUPPORTED_VERSIONS.items()):
        for version in range(low, high + 1):
            for seed in range(SEEDS):
                code = (ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.TOPIC_AUTHORIZATION_FAILED)[
                    seed % 2
                ]
                yield ApiKey(key), version, seed, code, "boom" if seed % 3 else None


CASES = [pytest.param(*case, id=f"{case[0].name}-v{case[1]}-{case[2]}") for case in _cases()]


def test_every_case_is_pinned() -> None:
    assert len(PINNED) == len(CASES)


@pytest.mark.parametrize(("key", "version", "seed", "code", "message"), CASES)
def test_error_body_bytes_are_unchanged(
    key: ApiKey, version: int, seed: int, code: ErrorCode, message: str | None
) -> None:
    rng = random.Random(f"error-body-{key.name}-{version}-{seed}")
    frame = client_frame(sample_message(MESSAGES[key].request, version, rng), correlation_id=seed)
    request = decode_request(frame[4:], SUPPORTED_VERSIONS)
    body = REGISTRY[key].error_body(request, code, message, OPTIONS)
    digest = hashlib.sha256(encode_response(request, body)).hexdigest()[:16]
    assert digest == PINNED[f"{key.name} v{version} #{seed}"]
