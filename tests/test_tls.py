"""TLS on every link (README: TLS), for real on loopback: three nodes with mutual TLS on
certificates of a CA of their own (`stategate certs`): clients over https and wss, queries
across the nodes' hop, the pipeline's notifications; a connection without a certificate of
the CA refused in the handshake, before any HTTP is read; a certificate replaced on SIGHUP
with no connection dropped; and the demo laid out as across machines (`--across`). (An
elastic cluster's etcd over TLS: tests/test_membership.py; across hosts, with a capture of
the wire: tests/test_partitions.py.)"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.tls import CLIENT, Tls
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate import certificates, demo
from stategate.launcher import free_ports, wait_serving
from tests import oracle, wire
from tests.live import Socket
from tests.nodes import Served, serve
from tests.projects import produce_test_events
from tests.test_stop import ON_PORTS

BATCH = """query($keys: [String!]!) {
  customerTotalsBatch(keys: $keys) {
    entries { key failure record { bookings revenue } }
    meta { partial }
  }
}"""
TOTALS = """subscription($key: String!) {
  customerTotals(key: $key) { record { bookings revenue } }
}"""


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = serve(tmp_path_factory.mktemp("tls"), spark, seed=3, tls=True)
    try:
        wait_serving(served.project, served.nodes.ids)
        yield served
    finally:
        served.nodes.stop_all()


def tls_of(cluster: Served) -> Tls:
    tls = cluster.project.tls
    assert tls is not None and tls.mutual
    return tls


def expected(cluster: Served) -> dict[str, tuple[int, float]]:
    parts = oracle.expected_store(cluster.project, "customerTotals")
    return {row[0]: (row[1], row[2]) for rows in parts.values() for row in rows}


def answered(cluster: Served, node: str, keys: list[str]) -> dict[str, tuple[int, float]]:
    data = cluster.nodes.data(node, BATCH, {"keys": keys})["customerTotalsBatch"]
    assert not data["meta"]["partial"], data
    return {
        e["key"]: (wire.long(e["record"]["bookings"]), round(e["record"]["revenue"], 6))
        for e in data["entries"]
    }


def rounded(totals: dict[str, tuple[int, float]]) -> dict[str, tuple[int, float]]:
    return {key: (bookings, round(revenue, 6)) for key, (bookings, revenue) in totals.items()}


def test_every_node_answers_over_https_what_the_oracle_says(cluster: Served) -> None:
    """Each node asks the other two for their partitions over the hop, on TLS both ways."""
    want = expected(cluster)
    assert cluster.nodes.url("node1").startswith("https://")
    for node in cluster.nodes.ids:
        assert answered(cluster, node, sorted(want)) == rounded(want), node


def test_the_pipeline_notifies_the_nodes_over_https(cluster: Served, spark: LazySpark) -> None:
    """The pipeline's call to each node is what makes them switch at once; the answers then
    are the oracle's of the new events."""
    before = {n: versions(cluster, n) for n in cluster.nodes.ids}
    produce_test_events(cluster.project, seed=31, n_bookings=40, start_ms=1_767_900_000_000)
    report = job.run(cluster.project, spark)
    assert report.notify and set(report.notify.values()) == {"ok"}, report.notify
    want = expected(cluster)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        moved = all(versions(cluster, n) != before[n] for n in cluster.nodes.ids)
        if moved and answered(cluster, "node2", sorted(want)) == rounded(want):
            return
        time.sleep(0.2)
    raise AssertionError("the nodes did not switch to the pipeline's new snapshots")


def versions(cluster: Served, node: str) -> dict[str, int]:
    ready: dict[str, dict[str, int]] = cluster.nodes.client.get(
        f"{cluster.nodes.url(node)}/ready"
    ).json()
    return ready["versions"]


def test_a_subscription_over_wss_answers_the_oracle(cluster: Served) -> None:
    want = expected(cluster)
    key = sorted(want)[0]
    socket_ = Socket(cluster.nodes.url("node3"), ssl=tls_of(cluster).client())
    try:
        socket_.subscribe("t", TOTALS, {"key": key})
        record = socket_.next_of("t")["data"]["customerTotals"]["record"]
        assert (wire.long(record["bookings"]), record["revenue"]) == pytest.approx(want[key])
    finally:
        socket_.close()


