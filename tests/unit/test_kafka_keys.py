"""A Kafka record's key as the pipeline reads it (topics/batches.py): the text of what the
declared type's serializer wrote, and for bytes no such serializer writes, text that the
record rule refuses as a key of the type (spark_pipeline/checks.py), never another key."""

from __future__ import annotations

import re

import pytest

from contracts.partitioner import serialize_key
from topics.batches import key_text

DECIMAL = re.compile(r"-?\d+")


@pytest.mark.parametrize(
    ("key", "key_type"),
    [("", "string"), ("Zoë 🚆", "string"), (0, "int"), (-(2**31), "int"), (2**31 - 1, "int"),
     (-(2**63), "long"), (2**63 - 1, "long"), (2**53 + 1, "long")],
)  # fmt: skip
def test_a_serialized_key_reads_back_as_its_text(key: object, key_type: str) -> None:
    assert key_text(serialize_key(key, key_type), key_type) == str(key)  # type: ignore[arg-type]


def test_bytes_no_serializer_of_the_type_writes_are_no_key_of_it() -> None:
    assert key_text(None, "string") is None
    assert key_text(b"\xff\xfe", "string") is None  # not UTF-8: a record without a key
    for key_type, wrong in (("int", b"\x00\x01"), ("int", b""), ("long", b"\x00" * 4)):
        text = key_text(wrong, key_type)  # type: ignore[arg-type]
        assert text is not None and not DECIMAL.fullmatch(text), (key_type, wrong)
