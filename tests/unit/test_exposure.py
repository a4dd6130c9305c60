"""Beyond loopback, a server needs a cluster secret of its own; on loopback anything goes."""

from __future__ import annotations

import pytest

from stategate.exposure import refusal

DEMO = "demo-secret-change-me"  # stategate/demo/stategate.toml's
OWN = "a-secret-of-our-very-own"


@pytest.mark.parametrize("address", ["127.0.0.1:8101", "127.9.9.9:1", "localhost:80", "[::1]:80"])
def test_loopback_listens_with_any_secret(address: str) -> None:
    assert refusal(address, DEMO) is None
    assert refusal(address, "") is None


@pytest.mark.parametrize("address", ["0.0.0.0:8101", "10.0.0.5:8101", "[::]:80", "node1:8101"])
def test_beyond_loopback_needs_a_secret_of_its_own(address: str) -> None:
    demo = refusal(address, DEMO)
    assert demo is not None and "demo" in demo and "secret_env" in demo
    short = refusal(address, "short-secret")
    assert short is not None and "16 characters" in short
    assert refusal(address, OWN) is None
