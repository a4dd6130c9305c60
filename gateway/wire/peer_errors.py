"""What can go wrong on a call to a peer or the snapshot store, in our own words. Every
transport translates its foreign errors into these, once, where it makes the call.

PeerError                 a call that did not return a usable reply
 ├── PeerUnreachable      nothing usable came back: refused, reset, timed out (`hung`)
 ├── PeerRefused          the peer answered with an error status
 └── PoolExhausted        no connection of this node's own was free: nothing is known of the peer

Nothing else is caught by a transport, so a bug stays a bug.
"""

from __future__ import annotations


class PeerError(Exception):
    """A call to a peer or the store that did not return a usable reply."""


class PeerUnreachable(PeerError):
    def __init__(self, message: str, hung: bool) -> None:
        super().__init__(message)
        self.hung = hung  # timed out: asking again costs a whole timeout


class PeerRefused(PeerError):
    def __init__(self, status: int) -> None:
        super().__init__(f"answered HTTP {status}")
        self.status = status


class PoolExhausted(PeerError):
    """No connection of this node's pool was free in time."""