def handshake_then_request(context: ssl.SSLContext, port: int) -> bytes:
    """What a TLS client gets back for a request: b"" or an SSLError when it is refused."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        return tls.recv(1024)


def port_of(cluster: Served, node: str) -> int:
    return int(cluster.project.cluster.node(node).address.rpartition(":")[2])


def test_a_client_without_a_certificate_of_the_ca_is_refused_in_the_handshake(
    cluster: Served, tmp_path: Path
) -> None:
    tls, port = tls_of(cluster), port_of(cluster, "node1")
    assert handshake_then_request(tls.client(), port).startswith(b"HTTP/1.1 200")
    bare = ssl.create_default_context(cafile=tls.ca)  # the CA, but no certificate
    other_ca = certificates.create(tmp_path / "other", [], [])
    stranger = ssl.create_default_context(cafile=tls.ca)  # a certificate of another CA
    stranger.load_cert_chain(other_ca.parent / f"{CLIENT}.pem", other_ca.parent / f"{CLIENT}.key")
    for context in (bare, stranger):
        with pytest.raises((ssl.SSLError, ConnectionResetError)):
            reply = handshake_then_request(context, port)
            assert reply == b"", reply  # closed without a byte of HTTP
            raise ConnectionResetError("closed in the handshake")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
        plain.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        assert b"HTTP/1.1" not in plain.recv(1024), "plain HTTP answered on a TLS port"


def test_sighup_presents_a_new_certificate_and_drops_no_connection(
    cluster: Served, tmp_path: Path
) -> None:
    """node1's certificate and key replaced by one of another CA, then SIGHUP: a connection
    made before keeps working; a new one is shown the new certificate. Then put back."""
    tls, port = tls_of(cluster), port_of(cluster, "node1")
    cert, key = tls.files("node1")
    kept = Path(tmp_path / "kept")
    kept.mkdir()
    shutil.copy(cert, kept / "node1.pem")
    shutil.copy(key, kept / "node1.key")
    new_ca = certificates.create(tmp_path / "new", ["node1"], [])
    before = http.client.HTTPSConnection("127.0.0.1", port, context=tls.client(), timeout=10)
    try:
        assert status(before) == 200
        old_der = before.sock.getpeercert(binary_form=True)  # type: ignore[union-attr]
        shutil.copy(new_ca.parent / "node1.pem", cert)
        shutil.copy(new_ca.parent / "node1.key", key)
        os.kill(cluster.nodes.processes.pid("node1"), signal.SIGHUP)
        time.sleep(0.5)
        sock = before.sock
        assert status(before) == 200 and before.sock is sock, "the connection was dropped"
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake_then_request(tls.client(), port)  # the new certificate: another CA
        renewed = ssl.create_default_context(cafile=new_ca)
        renewed.load_cert_chain(*tls.files(CLIENT))
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            renewed.wrap_socket(raw, server_hostname="127.0.0.1") as fresh,
        ):
            assert fresh.getpeercert(binary_form=True) != old_der
    finally:
        before.close()
        shutil.copy(kept / "node1.pem", cert)
        shutil.copy(kept / "node1.key", key)
        os.kill(cluster.nodes.processes.pid("node1"), signal.SIGHUP)
    time.sleep(0.5)
    assert handshake_then_request(tls.client(), port).startswith(b"HTTP/1.1 200")


def status(connection: http.client.HTTPSConnection) -> int:
    connection.request("GET", "/health")
    response = connection.getresponse()
    response.read()
    return int(response.status)


def test_the_demo_laid_out_across_machines_answers_over_tls_from_a_bucket(
    tmp_path: Path,
) -> None:
    """`stategate demo --across --check`: its own S3Proxy on https holds the snapshots the
    nodes pull, every link is TLS on a dev CA, and the example queries and a live push come
    back from every node (the demo's own checks)."""
    template = demo.PROJECT_TEMPLATE.read_text()
    for old, new in zip((8101, 8102, 8103), free_ports(3), strict=True):
        template = template.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}")
    (tmp_path / "stategate.toml").write_text(template)
    command = [sys.executable, "-c", ON_PORTS, str(tmp_path / "stategate.toml"), "demo"]
    command += ["--dir", str(tmp_path / "demo"), "--customers", "300", "--events", "3000"]
    done = subprocess.run(
        [*command, "--across", "--check"], capture_output=True, text=True, timeout=600
    )
    told = done.stdout + done.stderr
    assert done.returncode == 0, told[-4000:]
    assert "The cluster is up: node1 https://127.0.0.1:" in told, told[-4000:]
    assert told.count(": ok, ") == 3 and "pushed the booking produced by hand" in told, told
    assert "--cacert" in told and "Laid out as across machines" in told, told
    manifest = tmp_path / "demo" / "s3" / "data" / demo.BUCKET / "snapshots" / "manifest.json"
    assert manifest.is_file(), "the snapshots were not published to the bucket"
