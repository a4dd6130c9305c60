"""Kafka's default partitioner: murmur2 over the serializer's bytes, exactly as the Java client.

partition = (murmur2(key_bytes) & 0x7fffffff) % num_partitions, where key_bytes are the
bytes Kafka's StringSerializer (UTF-8), IntegerSerializer (4 bytes, big-endian) or
LongSerializer (8 bytes, big-endian) produce.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal, cast

import numpy as np

KeyType = Literal["string", "int", "long"]
Key = str | int

PARTITION_CACHE_SIZE = 65_536  # keys; about 10 MiB
_VECTOR_FROM = 32  # keys: below this, one by one (numpy's per-call cost dominates)
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


def utf8_keys(keys: Sequence[Key]) -> list[bytes] | None:
    """Every key's UTF-8 bytes, encoded at once, when every key is a str that has them;
    None otherwise (the caller goes key by key, with its own checks)."""
    if set(map(type, keys)) != {str}:
        return None
    try:
        return [key.encode() for key in cast("Sequence[str]", keys)]
    except UnicodeEncodeError:  # a lone surrogate
        return None


def ascii_keys(keys: Sequence[Key]) -> str | None:
    """The keys joined, when every key is an ASCII str (most key sets; its characters are
    then its bytes, one each); None otherwise."""
    if set(map(type, keys)) != {str}:
        return None
    joined = "".join(cast("Sequence[str]", keys))
    return joined if joined.isascii() else None


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


def partitions_for(keys: Sequence[Key], key_type: KeyType, num_partitions: int) -> list[int]:
    """partition_for of many keys: murmur2 vectorized over the keys of each byte length
    (a thousand keys cost about 0.1 ms instead of 2), memoized one by one for a few, and
    for the few of a length (keys of many lengths, as "Köln→Bonn" and its like are, cost
    a vectorized pass per length otherwise)."""
    if len(keys) < _VECTOR_FROM:
        return [partition_for(key, key_type, num_partitions) for key in keys]
    rows = _ascii_rows(keys) if key_type == "string" else None
    if rows is not None:
        found_at_once: list[int] = _partitions(rows, num_partitions).tolist()
        return found_at_once
    encoded = utf8_keys(keys) if key_type == "string" else None
    data = encoded or [serialize_key(key, key_type) for key in keys]
    found = np.empty(len(data), dtype=np.int64)
    lengths = np.fromiter(map(len, data), dtype=np.int64, count=len(data))
    for length in np.unique(lengths).tolist():
        indices = np.flatnonzero(lengths == length).tolist()
        if len(indices) < _VECTOR_FROM:
            found[indices] = [partition_for(keys[i], key_type, num_partitions) for i in indices]
            continue
        joined = b"".join(data if len(indices) == len(data) else [data[i] for i in indices])
        rows = np.frombuffer(joined, dtype=np.uint8).reshape(len(indices), length)
        found[indices] = _partitions(rows, num_partitions)
    partitions: list[int] = found.tolist()
    return partitions


def _ascii_rows(keys: Sequence[Key]) -> np.ndarray | None:
    """The keys' bytes as an (n, length) array when all are ASCII strings of one length
    (most key sets: ids of a fixed width), made at once; None otherwise."""
    joined = ascii_keys(keys)
    if joined is None:
        return None
    lengths = set(map(len, cast("Sequence[str]", keys)))
    if len(lengths) != 1:
        return None
    (length,) = lengths
    return np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(len(keys), length)


def _partitions(rows: np.ndarray, num_partitions: int) -> np.ndarray:
    """The partitions of keys of one length, given as an (n, length) byte array."""
    partitions: np.ndarray = (_murmur2_rows(rows, rows.shape[1]) & 0x7FFFFFFF) % num_partitions
    return partitions


def _murmur2_rows(rows: np.ndarray, length: int) -> np.ndarray:
    """murmur2 (unsigned) of each row of an (n, length) byte array, as murmur2 above."""
    m, mask = np.uint64(_M), np.uint64(_MASK)
    h = np.full(len(rows), (_SEED ^ length) & _MASK, dtype=np.uint64)
    whole = length & ~3
    words = np.ascontiguousarray(rows[:, :whole]).view("<u4").astype(np.uint64)
    for j in range(whole // 4):
        k = (words[:, j] * m) & mask
        k ^= k >> np.uint64(24)
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length & 3
    if tail == 3:
        h ^= rows[:, whole + 2].astype(np.uint64) << np.uint64(16)
    if tail >= 2:
        h ^= rows[:, whole + 1].astype(np.uint64) << np.uint64(8)
    if tail >= 1:
        h ^= rows[:, whole].astype(np.uint64)
        h = (h * m) & mask
    h ^= h >> np.uint64(13)
    h = (h * m) & mask
    h ^= h >> np.uint64(15)
    return h
