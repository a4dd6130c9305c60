"""Bearer tokens verified into a principal (gateway/auth.py): a refusal names the subject the
token claims when it decodes at all, for the log, and never carries the token; a token valid
for longer than max_token_lifetime_s is refused saying so."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest

from contracts.access import Access
from gateway.auth import Authenticator, Unauthenticated

SECRET = "s" * 32
OTHER_SECRET = "o" * 32
VARIABLE = "TEST_BEARER_SECRET"
DAY_S = 86_400


def authenticator_of(max_lifetime_s: float, leeway_s: float = 0) -> Authenticator:
    access = Access(algorithms=("HS256",), grants={}, secret_env=VARIABLE, leeway_s=leeway_s)
    return Authenticator(access, max_lifetime_s)


@pytest.fixture
def authenticator(monkeypatch: pytest.MonkeyPatch) -> Authenticator:
    monkeypatch.setenv(VARIABLE, SECRET)
    return authenticator_of(DAY_S)


def bearer(secret: str = SECRET, **claims: Any) -> str:
    payload = {"sub": "svc-report", "exp": int(time.time()) + 600, **claims}
    return "Bearer " + jwt.encode(payload, secret, algorithm="HS256")


def refusal(authenticator: Authenticator, authorization: str | None) -> Unauthenticated:
    with pytest.raises(Unauthenticated) as refused:
        authenticator.authenticate(authorization)
    token = (authorization or "").removeprefix("Bearer ")
    assert not token or token not in refused.value.message
    return refused.value


def test_a_valid_token_gives_its_subject_and_roles(authenticator: Authenticator) -> None:
    principal = authenticator.authenticate(bearer(roles=["ops"]))
    assert principal.subject == "svc-report" and principal.roles == {"ops"}


@pytest.mark.parametrize(
    "authorization",
    [
        bearer(OTHER_SECRET),  # signed by someone else
        bearer(exp=int(time.time()) - 60),  # expired
        bearer(roles={"not": "a list"}),  # verified, but no roles a node can read
    ],
)
def test_a_refused_token_that_decodes_names_its_subject(
    authenticator: Authenticator, authorization: str
) -> None:
    assert refusal(authenticator, authorization).subject == "svc-report"


@pytest.mark.parametrize(
    "authorization", [None, "", "Basic dXNlcjpwYXNz", "Bearer not.a.jwt", bearer(sub=None)]
)
def test_a_refusal_without_a_decodable_subject_names_none(
    authenticator: Authenticator, authorization: str | None
) -> None:
    assert refusal(authenticator, authorization).subject is None


def test_a_token_valid_for_at_most_the_bound_is_accepted(authenticator: Authenticator) -> None:
    now = int(time.time())
    authenticator.authenticate(bearer(iat=now, exp=now + DAY_S))
    authenticator.authenticate(bearer(exp=now + DAY_S - 5))  # no iat: exp - now
    authenticator.authenticate(bearer(iat=now - DAY_S + 60, exp=now + 60))


@pytest.mark.parametrize(
    ("claims", "since"),
    [
        ({"iat": 0, "exp": DAY_S + 1}, "iat"),  # issued for a day and a second
        ({"iat": -DAY_S, "exp": 60}, "iat"),  # about to expire, but issued for longer
        ({"exp": DAY_S + 60}, "now"),
    ],
)
def test_a_token_valid_for_longer_is_refused_saying_so(
    authenticator: Authenticator, claims: dict[str, int], since: str
) -> None:
    now = int(time.time())
    token = bearer(**{name: now + value for name, value in claims.items()})
    refused = refusal(authenticator, token)
    assert f"(exp - {since}), longer than max_token_lifetime_s (86400 s)" in refused.message
    assert refused.subject == "svc-report"


def test_without_iat_the_leeway_allows_for_the_issuers_clock_and_0_bounds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VARIABLE, SECRET)
    ahead = bearer(exp=int(time.time()) + DAY_S + 20)  # an issuer's clock 20 s ahead
    authenticator_of(DAY_S, leeway_s=30).authenticate(ahead)
    refusal(authenticator_of(DAY_S, leeway_s=0), ahead)
    authenticator_of(0).authenticate(bearer(iat=0, exp=int(time.time()) + 10 * 365 * DAY_S))
