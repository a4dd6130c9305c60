"""TLS on every link (README: TLS): the project file's [tls] and the SSL contexts made from it,
here once, for every server and client stategate runs: nodes (to clients and to each other),
the pipeline's calls to nodes, the CLI's, and the coordinator's client.

    [tls]
    ca = "certs/ca.pem"            # what every peer's certificate is checked against
    cert = "certs/{node}.pem"      # this process's certificate chain and key; "{node}" is the
    key = "certs/{node}.key"       # node's id in a node, CLIENT in the pipeline and the CLI
    mutual = true                  # nodes accept only connections with a certificate of the CA

With `mutual`, a connection without a certificate of the CA is refused in the handshake, before
any HTTP is read, and the cluster secret is a second factor rather than the only one.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from contracts.entries import ConfigError, Table

CLIENT = "client"  # whose certificate the pipeline and the CLI present
ENTRIES = ("ca", "cert", "key", "mutual")
MINIMUM = ssl.TLSVersion.TLSv1_2


@dataclass(frozen=True)
class Tls:
    ca: Path
    cert: str  # a path, "{node}" standing for the holder
    key: str
    mutual: bool = False

    def files(self, holder: str) -> tuple[Path, Path]:
        """The certificate chain and key of `holder` (a node's id, or CLIENT)."""
        return Path(self.cert.format(node=holder)), Path(self.key.format(node=holder))

    def server(self, node: str) -> ssl.SSLContext:
        """A node's server side: its certificate; with `mutual`, a client's required."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = MINIMUM
        context.load_verify_locations(self.ca)
        context.verify_mode = ssl.CERT_REQUIRED if self.mutual else ssl.CERT_NONE
        self.reload(context, node)
        return context

    def client(self, holder: str = CLIENT) -> ssl.SSLContext:
        """A client's side: the peer's certificate and host name checked against the CA; with
        `mutual`, `holder`'s certificate presented. A ConfigError naming what it cannot load
        (a file missing, a CA or certificate that is not PEM, a key not the certificate's)."""
        try:
            context = ssl.create_default_context(cafile=self.ca)
            context.minimum_version = MINIMUM
            if self.mutual:
                self.reload(context, holder)
        except OSError as exc:  # ssl.SSLError among them
            cert, key = self.files(holder)
            mine = f", {holder}'s certificate {cert} and key {key}" if self.mutual else ""
            raise ConfigError(f"[tls]: the CA {self.ca}{mine}: {exc}") from exc
        return context

    def reload(self, context: ssl.SSLContext, holder: str) -> None:
        """Load `holder`'s certificate into `context`: handshakes from now on present it, the
        connections already made keep theirs."""
        cert, key = self.files(holder)
        context.load_cert_chain(cert, key)


def parse(raw: object, base: Path) -> Tls | None:
    """[tls], its paths resolved against the project file's folder; None when absent."""
    if raw is None:
        return None
    table = Table(raw, "[tls]", ENTRIES)
    tls = Tls(
        ca=base / table.get("ca", str),
        cert=str(base / table.get("cert", str)),
        key=str(base / table.get("key", str)),
        mutual=table.get("mutual", bool, False),
    )
    if not tls.ca.is_file():
        raise ConfigError(f"[tls]: ca {str(tls.ca)!r} is not a file")
    for template in (tls.cert, tls.key):
        try:
            template.format(node=CLIENT)
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(f"[tls]: {template!r} may hold {{node}} and no other braces") from exc
    return tls


def serving(tls: Tls, node: str) -> ssl.SSLContext:
    """The node's server context; a ConfigError naming what it cannot load: a file missing,
    or a key that is not the certificate's."""
    try:
        return tls.server(node)
    except (OSError, ssl.SSLError) as exc:
        cert, key = tls.files(node)
        raise ConfigError(f"[tls]: {node}'s certificate {cert} and key {key}: {exc}") from exc


def verify(tls: Tls | None) -> ssl.SSLContext | bool:
    """What an httpx client outside the nodes (the pipeline, the CLI) checks a node with: the
    cluster's CA with [tls], else the system's."""
    return tls.client() if tls is not None else True
