"""Who may read what: the project file's [auth] table.

[auth] names where the keys that sign bearer tokens are (an environment variable holding an
HMAC secret, or a JWKS file of public keys), the algorithms a token may use, and the claim
that carries its roles; [auth.roles] grants each role what it may read: store names, "*" for
every store, "cluster" for the partition map, "stores" for the store list; [auth.rows.ROLE]
limits what a role reads of a store to the rows a rule passes (contracts/row_rules.py). A
project without [auth] checks nothing.

Only the table's shape is checked here: the secret itself is read by the node that verifies
tokens (gateway/auth.py), so that the pipeline and the producer never need it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts import row_rules
from contracts.row_rules import Rule, RuleError

EVERY_STORE = "*"
METADATA = ("cluster", "stores")  # the root fields besides the stores'
HMAC_ALGORITHMS: tuple[str, ...] = ("HS256", "HS384", "HS512")
PUBLIC_KEY_ALGORITHMS: tuple[str, ...] = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
DEFAULT_ROLES_CLAIM = "roles"
DEFAULT_LEEWAY_S = 30.0  # clock skew tolerated on exp and nbf
_KEYS = {
    "jwt_secret_env", "jwks", "algorithms", "roles_claim", "issuer", "audience", "leeway_s",
    "roles", "rows",
}  # fmt: skip
Fields = Mapping[str, Mapping[str, str]]  # store -> its fields' types, the key's first


class AccessError(ValueError):
    """[auth] is not valid; the message names the entry."""


@dataclass(frozen=True)
class Principal:
    """Whoever a request's bearer token says it is."""

    subject: str | None
    roles: frozenset[str]
    expires: float | None = None  # the token's exp, seconds since the epoch
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False)  # row rules read them


ANONYMOUS = Principal(None, frozenset())  # a request to a project without [auth]


@dataclass(frozen=True)
class Access:
    algorithms: tuple[str, ...]
    grants: dict[str, frozenset[str]]  # role -> store names, "*", "cluster", "stores"
    rows: dict[str, dict[str, Rule]] = field(default_factory=dict)  # role -> store -> rule
    secret_env: str | None = None  # names the variable holding the HMAC secret
    jwks: Path | None = None  # or the file of public keys
    roles_claim: str = DEFAULT_ROLES_CLAIM
    issuer: str | None = None
    audience: str | None = None
    leeway_s: float = DEFAULT_LEEWAY_S

    def permits(self, principal: Principal, name: str) -> bool:
        """May `principal` read the root field `name` (a store, "cluster" or "stores")?"""
        granted = (self.grants.get(role, frozenset()) for role in principal.roles)
        wildcard = name not in METADATA
        return any(name in g or (wildcard and EVERY_STORE in g) for g in granted)

    def rules(self, principal: Principal, store: str) -> tuple[Rule, ...] | None:
        """The rules of the principal's roles that grant `store`: a row passes if one does.
        None when a role grants it whole; () when none grants it."""
        rules = []
        for role in sorted(principal.roles):
            granted = self.grants.get(role, frozenset())
            if store in granted or EVERY_STORE in granted:
                rule = self.rows.get(role, {}).get(store)
                if rule is None:
                    return None
                rules.append(rule)
        return tuple(rules)


