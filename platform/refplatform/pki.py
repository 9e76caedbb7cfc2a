"""A private CA and a serving certificate for the API server, made on first start.

kubectl (client-go) sends bearer tokens only over TLS, and a real
kube-apiserver only serves TLS, so the reference platform does the same: the
cluster's own CA signs a certificate for 127.0.0.1, ::1 and localhost, and the
kubeconfig carries the CA.  Keys are ECDSA P-256, written with mode 0600, and
reused across restarts of the same data directory.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

PKI_DIR = "pki"
VALIDITY = dt.timedelta(days=3650)


@dataclass(frozen=True)
class ServingPki:
    """Paths of the CA certificate and the server's certificate and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def ensure_pki(data_dir: Path, now: dt.datetime | None = None) -> ServingPki:
    """Create the CA and serving certificate under ``data_dir/pki`` unless they already exist."""
    pki_dir = Path(data_dir) / PKI_DIR
    paths = ServingPki(pki_dir / "ca.crt", pki_dir / "apiserver.crt", pki_dir / "apiserver.key")
    if paths.ca_cert.exists() and paths.server_cert.exists() and paths.server_key.exists():
        return paths
    pki_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = now or dt.datetime.now(dt.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "firedrill-reference-ca")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "firedrill-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write(paths.server_key, _key_pem(key), 0o600)
    _write(paths.server_cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(paths.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)
    # The CA key is not kept: nothing else is ever signed, so nothing can be forged with it later.
    return paths
