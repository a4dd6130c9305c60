"""A local etcd for the tests and the benchmark (Debian's etcd-server, installed by `make
test`): its own data folder and loopback ports, stopped and started again like a machine; and
what both wait for in it, an elastic cluster settled."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from contracts import chains
from contracts.coordination import CoordinatorError, State, read_once
from contracts.etcd_client import client as etcd_client
from contracts.project import Project, scheme
from contracts.tls import Tls
from stategate.hosts import Network
from stategate.launcher import free_ports, serving

ETCD = "/usr/bin/etcd"
READY_S = 20
MEMBER = "local"  # the etcd member's own name: one member, its own cluster
CLIENT_PORT, PEER_PORT = 2379, 2380  # an ensemble's, each member on a host of its own
MISSING = f"{ETCD} is missing: `make coordinator` installs Debian's etcd-server"
ETCD_HOLDER = "etcd"  # with TLS, the members' certificate: etcd.pem and etcd.key


def installed() -> bool:
    return shutil.which(ETCD) is not None


class Etcd:
    """With `tls`, every link is TLS: its member's certificate is the holder ETCD's, and with
    mutual TLS it takes only clients with a certificate of the CA."""

    def __init__(self, folder: Path, tls: Tls | None = None) -> None:
        if not installed():
            raise RuntimeError(MISSING)
        self.folder, self.tls = folder, tls
        self.client_port, self.peer_port = free_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        client = f"{scheme(self.tls)}://127.0.0.1:{self.client_port}"
        peer = f"{scheme(self.tls)}://127.0.0.1:{self.peer_port}"
        self.proc = _spawn([], self.folder, MEMBER, client, peer, f"{MEMBER}={peer}", self.tls)
        _wait_answering(self.url, self.tls)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def read(self, cluster: str) -> State:
        return read(self.url, cluster, self.tls)


class Ensemble:
    """etcd with a member on each of the given hosts (stategate/hosts.py), as a production
    coordinator runs: a majority of them must agree for anything to be written."""

    def __init__(
        self, folder: Path, network: Network, hosts: Sequence[str], tls: Tls | None = None
    ) -> None:
        if not installed():
            raise RuntimeError(MISSING)
        self.folder, self.network, self.hosts = folder, network, list(hosts)
        self.tls = tls
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        members = ",".join(f"{self.network.address(h)}:{CLIENT_PORT}" for h in self.hosts)
        return f"etcd://{members}"

    def start(self) -> None:
        peers = ",".join(f"{h}={self._peer(h)}" for h in self.hosts)
        for host in self.hosts:
            client = f"{scheme(self.tls)}://{self.network.address(host)}:{CLIENT_PORT}"
            on_host = self.network.command(host, [])
            folder, peer = self.folder / host, self._peer(host)
            self.procs[host] = _spawn(on_host, folder, host, client, peer, peers, self.tls)
        _wait_answering(self.url, self.tls)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
        for proc in self.procs.values():
            proc.wait(10)
        self.procs.clear()

    def leader(self) -> str:
        """The host whose member leads now (asked of each member until one answers)."""

        async def ask(host: str) -> str:
            client = etcd_client(self.network.address(host), CLIENT_PORT, self.tls, timeout=2)
            try:
                status = await client.status()
                return str(status.leader.name)
            finally:
                await client.close()

        for host in self.hosts:
            with contextlib.suppress(Exception):
                return asyncio.run(ask(host))
        raise RuntimeError("no etcd member knows a leader")

    def _peer(self, host: str) -> str:
        return f"{scheme(self.tls)}://{self.network.address(host)}:{PEER_PORT}"


def read(url: str, cluster: str, tls: Tls | None = None) -> State:
    """The cluster's state in the coordinator at `url`, over a connection of its own."""
    return asyncio.run(read_once(url, cluster, tls))


def _spawn(
    wrap: list[str],
    folder: Path,
    name: str,
    client: str,
    peer: str,
    peers: str,
    tls: Tls | None,
) -> subprocess.Popen[bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "etcd.log", "ab")  # noqa: SIM115 - the process holds it
    proc = subprocess.Popen(
        [*wrap, ETCD, "--name", name, "--data-dir", str(folder / "data"),
         "--listen-client-urls", client, "--advertise-client-urls", client,
         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
         "--initial-cluster", peers, *_tls_flags(tls)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    return proc


def _tls_flags(tls: Tls | None) -> list[str]:
    """etcd's flags for TLS to its clients and between its members, each side checked
    against the CA; with mutual TLS, clients too."""
    if tls is None:
        return []
    cert, key = (str(path) for path in tls.files(ETCD_HOLDER))
    flags = ["--cert-file", cert, "--key-file", key, "--trusted-ca-file", str(tls.ca)]
    flags += ["--peer-cert-file", cert, "--peer-key-file", key]
    flags += ["--peer-trusted-ca-file", str(tls.ca), "--peer-client-cert-auth"]
    return [*flags, "--client-cert-auth"] if tls.mutual else flags


def _wait_answering(url: str, tls: Tls | None) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        try:
            read(url, "probe", tls)
            return
        except CoordinatorError:
            time.sleep(0.2)
    raise RuntimeError(f"etcd did not answer within {READY_S} s")


def settled(state: State, members: Collection[str], replicas: int) -> bool:
    """The registered nodes are `members`; every partition has `replicas` serving, none
    warming; and every member that is not draining serves, and no other node does. (Whether
    each node serves what it is assigned, only the node can say.)"""
    a = state.assignment
    return (
        a is not None
        and set(state.members) == set(members)
        and not any(a.warming)
        and all(len(nodes) == replicas for nodes in a.serving)
        and set().union(*a.serving) == set(members) - state.draining
    )


def serving_settled(state: State, urls: Mapping[str, str], project: Project) -> bool:
    """`settled` with the nodes of `urls` as the members, and each of them serving what it is
    assigned (its /internal/status)."""
    a = state.assignment
    return (
        a is not None
        and settled(state, urls, project.cluster.replicas)
        and all(
            serving(project, url) >= set(chains.held(project, a.hosted_by(n)))
            for n, url in urls.items()
        )
    )
