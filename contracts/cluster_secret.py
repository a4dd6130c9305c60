"""Cluster authentication: the shared secret every internal call and the snapshot store carry."""

from __future__ import annotations

import hmac

SECRET_HEADER = "x-stategate-secret"


def secret_headers(secret: str) -> dict[str, str]:
    """The headers that authenticate a call to a node's internal endpoints or the store."""
    return {SECRET_HEADER: secret}


def is_authentic(given: str | None, secret: str) -> bool:
    """True when a request carried the cluster secret (compared in constant time)."""
    return hmac.compare_digest((given or "").encode(), secret.encode())
