"""One table of the project file, read entry by entry: an entry that is missing, of the wrong
type or unknown is a ConfigError that names it, in one line."""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")
_KINDS: dict[type, str] = {
    str: "a string",
    int: "an integer",
    bool: "true or false",
    dict: "a table",
    list: "an array",
}


class ConfigError(ValueError):
    """The project file is not valid; the message names the offending entry."""


class Table:
    """A TOML table (or one entry of an array of tables) that `where` names in messages."""

    def __init__(self, raw: object, where: str, known: Iterable[str]) -> None:
        self.where = where
        self.raw: dict[str, Any] = typed(raw, dict, where)
        known = tuple(known)
        for key in self.raw:
            if key not in known:
                raise ConfigError(self._at(f"unknown entry {key!r}") + _hint(key, known))

    def get(self, key: str, kind: type[T], default: T | None = None) -> T:
        """The entry `key`, of type `kind`; `default` when it is missing, if there is one."""
        value = self.raw.get(key, default)
        if value is None:
            raise ConfigError(self._at(f"{key} is missing"))
        return typed(value, kind, self._at(key))

    def optional(self, key: str, kind: type[T]) -> T | None:
        return None if key not in self.raw else self.get(key, kind)

    def array(self, key: str) -> list[object]:
        """An array of tables ([[key]]), empty when missing; each item is checked by its reader."""
        return self.get(key, list, [])

    def strings(self, key: str, default: dict[str, str] | None = None) -> dict[str, str]:
        """A table of string values (`{ name = "text", ... }`)."""
        table = self.get(key, dict, default)
        for name, value in table.items():
            typed(value, str, self._at(f"{key}.{name}"))
        return table

    def _at(self, what: str) -> str:
        return f"{self.where}: {what}" if self.where else what


def typed(value: object, kind: type[T], what: str) -> T:
    """`value` if it is of type `kind` (a boolean is no integer), else a ConfigError."""
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{what} must be {_KINDS[kind]}, not {reprlib.repr(value)}")


def _hint(key: str, known: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(known)})" if known else " (it takes none)"
