"""Bearer tokens verified into a principal (gateway/auth.py): a refusal names the subject the
token claims when it decodes at all, for the log, and never carries the token."""

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


@pytest.fixture
def authenticator(monkeypatch: pytest.MonkeyPatch) -> Authenticator:
    monkeypatch.setenv(VARIABLE, SECRET)
    access = Access(algorithms=("HS256",), grants={}, secret_env=VARIABLE, leeway_s=0)
    return Authenticator(access)


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
