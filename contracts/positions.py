"""Positions (KIP-796): which offsets of which (topic, partition) an answer reflects.

A position is a mapping (topic, partition) -> next offset to read. Positions merge by the
maximum offset per (topic, partition). A consistency token is a position made opaque: the
client sends it back as a bound and gets monotonic reads on any node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from contracts import opaque
from contracts.errors import GatewayError

Position = dict[tuple[str, int], int]
TOKEN_VERSION = 1


def merge(positions: Iterable[Mapping[tuple[str, int], int]]) -> Position:
    merged: Position = {}
    for position in positions:
        for tp, offset in position.items():
            if offset > merged.get(tp, -1):
                merged[tp] = offset
    return merged


def of_partition(partition: int, offsets: Mapping[str, int]) -> Position:
    return {(topic, partition): offset for topic, offset in offsets.items()}


def restrict(bound: Position, partition: int) -> dict[str, int]:
    """The part of a bound that concerns one partition, as topic -> offset."""
    return {topic: offset for (topic, p), offset in bound.items() if p == partition}


def satisfies(offsets: Mapping[str, int], bound: Mapping[str, int]) -> bool:
    """True when a replica at `offsets` is at or past every offset of `bound`."""
    return all(offsets.get(topic, 0) >= offset for topic, offset in bound.items())


def encode_token(position: Position) -> str:
    tree: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(position.items()):
        tree.setdefault(topic, {})[str(partition)] = offset
    return opaque.encode({"v": TOKEN_VERSION, "p": tree})


def decode_token(token: str) -> Position:
    try:
        if not token:
            raise ValueError("it is empty")
        body = opaque.decode(token)
        if not isinstance(body, dict) or type(body.get("v")) is not int:
            raise ValueError("not a token")
        if body["v"] != TOKEN_VERSION:
            raise ValueError("unknown token version")
        tree = body.get("p")
        if not isinstance(tree, dict) or not all(isinstance(v, dict) for v in tree.values()):
            raise ValueError("no position in it")
        return {
            (str(topic), _partition(p)): _offset(offset)
            for topic, parts in tree.items()
            for p, offset in parts.items()
        }
    except (ValueError, KeyError) as exc:  # OpaqueError is a ValueError
        raise GatewayError(
            "BAD_CONSISTENCY_TOKEN", f"consistency token is not one this gateway issued: {exc}"
        ) from exc


def _partition(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or (text != "0" and text.startswith("0")):
        raise ValueError(f"partition {text!r} is not a partition number")
    return int(text)


def _offset(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"offset {value!r} is not a non-negative integer")
    return value
