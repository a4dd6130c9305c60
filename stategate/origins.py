"""Which browser pages may call a node: its own, and those of the origins
settings.cors_origins lists ("*": any origin). One decision, `listed`, for both transports.

Over HTTP browsers enforce it themselves, on the CORS headers the node sends (Starlette's
middleware, asking `listed`). Over WebSocket they do not: any page may open a socket to any
host, and the handshake only names the page's origin. So a handshake whose Origin is neither
listed nor the node's own (http or https, with the host and port the request was sent to) is
refused here, before the app sees it: HTTP 403 (RFC 6455 4.2.2), no socket opened. A
handshake without Origin is not from a browser (a script, a server, graphql-ws on Node) and
passes, as CORS lets such clients through.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.cluster.status import ASSIGNMENT_HEADER, NODE_HEADER
from resolvers.execution import client_errors

ANY = "*"
DEFAULT_PORTS = {"http": 80, "https": 443}
CORS_MAX_AGE_S = 600  # how long a browser may cache a preflight's answer


def listed(origin: str, origins: Collection[str]) -> bool:
    """Does settings.cors_origins let pages of `origin` call the node?"""
    return ANY in origins or origin in origins


def own(origin: str, host: str | None) -> bool:
    """Is `origin` the node's own: http or https with the Host the request was sent to?"""
    try:
        page = urlsplit(origin)
        default = DEFAULT_PORTS.get(page.scheme)
        if host is None or default is None or "@" in page.netloc:
            return False
        if origin != f"{page.scheme}://{page.netloc}":
            return False  # a path, a query, upper case: not an origin a browser sends
        return _endpoint(page.netloc, default) == _endpoint(host, default)
    except ValueError:  # a port that is no number, a broken IPv6 literal
        return False


def _endpoint(netloc: str, default_port: int) -> tuple[str | None, int]:
    parts = urlsplit(f"//{netloc}")
    return parts.hostname, parts.port or default_port


class _ListedCORS(CORSMiddleware):
    def is_allowed_origin(self, origin: str) -> bool:
        return listed(origin, self.allow_origins)


class Origins:
    """The app behind the origin policy: HTTP through CORS (when origins are listed),
    WebSocket handshakes from other origins refused."""

    def __init__(self, app: ASGIApp, origins: tuple[str, ...]) -> None:
        self.app = app
        self.listing(origins)

    def listing(self, origins: tuple[str, ...]) -> None:
        """List `origins` (settings.cors_origins), from the next request on."""
        self.origins = origins
        self.http: ASGIApp = self.app
        if origins:
            self.http = _ListedCORS(
                self.app,
                allow_origins=list(origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type", "accept"],
                expose_headers=[NODE_HEADER, ASSIGNMENT_HEADER],  # a routing page reads them
                max_age=CORS_MAX_AGE_S,
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.http(scope, receive, send)
        elif scope["type"] == "websocket" and not self.allows(Headers(scope=scope)):
            await self._refuse(Headers(scope=scope)["origin"], scope, send)
        else:
            await self.app(scope, receive, send)

    def allows(self, headers: Headers) -> bool:
        """May this handshake open a socket: no Origin, a listed one, or the node's own?"""
        origin = headers.get("origin")
        if origin is None:
            return True
        return listed(origin, self.origins) or own(origin, headers.get("host"))

    async def _refuse(self, origin: str, scope: Scope, send: Send) -> None:
        message = (
            f"a page of {origin[:100]!r} may not open a WebSocket on this node: only its own "
            "origin's pages and those of settings.cors_origins may"
        )
        who = client_errors.Who.at(scope.get("client"))
        client_errors.transport("FORBIDDEN", message, "websocket", who)
        # Closed before accept: the ASGI server answers the handshake 403, without a body (one
        # sent through the websocket.http.response extension makes uvicorn log a false error).
        await send({"type": "websocket.close"})
