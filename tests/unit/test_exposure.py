"""Beyond loopback, a server needs TLS and a cluster secret of its own; on loopback anything
goes."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.tls import Tls
from stategate.exposure import refusal

DEMO = "demo-secret-change-me"  # stategate/demo/stategate.toml's
OWN = "a-secret-of-our-very-own"
TLS = Tls(Path("certs/ca.pem"), "certs/{node}.pem", "certs/{node}.key")


@pytest.mark.parametrize("address", ["127.0.0.1:8101", "127.9.9.9:1", "localhost:80", "[::1]:80"])
def test_loopback_listens_with_any_secret_in_clear(address: str) -> None:
    assert refusal(address, DEMO, None) is None
    assert refusal(address, "", None) is None


@pytest.mark.parametrize("address", ["0.0.0.0:8101", "10.0.0.5:8101", "[::]:80", "node1:8101"])
def test_beyond_loopback_needs_tls_and_a_secret_of_its_own(address: str) -> None:
    clear = refusal(address, OWN, None)
    assert clear is not None and "in clear" in clear and "[tls]" in clear
    demo = refusal(address, DEMO, TLS)
    assert demo is not None and "demo" in demo and "secret_env" in demo
    short = refusal(address, "short-secret", TLS)
    assert short is not None and "16 characters" in short
    assert refusal(address, OWN, TLS) is None
