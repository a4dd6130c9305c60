"""The one error shape: a code from a closed set and a precise message.

Raised inside a resolver, a GatewayError becomes a GraphQL error whose `extensions.code` is
its code (graphql-core copies `extensions` from the original error).
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    """A request the gateway refuses, with a machine-readable code."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extensions: dict[str, Any] = {"code": code, **details}


def bad_input(message: str, **details: Any) -> GatewayError:
    return GatewayError("BAD_USER_INPUT", message, **details)
