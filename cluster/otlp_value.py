"""An OTLP AnyValue (opentelemetry.proto.common.v1.AnyValue) as plain JSON, the way the
local trace store keeps span attributes.

    string/bool/int/double -> the value; array_value -> a list; kvlist_value -> a dict;
    bytes_value -> base64 text (OTLP's JSON encoding of bytes); unset -> None.

Bounded whoever sends the span: text is cut to `max_text` characters (bytes before
encoding, to the same number of bytes), a list or dict keeps its first `max_items`
entries, and a value nested more than `MAX_DEPTH` levels below its attribute reads as
None.
"""
from __future__ import annotations

import base64

MAX_DEPTH = 4   # levels of arrays / kvlists below an attribute; deeper values read as None
MAX_ITEMS = 64  # entries kept per array or kvlist

_SCALARS = ("string_value", "bool_value", "int_value", "double_value")


def attribute_value(v, max_text: int, depth: int = 0):
    kind = v.WhichOneof("value")
    if kind is None or depth > MAX_DEPTH:
        return None
    if kind in _SCALARS:
        value = getattr(v, kind)
        return value[:max_text] if isinstance(value, str) else value
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value[:max_text]).decode("ascii")
    if kind == "array_value":
        return [attribute_value(x, max_text, depth + 1) for x in v.array_value.values[:MAX_ITEMS]]
    if kind == "kvlist_value":
        return {kv.key[:max_text]: attribute_value(kv.value, max_text, depth + 1)
                for kv in v.kvlist_value.values[:MAX_ITEMS]}
    return None  # a kind newer than this reader
