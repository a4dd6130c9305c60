"""A least-recently-used cache filled on a miss: what the node keeps of the documents it has
seen (parsed, measured, validated, compiled), so a repeated request redoes none of it; and
the documents clients persisted by their hash (resolvers/execution/persisted.py)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """The most recently used values, each made by `make(key)` on a miss (or put there by
    hand): at most `size` of them and, with `weigh`, at most `budget` of their keys' weight
    together (the newest is kept whatever it weighs)."""

    def __init__(
        self,
        size: int,
        make: Callable[[K], V] | None = None,
        weigh: Callable[[K], int] | None = None,
        budget: int = 0,
    ) -> None:
        self.size = size
        self.make = make
        self.weigh = weigh
        self.budget = budget
        self.weight = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.weight = 0

    def __call__(self, key: K) -> V:
        try:
            self._entries.move_to_end(key)
            return self._entries[key][0]
        except KeyError:
            assert self.make is not None, "an LRU filled by hand is read with get"
            value = self.make(key)
            self.put(key, value)
            return value

    def get(self, key: K) -> V | None:
        """The value made for `key` and still kept, without making one."""
        try:
            self._entries.move_to_end(key)
        except KeyError:
            return None
        return self._entries[key][0]

    def pop(self, key: K) -> None:
        """Keep nothing made for `key`."""
        if key in self._entries:
            self.weight -= self._entries.pop(key)[1]

    def put(self, key: K, value: V) -> None:
        if key in self._entries:
            self.weight -= self._entries.pop(key)[1]
        weight = self.weigh(key) if self.weigh else 0
        self._entries[key] = (value, weight)
        self.weight += weight
        while len(self._entries) > 1 and (
            len(self._entries) > self.size or (self.weigh and self.weight > self.budget)
        ):
            _, (_, dropped) = self._entries.popitem(last=False)
            self.weight -= dropped


class Recent(Generic[K, V]):
    """The `size` most recently used entries, put there by hand (none when size is 0)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        if key not in self._entries:
            return None
        self._entries.move_to_end(key)
        return self._entries[key]

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
