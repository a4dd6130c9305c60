"""Certificates (README: TLS): a node's server side read again on SIGHUP, and the dev helper
`stategate certs` that makes a CA and certificates for a demo or a test cluster (trustme, on
cryptography: no hand-made ASN.1). A real deployment brings its own from its own CA."""

from __future__ import annotations

import logging
import secrets
import ssl
from collections.abc import Iterable
from pathlib import Path

import trustme
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    load_pem_private_key,
    pkcs12,
)
from cryptography.x509 import load_pem_x509_certificates

from contracts.tls import CLIENT, Tls

log = logging.getLogger(__name__)
CA_FILE = "ca.pem"
LOCAL = ("localhost", "127.0.0.1", "::1")  # every certificate the helper makes names these


def reread(tls: Tls, context: ssl.SSLContext, node: str) -> None:
    """Read the node's certificate and key again into its server `context` (on SIGHUP):
    handshakes from then on present the new certificate, and no connection is dropped. A
    pair that does not load leaves the one in use, and says why."""
    try:
        tls.reload(context, node)
        log.info("SIGHUP: the certificate %s read again", tls.files(node)[0])
    except (OSError, ssl.SSLError) as exc:
        log.error("SIGHUP: the certificate in use is kept: %s", exc)


def keystore(tls: Tls, holder: str, folder: Path) -> tuple[Path, str]:
    """`holder`'s certificate chain and key as a PKCS#12 keystore in `folder`, what a JVM
    server reads (S3Proxy's Jetty, Kafka's broker), under a password made for it; (its
    path, the password)."""
    password = secrets.token_hex(16)
    path = folder / f"{holder}.p12"
    cert, key = tls.files(holder)
    leaf, *chain = load_pem_x509_certificates(cert.read_bytes())
    private = load_pem_private_key(key.read_bytes(), None)
    if not isinstance(private, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise RuntimeError(f"{key}: an EC or RSA key, for a Java keystore")
    encrypted = BestAvailableEncryption(password.encode())
    path.write_bytes(
        pkcs12.serialize_key_and_certificates(holder.encode(), private, leaf, chain, encrypted)
    )
    path.chmod(0o600)
    return path, password


def table(folder: str, mutual: bool = True) -> str:
    """The project file's [tls] for what `create` wrote to `folder` (relative to the file)."""
    return (
        f'\n[tls]\nca = "{folder}/{CA_FILE}"\ncert = "{folder}/{{node}}.pem"\n'
        f'key = "{folder}/{{node}}.key"\nmutual = {str(mutual).lower()}\n'
    )


def create(folder: Path, names: Iterable[str], hosts: Iterable[str]) -> Path:
    """A CA (`ca.pem`) and, for each of `names` and for CLIENT, `<name>.pem` and `<name>.key`
    valid for `hosts` and loopback, in `folder`; the CA's path."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="stategate dev CA")
    identities = list(dict.fromkeys([*hosts, *LOCAL]))
    for name in dict.fromkeys([*names, CLIENT]):
        leaf = ca.issue_cert(*identities, common_name=name)
        leaf.private_key_pem.write_to_path(str(folder / f"{name}.key"))
        for number, pem in enumerate(leaf.cert_chain_pems):
            pem.write_to_path(str(folder / f"{name}.pem"), append=number > 0)
        (folder / f"{name}.key").chmod(0o600)
    ca.cert_pem.write_to_path(str(folder / CA_FILE))
    return folder / CA_FILE
