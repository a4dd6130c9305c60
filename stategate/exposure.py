"""Whether a server may listen where it is told to: beyond loopback only with a cluster secret
of its own, since that secret is all that guards the internal endpoints and the store."""

from __future__ import annotations

import ipaddress
import tomllib

from stategate.demo import PROJECT_TEMPLATE

MIN_SECRET_CHARS = 16
LOOPBACK_NAMES = ("localhost",)


def refusal(address: str, secret: str) -> str | None:
    """Why listening on `address` (host:port) with `secret` is refused, or None."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if _loopback(host):
        return None
    fix = f"set cluster.secret_env to a secret of your own (at least {MIN_SECRET_CHARS} characters)"
    if secret == _demo_secret():
        return f"refusing to listen on {address} with the demo's cluster secret: {fix}"
    if len(secret) < MIN_SECRET_CHARS:
        return f"refusing to listen on {address} with a cluster secret that short: {fix}"
    return None


def _loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def _demo_secret() -> str:
    secret: str = tomllib.loads(PROJECT_TEMPLATE.read_text())["cluster"]["secret"]
    return secret
