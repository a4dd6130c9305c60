"""A graphql-transport-ws client for the tests, on the websockets library's sync client: what
a dashboard's graphql-ws client does, message by message."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

PROTOCOL = "graphql-transport-ws"


class Socket:
    """One connection: connection_init, subscribe, and the messages that come back."""

    def __init__(self, url: str, init: dict[str, Any] | None = None, **options: Any) -> None:
        ws_url = url.replace("http://", "ws://") + "/graphql"
        self._stack = contextlib.ExitStack()
        self.ws: ClientConnection = self._stack.enter_context(
            connect(ws_url, subprotocols=[PROTOCOL], **options)
        )
        self.held: list[dict[str, Any]] = []  # received while waiting for another id's
        self.send({"type": "connection_init", **({"payload": init} if init else {})})
        assert self.receive()["type"] == "connection_ack"

    def send(self, message: dict[str, Any]) -> None:
        self.ws.send(json.dumps(message))

    def subscribe(self, id: str, query: str, variables: dict[str, Any] | None = None) -> None:
        payload: dict[str, Any] = {"query": query}
        if variables is not None:
            payload["variables"] = variables
        self.send({"id": id, "type": "subscribe", "payload": payload})

    def complete(self, id: str) -> None:
        self.send({"id": id, "type": "complete"})

    def receive(self, timeout: float = 30) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self.ws.recv(timeout=timeout))
        return message

    def next_of(self, id: str, timeout: float = 30) -> dict[str, Any]:
        """The payload of the next `next` message of `id` (others of this id fail the test);
        other ids' messages are held for later calls."""
        deadline = time.monotonic() + timeout
        while True:
            mine = [m for m in self.held if m.get("id") == id]
            if mine:
                message = mine[0]
                self.held.remove(message)
            else:
                message = self.receive(max(0.01, deadline - time.monotonic()))
                if message.get("id") != id:
                    self.held.append(message)
                    continue
            assert message["type"] == "next", message
            payload: dict[str, Any] = message["payload"]
            return payload

    def drain(self, quiet_s: float) -> list[dict[str, Any]]:
        """Every message that arrives until none came for `quiet_s` seconds."""
        messages, self.held = self.held, []
        while True:
            try:
                messages.append(self.receive(quiet_s))
            except TimeoutError:
                return messages

    def close(self) -> None:
        self._stack.close()


def closed_code(ws: ClientConnection, timeout: float = 10) -> int | None:
    """The close code the server sent, once it closes the connection."""
    try:
        while True:
            ws.recv(timeout=timeout)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None
