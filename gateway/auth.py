"""Bearer tokens: a request's `Authorization: Bearer <JWT>` verified once, at the transport,
into the Principal its roles are checked against (contracts/access.py).

A token is signed with the HMAC secret in the environment variable [auth] names, or by a
key of its JWKS file (picked by the token's `kid`); only the algorithms [auth] pins are
accepted, whatever the token's header says. exp is required and checked with nbf (both
with `leeway_s`), iss and aud when [auth] names them; a token valid for longer than
settings.max_token_lifetime_s (exp - iat, or exp - now with the leeway) is refused.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jwt

from contracts.access import ANONYMOUS, Access, Principal
from contracts.errors import GatewayError
from contracts.project import ConfigError

MIN_HMAC_SECRET_BYTES = 32  # RFC 7518 3.2: a key at least as long as the hash
BEARER = "bearer "
MAX_SUBJECT = 100  # characters of a subject a log line keeps
TIMES = ("exp", "nbf", "iat")  # the claims that are times (RFC 7519's NumericDate)


@dataclass(frozen=True)
class Who:
    """Who sent a request, as a log line of an access failure names it: the client's address
    as the server saw it (behind a proxy uvicorn trusts, its X-Forwarded-For) and the subject
    of its token, when known. Never the token."""

    client: str | None = None  # host:port
    subject: str | None = None

    @classmethod
    def at(cls, client: Sequence[Any] | None, subject: str | None = None) -> Who:
        """From an ASGI scope's `client`: (host, port), or None."""
        return cls(None if not client else f"{client[0]}:{client[1]}", subject)

    def fields(self) -> str:
        """` client=... sub="..."`: what of the two is known, on one line."""
        text = f" client={self.client}" if self.client else ""
        if self.subject is not None:
            text += f" sub={json.dumps(' '.join(self.subject.split())[:MAX_SUBJECT])}"
        return text


class Unauthenticated(GatewayError):
    """No token, or one that does not verify: the transport answers 401 (HTTP) or closes
    with 4403 (WebSocket)."""

    def __init__(self, message: str, missing: bool = False, subject: str | None = None) -> None:
        super().__init__("UNAUTHENTICATED", message)
        self.missing = missing  # no token at all (RFC 6750: no error code in the challenge)
        self.subject = subject  # the token's sub, when it decodes: for the log, never trusted

    @property
    def challenge(self) -> str:
        """The WWW-Authenticate header of the 401."""
        return "Bearer" if self.missing else 'Bearer error="invalid_token"'


class Authenticator:
    """Verifies tokens for one node; without [auth] everyone is ANONYMOUS. Raises
    ConfigError when the keys [auth] names cannot be read here. `max_lifetime_s`: the
    longest a token may be valid for; 0, no bound."""

    def __init__(self, access: Access | None, max_lifetime_s: float = 0) -> None:
        self.access = access
        self.max_lifetime_s = max_lifetime_s
        self._secret = _secret(access) if access and access.secret_env else None
        self._keys = _keys(access) if access and access.jwks else None

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal of a request's Authorization header; raises Unauthenticated."""
        access = self.access
        if access is None:
            return ANONYMOUS
        if not authorization:
            raise Unauthenticated("a bearer token is required (Authorization: Bearer ...)", True)
        if authorization[: len(BEARER)].lower() != BEARER:
            raise Unauthenticated("the Authorization header must be Bearer <token>")
        token = authorization[len(BEARER) :].strip()
        try:
            claims = jwt.decode(
                token,
                key=self._key(token),
                algorithms=list(access.algorithms),
                issuer=access.issuer,
                audience=access.audience,
                leeway=access.leeway_s,
                options={"require": ["exp"], "verify_aud": access.audience is not None},
            )
        except jwt.PyJWTError as exc:
            message = f"the bearer token is not valid: {exc}"
            raise Unauthenticated(message, subject=_claimed(token)) from None
        subject, roles = _subject(claims), _roles(claims, access.roles_claim)
        strings = [c for c in TIMES if c in claims and not _numeric_date(claims[c])]
        if strings:  # pyjwt reads "exp": "1796..." as a number; RFC 7519 says a number
            message = f"the token's {strings[0]!r} claim must be a number (a NumericDate)"
            raise Unauthenticated(message, subject=subject)
        if roles is None:
            message = f"the token's {access.roles_claim!r} claim must be a list of role names"
            raise Unauthenticated(message, subject=subject)
        too_long = self._too_long(claims, access.leeway_s)
        if too_long is not None:
            raise Unauthenticated(too_long, subject=subject)
        return Principal(subject, roles, float(claims["exp"]), claims)

    def _too_long(self, claims: dict[str, Any], leeway_s: float) -> str | None:
        """Why a verified token lives too long, if it does: exp - iat, or without iat exp -
        now (then with the leeway: the issuer's clock may be ahead)."""
        limit = self.max_lifetime_s
        issued = claims.get("iat")
        start, since = (time.time(), "now") if issued is None else (float(issued), "iat")
        lifetime = float(claims["exp"]) - start
        if not limit or lifetime <= limit + (leeway_s if issued is None else 0):
            return None
        return (
            f"the bearer token is valid for {lifetime:.0f} s (exp - {since}), longer than "
            f"max_token_lifetime_s ({limit:g} s) allows: use a shorter-lived token"
        )

    def lifetime(self, principal: Principal) -> float | None:
        """Seconds until the principal's token stops verifying (exp, with the leeway); None
        when it never does (no [auth])."""
        if self.access is None or principal.expires is None:
            return None
        return principal.expires + self.access.leeway_s - time.time()

    def _key(self, token: str) -> Any:
        if self._secret is not None:
            return self._secret
        assert self._keys is not None
        kid = jwt.get_unverified_header(token).get("kid")
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        key = self._keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise jwt.InvalidKeyError(f"no key in the JWKS file has kid {kid!r}")
        return key


def _secret(access: Access) -> bytes:
    assert access.secret_env is not None
    secret = os.environ.get(access.secret_env, "").encode()
    if len(secret) < MIN_HMAC_SECRET_BYTES:
        raise ConfigError(
            f"auth.jwt_secret_env: set {access.secret_env} to the tokens' HMAC secret "
            f"(at least {MIN_HMAC_SECRET_BYTES} bytes)"
        )
    return secret


def _keys(access: Access) -> dict[str | None, jwt.PyJWK]:
    """The JWKS file's keys by kid, read once when the node starts."""
    assert access.jwks is not None
    try:
        keys = jwt.PyJWKSet.from_json(access.jwks.read_text()).keys
    except (OSError, jwt.PyJWKError, jwt.PyJWKSetError) as exc:
        raise ConfigError(f"auth.jwks: {access.jwks}: {exc}") from exc
    return {key.key_id: key for key in keys}


def _subject(claims: dict[str, Any]) -> str | None:
    subject = claims.get("sub")
    return subject if isinstance(subject, str) else None


def _claimed(token: str) -> str | None:
    """The subject a token that did not verify names, when it decodes at all."""
    try:
        return _subject(jwt.decode(token, options={"verify_signature": False}))
    except jwt.PyJWTError:
        return None


def _roles(claims: dict[str, Any], claim: str) -> frozenset[str] | None:
    """The roles claim: a list of strings, or one string; absent, no role; else None."""
    value = claims.get(claim, [])
    if isinstance(value, str):
        return frozenset([value])
    if not isinstance(value, list) or not all(isinstance(role, str) for role in value):
        return None
    return frozenset(value)


def _numeric_date(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
