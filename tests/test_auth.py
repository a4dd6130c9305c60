"""Authentication and authorization on real nodes over real HTTP and WebSocket: bearer
tokens minted here with pyjwt (HS256 with a secret from the environment; RS256 from a JWKS
file holding a key generated here), 401 for every token that does not verify, each role
reading exactly its stores on every node and across the hop (answers equal to the oracle),
FORBIDDEN per field over HTTP and in subscriptions, 4403 for a WebSocket without a valid
token, and introspection turned off."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from websockets.sync.client import connect

from contracts import project as projects
from contracts.partitioner import partition_for
from spark_pipeline.spark import LazySpark
from stategate.launcher import free_ports
from tests import oracle
from tests.live import PROTOCOL, Socket, closed_code
from tests.nodes import Nodes, Served, serve
from tests.projects import write_project

SECRET_ENV = "STATEGATE_TEST_JWT_SECRET"
SECRET = "a-test-hmac-secret-long-enough-for-hs256-and-for-hs384-and-hs512"
AUTH = f"""
[auth]
jwt_secret_env = "{SECRET_ENV}"
algorithms = ["HS256"]
audience = "stategate-tests"
leeway_s = 0

[auth.roles]
analyst = ["customerTotals", "hourlyRevenue"]
ops = ["*", "cluster", "stores"]
"""
DAY_S = 86_400  # max_token_lifetime_s, by default
TOTALS = "customerTotals(key: $k) { key record { bookings revenue } meta { partitions { node } } }"
LATEST = "latestBooking(key: $k) { record { trip } }"
BOTH = f"query($k: String!) {{ {TOTALS} {LATEST} }}"


def token(roles: object = ("analyst",), key: Any = SECRET, algorithm: str = "HS256",
          headers: dict[str, Any] | None = None, **claims: Any) -> str:  # fmt: skip
    now = int(time.time())
    payload = {"sub": "someone", "aud": "stategate-tests", "exp": now + 600, **claims}
    if roles is not None:
        payload["roles"] = list(roles) if isinstance(roles, tuple) else roles
    return jwt.encode(payload, key, algorithm=algorithm, headers=headers)


def hmac_signed(claims: dict[str, Any], secret: bytes) -> str:
    """An HS256 token signed by hand: pyjwt refuses to use a public key as an HMAC secret,
    which is exactly the forgery a node must refuse too."""
    header = {"alg": "HS256", "typ": "JWT", "kid": "current"}
    parts = [_b64(json.dumps(part).encode()) for part in (header, claims)]
    signature = hmac.new(secret, ".".join(parts).encode(), hashlib.sha256).digest()
    return ".".join([*parts, _b64(signature)])


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("auth")
    served = serve(root, spark, seed=5, start=False, settings="introspection = false")
    with served.project.path.open("a") as file:
        file.write(AUTH)
    served.project = served.nodes.project = projects.load(served.project.path)
    os.environ[SECRET_ENV] = SECRET  # the nodes' environment
    try:
        for node_id in served.nodes.ids:
            served.nodes.start(node_id)
    finally:
        del os.environ[SECRET_ENV]
    yield served
    served.nodes.stop_all()


def post(cluster: Served, node_id: str, headers: dict[str, str], query: str = BOTH,
         variables: dict[str, Any] | None = None) -> httpx.Response:  # fmt: skip
    url = f"{cluster.nodes.url(node_id)}/graphql"
    return httpx.post(url, json={"query": query, "variables": variables or {}}, headers=headers)


def get(cluster: Served, node_id: str, headers: dict[str, str], query: str,
        variables: dict[str, Any] | None = None) -> httpx.Response:  # fmt: skip
    params = {"query": query, "variables": json.dumps(variables or {})}
    return httpx.get(f"{cluster.nodes.url(node_id)}/graphql", params=params, headers=headers)


def codes(body: dict[str, Any]) -> dict[str, str]:
    """path -> code of each error."""
    return {
        ".".join(map(str, e.get("path") or ["-"])): e["extensions"]["code"]
        for e in body.get("errors", [])
    }


def expected_totals(cluster: Served, key: str) -> dict[str, Any]:
    rows = oracle.expected_store(cluster.project, "customerTotals")
    row = {r[0]: r for part in rows.values() for r in part}[key]
    return {"key": key, "record": {"bookings": str(row[1]), "revenue": pytest.approx(row[2])}}


def customer_elsewhere(cluster: Served, node_id: str) -> str:
    """A customer whose partition `node_id` does not host: its answer crosses a hop."""
    rows = oracle.expected_store(cluster.project, "customerTotals")
    hosted = cluster.project.cluster.hosted_by(node_id)
    return next(rows[p][0][0] for p in sorted(rows) if p not in hosted and rows[p])


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        bearer("not-a-jwt"),
        bearer(token(exp=int(time.time()) - 3600)),  # expired, beyond the leeway
        bearer(token(nbf=int(time.time()) + 3600)),  # not yet valid
        bearer(token(key="another-secret-of-at-least-32-bytes!!")),  # signed with another key
        bearer(token(algorithm="HS384")),  # an algorithm [auth] does not pin
        bearer(token(aud="someone-else")),
        bearer(jwt.encode({"roles": ["ops"], "aud": "stategate-tests"}, SECRET)),  # no exp
        bearer(token(roles=42)),
        bearer(token(iat=int(time.time()), exp=int(time.time()) + 2 * DAY_S)),  # valid too long
        bearer(token(exp=int(time.time()) + 2 * DAY_S)),  # the same without iat
        bearer(token(exp=str(int(time.time()) + 600))),  # a time that is a string
        bearer(token(iat=str(int(time.time())))),
    ],
    ids=[
        "missing",
        "basic",
        "garbage",
        "expired",
        "nbf",
        "wrong-key",
        "hs384",
        "aud",
        "no-exp",
        "roles-not-a-list",
        "lifetime",
        "lifetime-no-iat",
        "exp-a-string",
        "iat-a-string",
    ],  # fmt: skip
)
def test_a_request_without_a_valid_token_gets_401(cluster: Served, headers: dict[str, str]) -> None:
    variables = {"k": "C000001"}
    for answer in (
        post(cluster, "node1", headers, variables=variables),  # a compiled plan's path
        get(cluster, "node2", headers, BOTH, variables),  # Strawberry's view
    ):
        assert answer.status_code == 401, answer.text
        body = answer.json()
        assert list(body) == ["errors"] and len(body["errors"]) == 1
        assert body["errors"][0]["extensions"] == {"code": "UNAUTHENTICATED"}
        assert body["errors"][0]["message"]
        challenge = answer.headers["www-authenticate"]
        assert challenge == ("Bearer" if not headers else 'Bearer error="invalid_token"')


def test_a_token_valid_for_longer_than_the_bound_is_refused_saying_why(cluster: Served) -> None:
    issued = int(time.time())
    headers = bearer(token(iat=issued, exp=issued + DAY_S + 1))
    (error,) = post(cluster, "node1", headers, variables={"k": "C000001"}).json()["errors"]
    assert error["extensions"]["code"] == "UNAUTHENTICATED"
    assert "(exp - iat), longer than max_token_lifetime_s (86400 s)" in error["message"]
    fitting = bearer(token(iat=issued, exp=issued + DAY_S))
    fits = post(cluster, "node1", fitting, variables={"k": "C000001"})
    assert fits.json()["data"]["customerTotals"]["key"] == "C000001", fits.text


def test_the_playground_page_needs_no_token(cluster: Served) -> None:
    page = httpx.get(f"{cluster.nodes.url('node1')}/graphql", headers={"accept": "text/html"})
    assert page.status_code == 200 and "graphiql" in page.text.lower()


@pytest.mark.parametrize("node_id", ["node1", "node2", "node3"])
def test_a_role_reads_its_stores_only_on_every_node_and_across_the_hop(
    cluster: Served, node_id: str
) -> None:
    key = customer_elsewhere(cluster, node_id)
    for answer in (
        post(cluster, node_id, bearer(token()), variables={"k": key}),
        get(cluster, node_id, bearer(token()), BOTH, {"k": key}),
    ):
        assert answer.status_code == 200
        body = answer.json()
        assert codes(body) == {"latestBooking": "FORBIDDEN"}
        assert body["data"]["latestBooking"] is None
        totals = body["data"]["customerTotals"]
        assert {"key": totals["key"], "record": totals["record"]} == expected_totals(cluster, key)
        answered_by = {p["node"] for p in totals["meta"]["partitions"]}
        assert node_id not in answered_by  # a peer answered: the hop carried the request
    metadata = post(cluster, node_id, bearer(token()), "{ cluster { node } stores { name } }")
    assert codes(metadata.json()) == {"cluster": "FORBIDDEN", "stores": "FORBIDDEN"}
    ops = post(cluster, node_id, bearer(token(roles="ops")), variables={"k": key}).json()
    assert "errors" not in ops, ops
    expected = oracle.expected_store(cluster.project, "latestBooking")
    partition = partition_for(key, "string", cluster.project.cluster.partitions)
    trip = {r[0]: r[1] for r in expected[partition]}.get(key)
    assert ops["data"]["latestBooking"] == (None if trip is None else {"record": {"trip": trip}})
    nothing = post(cluster, node_id, bearer(token(roles=())), variables={"k": key}).json()
    assert codes(nothing) == {"customerTotals": "FORBIDDEN", "latestBooking": "FORBIDDEN"}


def test_subscriptions_check_the_token_at_connection_init_and_each_field(
    cluster: Served,
) -> None:
    url = cluster.nodes.url("node2")
    key = customer_elsewhere(cluster, "node2")
    socket = Socket(url, {"Authorization": f"Bearer {token()}"})
    try:
        socket.subscribe("totals", f"subscription($k: String!) {{ {TOTALS} }}", {"k": key})
        socket.subscribe("latest", f"subscription($k: String!) {{ {LATEST} }}", {"k": key})
        totals = socket.next_of("totals")
        assert "errors" not in totals, totals
        got = totals["data"]["customerTotals"]
        assert {"key": got["key"], "record": got["record"]} == expected_totals(cluster, key)
        forbidden = socket.next_of("latest")
        assert forbidden["data"] == {"latestBooking": None}
        assert codes(forbidden) == {"latestBooking": "FORBIDDEN"}
    finally:
        socket.close()
    header = Socket(url, additional_headers=bearer(token(roles="ops")))  # the handshake's
    header.subscribe("latest", f"query($k: String!) {{ {LATEST} }}", {"k": key})
    assert "errors" not in header.next_of("latest")
    header.close()
    ws_url = url.replace("http://", "ws://") + "/graphql"
    too_long = token(exp=int(time.time()) + 2 * DAY_S)
    for init in (
        {},
        {"Authorization": "Bearer nope"},
        {"authorization": "Bearer " + token(exp=1)},
        {"Authorization": "Bearer " + too_long},
        {"Authorization": "Bearer " + token(exp=str(int(time.time()) + 600))},
    ):
        with connect(ws_url, subprotocols=[PROTOCOL]) as ws:
            ws.send(json.dumps({"type": "connection_init", "payload": init}))
            assert closed_code(ws) == 4403, init


def test_operator_endpoints_need_the_cluster_grant_and_probes_none(cluster: Served) -> None:
    url = cluster.nodes.url("node3")
    for path in ("/cluster", "/metrics"):
        missing = httpx.get(url + path)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert missing.json()["error"]["code"] == "UNAUTHENTICATED"
        analyst = httpx.get(url + path, headers=bearer(token()))
        assert analyst.status_code == 403
        assert analyst.json()["error"]["code"] == "FORBIDDEN"
    ops = bearer(token(roles="ops"))
    partitions = httpx.get(url + "/cluster", headers=ops).json()["partitions"]
    assert len(partitions) == cluster.project.cluster.partitions
    assert "stategate_graphql_requests_total" in httpx.get(url + "/metrics", headers=ops).text
    for probe in ("/health", "/ready"):
        assert httpx.get(url + probe).status_code == 200
    logged = (cluster.root / "node3.log").read_text()
    start = r"WARNING node3 gateway\.http: client error "
    for line in (  # one line each, naming the client and the subject
        start + r"UNAUTHENTICATED via=http client=127\.0\.0\.1:\d+: a bearer token is required",
        start + r'FORBIDDEN via=http client=127\.0\.0\.1:\d+ sub="someone": /metrics needs',
    ):
        assert re.search(line, logged), line


def test_a_subscription_ends_when_its_token_expires(cluster: Served) -> None:
    key = customer_elsewhere(cluster, "node1")
    started = time.time()
    short = token(exp=int(started) + 3)  # leeway_s = 0 in this project
    socket = Socket(cluster.nodes.url("node1"), {"Authorization": f"Bearer {short}"})
    try:
        socket.subscribe("totals", f"subscription($k: String!) {{ {TOTALS} }}", {"k": key})
        got = socket.next_of("totals")["data"]["customerTotals"]
        assert {"key": got["key"], "record": got["record"]} == expected_totals(cluster, key)
        assert closed_code(socket.ws, timeout=15) == 4403
        assert time.time() >= int(started) + 3
    finally:
        socket.close()


def refused_introspection(errors: list[dict[str, Any]]) -> bool:
    """Every error is graphql-core's introspection refusal, coded as a validation error."""
    return bool(errors) and all(
        e["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
        and "introspection has been disabled" in e["message"]
        for e in errors
    )


def test_introspection_can_be_turned_off(cluster: Served) -> None:
    for query in ("{ __schema { types { name } } }", '{ __type(name: "Query") { name } }'):
        body = post(cluster, "node1", bearer(token()), query).json()
        assert "data" not in body  # a request error: nothing ran
        assert refused_introspection(body["errors"])
        socket = Socket(cluster.nodes.url("node1"), {"Authorization": f"Bearer {token()}"})
        socket.subscribe("schema", query)
        refused = socket.receive()
        socket.close()
        assert refused["type"] == "error" and refused_introspection(refused["payload"])
    typename = post(cluster, "node1", bearer(token()), "{ __typename }").json()
    assert typename["data"] == {"__typename": "Query"} and "errors" not in typename


@pytest.fixture(scope="module")
def jwks_node(cluster: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    """node1 of a second project over the same log and snapshots, whose tokens are RS256,
    verified with a JWKS file (the key generated here)."""
    root: Path = tmp_path_factory.mktemp("jwks")
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
    other = jwt.algorithms.RSAAlgorithm.to_jwk(
        rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key(), as_dict=True
    )
    keys = [{**other, "kid": "old", "alg": "RS256"}, {**jwk, "kid": "current", "alg": "RS256"}]
    (root / "keys.json").write_text(json.dumps({"keys": keys}))
    path = write_project(root, free_ports(3))
    shared = cluster.root
    text = path.read_text().replace('dir = "log"', f'dir = "{shared}/log"')
    text = text.replace('store = "snapshots"', f'store = "{shared}/snapshots"')
    path.write_text(text + '\n[auth]\njwks = "keys.json"\nalgorithms = ["RS256"]\n'
                    '[auth.roles]\nanalyst = ["customerTotals"]\n')  # fmt: skip
    nodes = Nodes(projects.load(path), root)
    nodes.start("node1")
    nodes.private_key = private  # type: ignore[attr-defined]
    yield nodes
    nodes.stop_all()


def test_rs256_tokens_are_verified_with_the_jwks_key_their_kid_names(
    cluster: Served, jwks_node: Nodes
) -> None:
    private = jwks_node.private_key  # type: ignore[attr-defined]
    rows = oracle.expected_store(cluster.project, "customerTotals")
    hosted = jwks_node.project.cluster.hosted_by("node1")
    key = rows[hosted[0]][0][0]
    query = "query($k: String!) { customerTotals(key: $k) { key record { bookings revenue } } }"

    def ask(value: str) -> httpx.Response:
        url = f"{jwks_node.url('node1')}/graphql"
        return httpx.post(
            url, json={"query": query, "variables": {"k": key}}, headers=bearer(value)
        )

    signed = token(key=private, algorithm="RS256", headers={"kid": "current"})
    answer = ask(signed)
    assert answer.status_code == 200
    assert answer.json()["data"]["customerTotals"] == expected_totals(cluster, key)
    public_pem = private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    for refused in (
        token(key=private, algorithm="RS256", headers={"kid": "old"}),  # another key's kid
        token(key=private, algorithm="RS256", headers={"kid": "unknown"}),
        token(key=private, algorithm="RS256"),  # no kid, several keys
        token(key=SECRET, headers={"kid": "current"}),  # HS256: not pinned
        hmac_signed({"roles": ["analyst"], "exp": int(time.time()) + 60}, public_pem),
    ):
        assert ask(refused).status_code == 401


def test_an_open_socket_is_held_to_auth_read_again(cluster: Served) -> None:
    """SIGHUP after [auth] changed (README: Changing settings without a restart): an open
    socket whose token still makes it the same principal reads on; one whose token no longer
    verifies (another audience) is closed with 4403 at once, not at its token's exp, and its
    subscriptions with it."""
    key = customer_elsewhere(cluster, "node1")
    path, log = cluster.project.path, cluster.project.path.parent / "node1.log"
    text = path.read_text()
    pid = cluster.nodes.processes.pid("node1")

    def hang_up(new_text: str) -> None:
        said = "SIGHUP: "
        before = log.read_text().count(said)
        path.write_text(new_text)
        os.kill(pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while log.read_text().count(said) < before + 1:
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        time.sleep(0.5)  # every worker: the keeper passes the signal on

    def opened() -> Socket:
        socket = Socket(cluster.nodes.url("node1"), {"Authorization": f"Bearer {token()}"})
        socket.subscribe("totals", f"subscription($k: String!) {{ {TOTALS} }}", {"k": key})
        assert "errors" not in socket.next_of("totals")
        return socket

    socket = opened()
    try:
        hang_up(text.replace('ops = ["*"', 'viewer = ["timetable"]\nops = ["*"'))
        socket.send({"type": "ping"})
        assert socket.receive() == {"type": "pong"}  # the same principal: read on
        hang_up(text.replace("leeway_s = 0", 'leeway_s = 0\nroles_claim = "groups"'))
        assert closed_code(socket.ws, timeout=10) == 4403  # the token verifies, roleless now
        hang_up(text)
        socket = opened()
        hang_up(text.replace('audience = "stategate-tests"', 'audience = "rotated"'))
        assert closed_code(socket.ws, timeout=10) == 4403
    finally:
        socket.close()
        hang_up(text)
