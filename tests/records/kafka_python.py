"""kafka-python's record and codec code, imported for cross-checks.

kafka-python 3.0 loads its protocol JSON schemas at import time through
``importlib.resources.read_text`` / ``open_text``, which Python 3.11
deprecates; pytest turns those warnings into errors.  The filter below covers
exactly those two warnings, and only while kafka-python is imported.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings(
        "ignore",
        message=r"(read_text|open_text) is deprecated",
        category=DeprecationWarning,
    )
    from kafka import codec as kafka_codec
    from kafka.record._crc32c import crc as pure_python_crc32c
    from kafka.record.default_records import (
        ControlRecord,
        DefaultRecordBatch,
        DefaultRecordBatchBuilder,
    )
    from kafka.record.memory_records import MemoryRecords
    from kafka.record.util import decode_varint, encode_varint

__all__ = [
    "ControlRecord",
    "DefaultRecordBatch",
    "DefaultRecordBatchBuilder",
    "MemoryRecords",
    "decode_varint",
    "encode_varint",
    "kafka_codec",
    "pure_python_crc32c",
]
