"""aetcd's client, over TLS when [tls] is set. aetcd 1.0 opens only plaintext channels
(`connect` calls grpc's insecure_channel), so the TLS client opens its channel itself, with the
project's CA and, with mutual TLS, the client's certificate, and makes the same stubs."""

from __future__ import annotations

from typing import Any

import aetcd
import grpc
from aetcd import rpc, watcher

from contracts.entries import ConfigError
from contracts.tls import CLIENT, Tls


def client(
    host: str, port: int, tls: Tls | None, holder: str = CLIENT, **options: Any
) -> aetcd.Client:
    """`holder`: whose certificate is presented with mutual TLS (a node's own id in a node,
    CLIENT in the pipeline and the CLI: each host holds only its own key)."""
    if tls is None:
        return aetcd.Client(host, port, **options)
    return _TlsClient(host, port, _credentials(tls, holder), **options)


def _credentials(tls: Tls, holder: str) -> grpc.ChannelCredentials:
    """The channel's credentials; a ConfigError naming a file that cannot be read."""
    try:
        if not tls.mutual:
            return grpc.ssl_channel_credentials(root_certificates=tls.ca.read_bytes())
        cert, key = tls.files(holder)
        ca, key_bytes, cert_bytes = tls.ca.read_bytes(), key.read_bytes(), cert.read_bytes()
    except OSError as exc:
        raise ConfigError(f"[tls]: the coordinator's client ({holder}): {exc}") from None
    return grpc.ssl_channel_credentials(ca, key_bytes, cert_bytes)


class _TlsClient(aetcd.Client):  # type: ignore[misc]
    def __init__(self, host: str, port: int, credentials: grpc.ChannelCredentials, **options: Any):
        super().__init__(host, port, **options)
        self._credentials = credentials

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        target = f"{self._host}:{self._port}"
        self.channel = rpc.secure_channel(target, self._credentials, self._options.items())
        self.kvstub = rpc.KVStub(self.channel)
        self.clusterstub = rpc.ClusterStub(self.channel)
        self.leasestub = rpc.LeaseStub(self.channel)
        self.maintenancestub = rpc.MaintenanceStub(self.channel)
        self._watcher = watcher.Watcher(
            rpc.WatchStub(self.channel), timeout=self._timeout, metadata=self.metadata
        )
        self._connected.set()
