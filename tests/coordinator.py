"""A real etcd for the tests (Debian's etcd-server, installed by `make test`): its own data
folder and loopback ports, stopped and started again like a machine."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path

from contracts.coordination import Coordination, CoordinatorError, Endpoint, State
from stategate.launcher import free_ports

ETCD = "/usr/bin/etcd"
READY_S = 20


class Etcd:
    def __init__(self, folder: Path) -> None:
        if shutil.which(ETCD) is None:
            raise RuntimeError(f"{ETCD} is missing: `make test` installs Debian's etcd-server")
        self.folder = folder
        self.client_port, self.peer_port = free_ports(2)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = open(self.folder / "etcd.log", "ab")  # noqa: SIM115 - the process holds it
        self.proc = subprocess.Popen(
            [ETCD, "--name", "test", "--data-dir", str(self.folder / "data"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"test={peer}"],
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
            coordination = Coordination(Endpoint.parse(self.url), cluster)
            await coordination.connect()
            try:
                return await coordination.read()
            finally:
                await coordination.close()

        return asyncio.run(go())
