"""Whether a server may listen where it is told to: beyond loopback only with TLS ([tls]:
nothing in clear on a network) and a cluster secret of its own, which guards the internal
endpoints."""

from __future__ import annotations

import ipaddress
import tomllib

from contracts.tls import Tls
from stategate.demo import PROJECT_TEMPLATE

MIN_SECRET_CHARS = 16
LOOPBACK_NAMES = ("localhost",)


def refusal(address: str, secret: str, tls: Tls | None) -> str | None:
    """Why listening on `address` (host:port) with `secret` and `tls` is refused, or None."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if _loopback(host):
        return None
    if tls is None:
        return (
            f"refusing to listen on {address} in clear: set [tls] (README: TLS; "
            "`stategate certs` makes a dev CA)"
        )
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
