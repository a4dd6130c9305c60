"""A node's workers share its port (stategate/workers.py): the first checks that nobody else
holds it, the others bind beside it, and a port held by another process is refused."""

from __future__ import annotations

import socket

import pytest

from stategate.workers import bound


def test_workers_share_a_port_no_other_process_holds() -> None:
    first = bound("127.0.0.1:0", shared=True, first=True)
    address = f"127.0.0.1:{first.getsockname()[1]}"
    second = bound(address, shared=True, first=False)
    first.listen()
    second.listen()
    try:
        with pytest.raises(OSError):  # another node, or a stray worker of an earlier run
            bound(address, shared=True, first=True)
        with pytest.raises(OSError):
            bound(address, shared=False, first=True)
    finally:
        first.close()
        second.close()


def test_a_port_held_without_sharing_is_refused_to_every_worker() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        address = f"127.0.0.1:{other.getsockname()[1]}"
        for first in (True, False):
            with pytest.raises(OSError):
                bound(address, shared=True, first=first)
