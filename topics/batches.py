"""The records the pipeline reads, as one Arrow shape whichever the log (RECORDS), and the
key as text: what the builds' SQL reads (spark_pipeline/checks.py casts it to the declared
type, so that topics of every key type share one stream)."""

from __future__ import annotations

import contextlib
import json
import struct
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from contracts.partitioner import KeyType
from contracts.unicode import replaced

APPEND_MS = "append_ms"
RECORDS = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.string()),
        ("value", pa.string()),
        (APPEND_MS, pa.int64()),
    ]
)
_SURROGATE_ESCAPE = r"\\u[dD][89a-fA-F]"  # a JSON escape of a high or low surrogate
_INTEGERS = {"int": ">i", "long": ">q"}


class Span(NamedTuple):
    """[start, end) of one topic partition (offsets: the next to read)."""

    partition: int
    topic: str
    start: int
    end: int


def key_text(key: bytes | None, key_type: KeyType) -> str | None:
    """A key as its serializer wrote it (Kafka's String, Integer or Long serializer), as text;
    None without a key. Bytes no serializer of the type writes (invalid UTF-8, the wrong
    length) come as text that is not a key of the type: checks.py refuses the record."""
    if key is None:
        return None
    if key_type == "string":
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            return None
    form = _INTEGERS[key_type]
    if len(key) != struct.calcsize(form):
        return f"0x{key.hex()}"
    return str(struct.unpack(form, key)[0])


def readable(values: pa.Array) -> pa.Array:
    """The values with every lone surrogate replaced by U+FFFD (contracts/unicode.py): the
    few that hold a surrogate escape are decoded and encoded again; a pair stays as it is.
    A foreign producer may write one, and DuckDB's JSON reader refuses it."""
    suspect = pc.match_substring_regex(values, _SURROGATE_ESCAPE)
    if not pc.any(suspect).as_py():
        return values
    texts = values.to_pylist()
    for i, flagged in enumerate(suspect.to_pylist()):
        if flagged:
            with contextlib.suppress(ValueError):  # not JSON: a bad record (checks.py)
                texts[i] = json.dumps(replaced(json.loads(texts[i])), ensure_ascii=False)
    return pa.array(texts, pa.string())


class Letter(NamedTuple):
    """A bad record on its way to a dead-letter topic: as the log held it, and why."""

    offset: int
    timestamp: int | None
    key: str | None  # as text
    value: str | None  # JSON text, or what the log held
    reason: str
    message: str
