"""The [auth] table: what each role may read, and every mistake refused at load time with
the entry named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.access import Principal
from contracts.project import ConfigError, load
from tests.unit.test_config import BASE, write

AUTH = """
[auth]
jwt_secret_env = "SECRET_VARIABLE"
[auth.roles]
reader = ["totals"]
ops = ["*", "cluster"]
"""


def test_roles_read_what_they_are_granted(tmp_path: Path) -> None:
    access = load(write(tmp_path, BASE + AUTH)).access
    assert access is not None and access.algorithms == ("HS256",)
    reader, ops = Principal("a", frozenset({"reader"})), Principal("b", frozenset({"ops"}))
    assert access.permits(reader, "totals") and not access.permits(reader, "cluster")
    assert access.permits(ops, "totals") and access.permits(ops, "cluster")
    assert not access.permits(ops, "stores")  # "*" is every store, not the metadata
    assert not access.permits(Principal("c", frozenset({"undeclared"})), "totals")
    assert load(write(tmp_path, BASE)).access is None


def test_a_jwks_file_pins_public_key_algorithms(tmp_path: Path) -> None:
    (tmp_path / "keys.json").write_text(json.dumps({"keys": [{"kty": "RSA", "kid": "k"}]}))
    access = load(write(tmp_path, BASE + '[auth]\njwks = "keys.json"\n')).access
    assert access is not None and access.jwks == tmp_path / "keys.json"
    assert access.algorithms == ("RS256", "ES256")


@pytest.mark.parametrize(
    ("auth", "named"),
    [
        ('[auth]\njwt_secret_env = "V"\n[auth.roles]\nr = ["nosuchstore"]\n', "auth.roles.r"),
        ('[auth]\njwt_secret_env = "V"\n[auth.roles]\nr = "totals"\n', "auth.roles.r"),
        ('[auth]\njwt_secret_env = "V"\nsecret = "inline"\n', "auth.secret"),
        ("[auth]\n", "jwt_secret_env"),
        ('[auth]\njwt_secret_env = "V"\njwks = "keys.json"\n', "jwt_secret_env"),
        ('[auth]\njwt_secret_env = "V"\nalgorithms = ["RS256"]\n', "auth.algorithms"),
        ('[auth]\njwt_secret_env = "V"\nalgorithms = ["none"]\n', "auth.algorithms"),
        ('[auth]\njwks = "missing.json"\n', "auth.jwks"),
        ('[auth]\njwt_secret_env = "V"\nleeway_s = -1\n', "auth.leeway_s"),
        ('[auth]\njwt_secret_env = ""\n', "auth.jwt_secret_env"),
    ],
)
def test_a_wrong_auth_table_is_refused_naming_the_entry(
    tmp_path: Path, auth: str, named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        load(write(tmp_path, BASE + auth))
