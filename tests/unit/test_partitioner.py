from __future__ import annotations

import random
import struct

import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2

from contracts.partitioner import murmur2, partition_for, partitions_for, serialize_key

KAFKA_VECTORS = {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742}


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items())
def test_kafka_vectors_for_1000_partitions(data: bytes, expected: int) -> None:
    assert (murmur2(data) & 0x7FFFFFFF) % 1000 == expected


def test_murmur2_of_empty_input() -> None:
    assert murmur2(b"") == 275646681


def test_agrees_with_kafka_python_on_random_bytes() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        assert murmur2(data) & 0x7FFFFFFF == kafka_murmur2(data) & 0x7FFFFFFF


def test_serializers_match_kafkas_wire_bytes() -> None:
    assert serialize_key("é-1", "string") == "é-1".encode()
    assert serialize_key(-2, "int") == struct.pack(">i", -2)
    assert serialize_key(2**40, "long") == struct.pack(">q", 2**40)
    with pytest.raises(TypeError):
        serialize_key(3, "string")
    with pytest.raises(TypeError):
        serialize_key("3", "int")


def test_integer_keys_route_like_kafka_python() -> None:
    for key in [0, 1, -1, 42, 2**31 - 1, -(2**31)]:
        expected = (kafka_murmur2(struct.pack(">i", key)) & 0x7FFFFFFF) % 9
        assert partition_for(key, "int", 9) == expected


@pytest.mark.parametrize("key_type", ["string", "int", "long"])
def test_many_keys_at_once_route_like_kafka_python(key_type: str) -> None:
    rng = random.Random(8)
    alphabet = "abcXYZ09é日🚆\x00"
    for _ in range(60):
        size = rng.choice([1, 5, 31, 32, 33, 300])
        # ASCII ids of one width (NUL included) are encoded at once; the rest key by key
        letters = rng.choice([alphabet, "abcXYZ09\x00"])
        width = rng.choice([None, 0, 1, 4, 7, 36])  # None: each key its own length
        if key_type == "string":
            keys: list = [
                "".join(rng.choices(letters, k=rng.randrange(0, 13) if width is None else width))
                for _ in range(size)
            ]
        else:
            bits = 31 if key_type == "int" else 63
            keys = [rng.randrange(-(2**bits), 2**bits) for _ in range(size)]
        partitions = rng.choice([1, 3, 9, 1000])
        expected = [
            (kafka_murmur2(serialize_key(k, key_type)) & 0x7FFFFFFF) % partitions  # type: ignore[arg-type]
            for k in keys
        ]
        assert partitions_for(keys, key_type, partitions) == expected  # type: ignore[arg-type]
