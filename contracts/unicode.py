"""Valid Unicode at the edges. A Python str may hold a lone surrogate (JSON's "\\ud800" escape
decodes to one), which no UTF-8 encoder writes and no GraphQL response can carry: producers
and queries refuse such strings, and the pipeline reads them from a foreign log with each
lone surrogate replaced by U+FFFD, as a lossy UTF-8 decoder does."""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate of `text` as U+XXXX; None when `text` is valid Unicode."""
    if text.isascii():
        return None
    found = _SURROGATE.search(text)  # a decoded str holds pairs as one character
    return None if found is None else f"U+{ord(found.group()):04X}"


def invalid_text(text: str, what: str) -> str | None:
    """Why `text` cannot be served or stored, naming it as `what`; None when it can."""
    surrogate = lone_surrogate(text)
    if surrogate is None:
        return None
    return f"{what} is not valid Unicode: it holds a lone surrogate ({surrogate})"


def replaced(value: object) -> object:
    """A decoded JSON value with every lone surrogate, in names and strings, made U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub(REPLACEMENT, value)
    if isinstance(value, list):
        return [replaced(item) for item in value]
    if isinstance(value, dict):
        return {replaced(name): replaced(item) for name, item in value.items()}
    return value
