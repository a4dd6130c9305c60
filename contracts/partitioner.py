"""Kafka's default partitioner: murmur2 over the serializer's bytes, exactly as the Java client.

partition = (murmur2(key_bytes) & 0x7fffffff) % num_partitions, where key_bytes are the
bytes Kafka's StringSerializer (UTF-8), IntegerSerializer (4 bytes, big-endian) or
LongSerializer (8 bytes, big-endian) produce.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from typing import Literal

KeyType = Literal["string", "int", "long"]
Key = str | int

PARTITION_CACHE_SIZE = 65_536  # keys; about 10 MiB
_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as a signed 32-bit int like Java's."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def serialize_key(key: Key, key_type: KeyType) -> bytes:
    """The bytes Kafka's String/Integer/Long serializer writes for `key`."""
    if key_type == "string":
        if not isinstance(key, str):
            raise TypeError(f"expected a string key, got {type(key).__name__}")
        return key.encode("utf-8")
    if isinstance(key, bool) or not isinstance(key, int):
        raise TypeError(f"expected an integer key, got {type(key).__name__}")
    if key_type == "int":
        return struct.pack(">i", key)
    return struct.pack(">q", key)


@lru_cache(maxsize=PARTITION_CACHE_SIZE, typed=True)
def partition_for(key: Key, key_type: KeyType, num_partitions: int) -> int:
    """The partition Kafka's default partitioner assigns to a keyed record (memoized: a
    request computes it for the same keys in more than one place, and dashboards ask for
    the same keys again and again)."""
    return (murmur2(serialize_key(key, key_type)) & 0x7FFFFFFF) % num_partitions