def parse(raw: object, base: Path, stores: Fields) -> Access | None:
    """The [auth] table, or None when the project has none."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise AccessError("[auth] must be a table")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise AccessError(f"auth.{unknown[0]} is not an [auth] entry (see the README)")
    secret_env, jwks = raw.get("jwt_secret_env"), raw.get("jwks")
    if (secret_env is None) == (jwks is None):
        raise AccessError('[auth] needs one of jwt_secret_env = "VARIABLE" or jwks = "keys.json"')
    if secret_env is not None:
        _string(secret_env, "jwt_secret_env")
        family, default = HMAC_ALGORITHMS, ["HS256"]
    else:
        family, default = PUBLIC_KEY_ALGORITHMS, ["RS256", "ES256"]
        jwks = _jwks(_string(jwks, "jwks"), base)
    grants = _grants(raw.get("roles", {}), set(stores))
    return Access(
        algorithms=_algorithms(raw.get("algorithms", default), family),
        grants=grants,
        rows=_rows(raw.get("rows", {}), grants, stores),
        secret_env=secret_env,
        jwks=jwks,
        roles_claim=_string(raw.get("roles_claim", DEFAULT_ROLES_CLAIM), "roles_claim"),
        issuer=None if raw.get("issuer") is None else _string(raw["issuer"], "issuer"),
        audience=None if raw.get("audience") is None else _string(raw["audience"], "audience"),
        leeway_s=_leeway(raw.get("leeway_s", DEFAULT_LEEWAY_S)),
    )


def _string(value: object, entry: str) -> str:
    if not isinstance(value, str) or not value:
        raise AccessError(f"auth.{entry} must be a non-empty string, not {value!r}")
    return value


def _jwks(name: str, base: Path) -> Path:
    path = base / name
    try:
        keys = json.loads(path.read_text()).get("keys")
    except (OSError, ValueError, AttributeError) as exc:
        raise AccessError(f"auth.jwks: {path} is not a JWKS file: {exc}") from exc
    if not isinstance(keys, list) or not keys:
        raise AccessError(f'auth.jwks: {path} has no keys ({{"keys": [...]}})')
    return path


def _algorithms(value: object, family: tuple[str, ...]) -> tuple[str, ...]:
    """Pinned here, never taken from a token: an HMAC secret only verifies HS*, public keys
    only RS* and ES* (a public key used as an HMAC secret would let anyone sign)."""
    if not isinstance(value, list) or not value or not all(a in family for a in value):
        keys = "jwt_secret_env" if family is HMAC_ALGORITHMS else "jwks"
        raise AccessError(f"auth.algorithms must be a list of {family} with {keys}, not {value!r}")
    return tuple(value)


def _grants(raw: object, stores: set[str]) -> dict[str, frozenset[str]]:
    if not isinstance(raw, dict):
        raise AccessError('[auth.roles] must be a table: role = ["store", ...]')
    readable = stores | {EVERY_STORE, *METADATA}
    grants = {}
    for role, names in raw.items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise AccessError(f"auth.roles.{role} must be a list of names, not {names!r}")
        for name in names:
            if name not in readable:
                raise AccessError(
                    f"auth.roles.{role}: {name!r} is not a store, {EVERY_STORE!r}, "
                    f"'cluster' or 'stores' (stores: {sorted(stores)})"
                )
        grants[role] = frozenset(names)
    return grants


def _rows(
    raw: object, grants: dict[str, frozenset[str]], stores: Fields
) -> dict[str, dict[str, Rule]]:
    """[auth.rows.ROLE]: store = "rule", for stores the role is granted."""
    if not isinstance(raw, dict):
        raise AccessError('[auth.rows] must be a table: [auth.rows.ROLE] store = "rule"')
    rows: dict[str, dict[str, Rule]] = {}
    for role, rules in raw.items():
        if not isinstance(rules, dict):
            raise AccessError(f'auth.rows.{role} must be a table: store = "rule"')
        granted = grants.get(role, frozenset())
        for store, text in rules.items():
            entry = f"auth.rows.{role}.{store}"
            if store not in stores:
                raise AccessError(f"{entry}: {store!r} is not a store ({sorted(stores)})")
            if store not in granted and EVERY_STORE not in granted:
                raise AccessError(f"{entry}: [auth.roles] does not grant {role} {store}")
            if not isinstance(text, str):
                raise AccessError(f'{entry} must be a rule in a string, e.g. "key = claims.sub"')
            try:
                rows.setdefault(role, {})[store] = row_rules.parse(text, stores[store])
            except RuleError as exc:
                raise AccessError(f"{entry}: {exc}: {text}") from None
    return rows


def _leeway(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 300:
        raise AccessError(f"auth.leeway_s must be between 0 and 300 seconds, not {value!r}")
    return float(value)
