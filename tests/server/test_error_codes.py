"""The one exception-to-error-code mapping: ``kafka_error_code`` on the `kfs_core.errors` classes.

`error_code_for` reads it; each class's comment names its code, and the
names must be `ErrorCode`'s.
"""

from __future__ import annotations

import inspect
import re

import pytest

from kfs_core import errors
from kfs_core.server.apis.base import Refused, error_code_for
from kfs_core.server.protocol import ErrorCode, UnsupportedVersion

# What the server answered before the codes moved onto the classes (a table beside
# error_code_for), and what the group and log errors carried already.
EXPECTED = [
    (errors.UnknownTopic("t"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (errors.InvalidTopicName("t"), ErrorCode.INVALID_TOPIC_EXCEPTION),
    (errors.TopicAlreadyExists("t"), ErrorCode.TOPIC_ALREADY_EXISTS),
    (errors.InvalidPartitions("n"), ErrorCode.INVALID_PARTITIONS),
    (errors.InvalidConfig("c"), ErrorCode.INVALID_CONFIG),
    (errors.CorruptRecordBatch("crc"), ErrorCode.CORRUPT_MESSAGE),
    (errors.UnsupportedCodec("zz"), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    (errors.WalWriteFailed("fsync"), ErrorCode.KAFKA_STORAGE_ERROR),
    (errors.WalClosed("closed"), ErrorCode.KAFKA_STORAGE_ERROR),
    (errors.ObjectNotFound("k"), ErrorCode.KAFKA_STORAGE_ERROR),
    (errors.TransientStoreError("503"), ErrorCode.KAFKA_STORAGE_ERROR),
    (TimeoutError(), ErrorCode.REQUEST_TIMED_OUT),
    (errors.CorruptCatalog("x"), ErrorCode.UNKNOWN_SERVER_ERROR),
    (errors.CatalogCommitConflict("v"), ErrorCode.UNKNOWN_SERVER_ERROR),
    (errors.KfsError("?"), ErrorCode.UNKNOWN_SERVER_ERROR),
    (ValueError("bug"), ErrorCode.UNKNOWN_SERVER_ERROR),
    (errors.LogError("?"), ErrorCode.UNKNOWN_SERVER_ERROR),
    (errors.OffsetOutOfRange("o"), ErrorCode.OFFSET_OUT_OF_RANGE),
    (errors.LogClosed("c"), ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (errors.RebalanceInProgress("r"), ErrorCode.REBALANCE_IN_PROGRESS),
    (errors.MemberIdRequired("m", member_id="x"), ErrorCode.MEMBER_ID_REQUIRED),
    (errors.GroupError("?"), ErrorCode.UNKNOWN_SERVER_ERROR),
    (Refused(ErrorCode.POLICY_VIOLATION, "no"), ErrorCode.POLICY_VIOLATION),
    (UnsupportedVersion("v9"), ErrorCode.UNSUPPORTED_VERSION),
]


@pytest.mark.parametrize(("exc", "code"), EXPECTED, ids=lambda v: type(v).__name__)
def test_error_code_for(exc: BaseException, code: ErrorCode) -> None:
    assert error_code_for(exc) is code


def test_every_code_in_kfs_core_errors_is_a_kafka_error_code_named_beside_it() -> None:
    source = inspect.getsource(errors)
    named = dict(re.findall(r"kafka_error_code(?:: ClassVar\[int\])? = (-?\d+)  # (\w+)", source))
    classes = [
        c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.KfsError)
    ]
    assert len(named) > 20
    for cls in classes:
        code = cls.kafka_error_code
        if code is not None:
            assert ErrorCode(code).name == named.get(str(code), ErrorCode(code).name), cls
    for code, name in named.items():
        assert ErrorCode[name] == int(code)
