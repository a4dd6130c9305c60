"""A graphql-transport-ws client for the tests, on the websockets library's sync client: what
a dashboard's graphql-ws client does, message by message."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections import deque
from typing import Any

from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

PROTOCOL = "graphql-transport-ws"


class Socket:
    """One connection: connection_init, subscribe, and the messages that come back."""

    def __init__(self, url: str, init: dict[str, Any] | None = None, **options: Any) -> None:
        ws_url = "ws" + url.removeprefix("http") + "/graphql"  # https: wss
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
        message = self.message_of(id, timeout)
        assert message["type"] == "next", message
        payload: dict[str, Any] = message["payload"]
        return payload

    def message_of(self, id: str, timeout: float = 30) -> dict[str, Any]:
        """The next message of `id`, of any type; other ids' are held for later calls."""
        deadline = time.monotonic() + timeout
        while True:
            mine = [m for m in self.held if m.get("id") == id]
            if mine:
                self.held.remove(mine[0])
                return mine[0]
            message = self.receive(max(0.01, deadline - time.monotonic()))
            if message.get("id") == id:
                return message
            self.held.append(message)

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


class Unread(Socket):
    """A client that reads only while a test waits for a message: websockets' sans-I/O
    protocol over a plain socket with a 64 KiB receive buffer. Between calls nothing reads,
    so what the node sends waits in the kernel's buffers, then in the node, as it does for a
    browser tab that stopped reading (the sync client's reader thread reads ahead of the
    test, as far as the kernel lets it)."""

    def __init__(self, url: str, init: dict[str, Any] | None = None) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        self.sock.connect((host, int(port)))
        ws_url = "ws" + url.removeprefix("http") + "/graphql"  # https: wss
        self.protocol = ClientProtocol(
            parse_uri(ws_url), subprotocols=[Subprotocol(PROTOCOL)], max_size=None
        )
        self.protocol.send_request(self.protocol.connect())
        self.frames: deque[Frame] = deque()
        self.held = []
        self._flush()
        deadline = time.monotonic() + 10
        while self.protocol.handshake_exc is None and self.protocol.state is State.CONNECTING:
            self._read(max(0.01, deadline - time.monotonic()))
        assert self.protocol.handshake_exc is None, self.protocol.handshake_exc
        self.send({"type": "connection_init", **({"payload": init} if init else {})})
        assert self.receive()["type"] == "connection_ack"

    def send(self, message: dict[str, Any]) -> None:
        self.protocol.send_text(json.dumps(message).encode())
        self._flush()

    def receive(self, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not any(f.opcode is Opcode.TEXT for f in self.frames):
            self._read(deadline - time.monotonic())
        while (frame := self.frames.popleft()).opcode is not Opcode.TEXT:
            pass
        message: dict[str, Any] = json.loads(frame.data)
        return message

    def close(self) -> None:
        self.sock.close()

    def _read(self, timeout: float) -> None:
        if timeout <= 0:
            raise TimeoutError
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            raise TimeoutError from None
        if data:
            self.protocol.receive_data(data)
        else:
            self.protocol.receive_eof()
        for event in self.protocol.events_received():
            if isinstance(event, Frame):
                self.frames.append(event)
        self._flush()  # pongs

    def _flush(self) -> None:
        for data in self.protocol.data_to_send():
            self.sock.sendall(data)
