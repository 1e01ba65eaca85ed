"""Writes ``responses.pyi``: typed stubs of every response class, from kafka-python's schemas.

kafka-python builds its message classes at import time from Kafka's JSON
specs, so a type checker sees them as ``Any`` and a misspelled field in a
handler's response shows only when a client reads the answer.  This script
walks each response class's schema (``fields``: name, type, versions,
nullability, nested structs) and writes a stub that declares, per class
and nested struct, its fields and a keyword-only constructor - the top
level one taking the ``version`` it is encoded at - so mypy checks the
field names and types of every response a handler builds.  A field may be
left out, as in Kafka's own generated classes: it takes its spec default.

The stub describes `kfs_core.server.protocol.responses`, which at run time
only re-exports the classes of `kfs_core.server.protocol.messages`: typing
costs nothing per request.  Rerun after a kafka-python upgrade or a new API
in ``MESSAGES`` (tests/server/test_response_stubs.py fails until then):

    python -m kfs_core.server.protocol.response_stubs          # rewrite responses.pyi
    python -m kfs_core.server.protocol.response_stubs --check  # exit 1 if it is stale
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

from kfs_core.server.protocol.messages import MESSAGES

__all__ = ["STUB_PATH", "render"]

STUB_PATH: Final = Path(__file__).with_name("responses.pyi")

# Spec types as the values handlers hand kafka-python for them.
_SIMPLE_TYPES: Final = {
    "bool": "bool",
    "int8": "int",
    "int16": "int",
    "uint16": "int",
    "int32": "int",
    "int64": "int",
    "float64": "float",
    "string": "str",
    "bytes": "bytes | bytearray | memoryview",
    "records": "bytes | bytearray | memoryview",
    "uuid": "uuid.UUID",
    "bitfield": "set[int]",
}

_HEADER: Final = '''"""Typed stubs of the response classes (`kfs_core.server.protocol.responses`).

Generated from kafka-python's message schemas by
`kfs_core.server.protocol.response_stubs`; do not edit, rerun it:
python -m kfs_core.server.protocol.response_stubs
"""

import uuid
from typing import Any

__all__ = [
'''


def _type(spec: Any) -> str:
    # A nested struct's class is declared inside the class whose field it is.
    if spec.is_struct_array():
        annotation = f"list[{spec.type_str}]"
    elif spec.is_struct():
        annotation = spec.type_str
    elif spec.is_array():
        annotation = f"list[{_SIMPLE_TYPES[spec.array_of._type_str]}]"
    else:
        annotation = _SIMPLE_TYPES[spec._type_str]
    # kafka-python encodes a missing uuid as zeros and a missing bitfield as Kafka's "not asked".
    nullable = spec._nullable_versions is not None or spec._type_str in ("bitfield", "uuid")
    return f"{annotation} | None" if nullable else annotation


def _struct(cls: Any, indent: str, *, top: bool) -> list[str]:
    lines = [f"{indent}class {cls.__name__}:"]
    body = indent + "    "
    nested = {
        spec.type_str: spec.data_class
        for spec in cls.fields.values()
        if spec.is_struct() or spec.is_struct_array()
    }
    for data_class in nested.values():
        lines.extend(_struct(data_class, body, top=False))
        lines.append("")
    fields = [(name, _type(spec)) for name, spec in cls.fields.items()]
    lines.extend(f"{body}{name}: {annotation}" for name, annotation in fields)
    lines.append(f"{body}def __init__(")
    lines.append(f"{body}    self,")
    lines.append(f"{body}    *,")
    lines.append(f"{body}    version: int{'' if top else ' | None = None'},")
    lines.extend(f"{body}    {name}: {annotation} = ...," for name, annotation in fields)
    lines.append(f"{body}) -> None: ...")
    if top:
        lines.append(f"{body}@property")
        lines.append(f"{body}def version(self) -> int | None: ...")
        lines.append(f"{body}def encode(self, *args: Any, **kwargs: Any) -> bytes: ...")
    return lines


def render() -> str:
    """The text ``responses.pyi`` should hold."""
    classes = sorted(
        (pair.response for pair in MESSAGES.values()), key=lambda cls: str(cls.__name__)
    )
    lines = [f'    "{cls.__name__}",' for cls in classes]
    lines.append("]")
    for cls in classes:
        lines.append("")
        lines.extend(_struct(cls, "", top=True))
    return _HEADER + "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """Rewrite the stub, or with ``--check`` say whether it is up to date."""
    text = render()
    if "--check" in argv:
        if STUB_PATH.read_text() != text:
            print(f"{STUB_PATH} is stale: python -m {__spec__.name}", file=sys.stderr)
            return 1
        return 0
    STUB_PATH.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
