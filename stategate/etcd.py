"""A local etcd for the tests and the benchmark (Debian's etcd-server, installed by `make
test`): its own data folder and loopback ports, stopped and started again like a machine; and
what both wait for in it, an elastic cluster settled."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Collection, Mapping
from pathlib import Path

from contracts.coordination import Coordination, CoordinatorError, State
from contracts.project import Project
from stategate.launcher import free_ports, serving

ETCD = "/usr/bin/etcd"
READY_S = 20
MEMBER = "local"  # the etcd member's own name: one member, its own cluster
MISSING = f"{ETCD} is missing: `make coordinator` installs Debian's etcd-server"


def installed() -> bool:
    return shutil.which(ETCD) is not None


class Etcd:
    def __init__(self, folder: Path) -> None:
        if not installed():
            raise RuntimeError(MISSING)
        self.folder = folder
        self.client_port, self.peer_port = free_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(self.folder / "etcd.log", "ab")  # noqa: SIM115 - the process holds it
        self.proc = subprocess.Popen(
            [ETCD, "--name", MEMBER, "--data-dir", str(self.folder / "data"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"{MEMBER}={peer}"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            try:
                self.read("probe")
                return
            except CoordinatorError:
                time.sleep(0.2)
        raise RuntimeError(f"etcd did not answer within {READY_S} s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def read(self, cluster: str) -> State:
        async def go() -> State:
            coordination = Coordination(self.url, cluster)
            await coordination.connect()
            try:
                return await coordination.read()
            finally:
                await coordination.close()

        return asyncio.run(go())


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
        and all(serving(project, url) >= set(a.hosted_by(n)) for n, url in urls.items())
    )
