"""HTTPS for a workflow's repository and workers: certificates from files, verified against one CA.

A workflow that names ``tls`` (``{"ca": PATH, "cert": PATTERN, "key": PATTERN}``,
``{host}`` in a pattern standing for the server's host, paths relative to
the workflow) serves every repository and worker over HTTPS with its host's
certificate, and its clients (lease, pulls, ``pan subscribe --ca``) speak
HTTPS and accept only certificates signed by that CA for the host they
asked. A plain HTTP request to such a server fails its TLS handshake.

``make_certificates`` writes a private CA and one certificate per host (for a
test cluster or ``pan tls certs``); it needs the ``tls`` extra (cryptography).
Serving and verifying use only Python's ``ssl``.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from functools import cache
from pathlib import Path

HOST_FIELD = "{host}"


class TlsError(Exception):
    """Certificates that cannot be loaded (missing file, wrong key, unreadable CA)."""


@dataclass(frozen=True)
class TlsFiles:
    """Where a workflow's CA and its hosts' certificates and keys are."""

    ca: Path
    cert: str  # a path pattern with {host}
    key: str

    def resolved(self, base: Path) -> TlsFiles:
        """The same with relative paths taken from ``base`` (the workflow's folder)."""
        def absolute(path: str) -> str:
            return path if Path(path).is_absolute() else str(base / path)

        return TlsFiles(Path(absolute(str(self.ca))), absolute(self.cert), absolute(self.key))

    def cert_for(self, host: str) -> tuple[Path, Path]:
        return Path(self.cert.replace(HOST_FIELD, host)), Path(self.key.replace(HOST_FIELD, host))

    def server_context(self, host: str) -> ssl.SSLContext:
        """What a server on ``host`` presents; ``TlsError`` saying which file is wrong."""
        return server_context(*self.cert_for(host))

    def client_context(self) -> ssl.SSLContext:
        return client_context(self.ca)


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context presenting ``cert``; ``TlsError`` saying which file is wrong."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"TLS certificate {cert} / key {key}: {exc}") from None
    return context


@cache
def client_context(ca: Path) -> ssl.SSLContext:
    """A client context that trusts only ``ca`` and checks the host name (one per CA and process)."""
    try:
        return ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"TLS CA {ca}: {exc}") from None


def scheme(tls: ssl.SSLContext | None) -> str:
    return "http" if tls is None else "https"


def make_certificates(out: Path, hosts: list[str], *, days: int = 30) -> TlsFiles:
    """A private CA (``out/ca.pem``) and, per host, ``out/<host>.pem`` and ``out/<host>.key`` signed by it."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        raise TlsError("making certificates needs the tls extra: pip install 'pan[tls]'") from None

    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "PAN private CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    (out / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for host in hosts:
        key = ec.generate_private_key(ec.SECP256R1())
        try:
            alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=days))
                .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .sign(ca_key, hashes.SHA256()))
        (out / f"{host}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path = out / f"{host}.key"
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)
    return TlsFiles(out / "ca.pem", str(out / f"{HOST_FIELD}.pem"), str(out / f"{HOST_FIELD}.key"))
