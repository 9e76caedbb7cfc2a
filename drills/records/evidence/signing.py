"""DSSE envelopes signed with Ed25519 (through ``cryptography``), and the signing keys.

Envelope (https://github.com/secure-systems-lab/dsse/blob/master/envelope.md)::

    {"payload": "<base64 of the payload bytes>",
     "payloadType": "application/vnd.in-toto+json",
     "signatures": [{"keyid": "<hex>", "sig": "<base64 of the 64-byte Ed25519 signature>"}]}

written as canonical JSON (standard base64 alphabet, with padding).  The signature is over the DSSE v1
pre-authentication encoding, exactly::

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

where ``LEN`` is the byte length in ASCII decimal, ``SP`` one space and ``type`` is UTF-8.

**keyid** = SHA-256 (lowercase hex) of the public key's DER-encoded SubjectPublicKeyInfo, the same bytes as
``openssl pkey -pubin -in public-key.pem -outform DER | sha256sum``.

Keys: :func:`generate_keypair` writes ``firedrill-signing.key`` (PKCS#8 PEM, unencrypted, mode 0600) and
``firedrill-signing.pub`` (SubjectPublicKeyInfo PEM); :func:`load_private_key` refuses a key file that group
or others may access.  A run without a key signs with :meth:`Signer.ephemeral`: a key made for that run
and thrown away.  Its archive proves integrity (nothing changed since sealing), not identity (anyone could
have made such a key); the caller warns loudly and ``signer.json`` says ``"ephemeral": true``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from drills.records.evidence.canonical import canonical_json, sha256_hex
from drills.records.evidence.errors import EnvelopeError, KeyFileError

__all__ = [
    "ALGORITHM",
    "DEFAULT_KEY_DIR",
    "KEYID_ENCODING",
    "PAYLOAD_TYPE",
    "PRIVATE_KEY_NAME",
    "PUBLIC_KEY_NAME",
    "Envelope",
    "Signature",
    "SignatureCheck",
    "Signer",
    "generate_keypair",
    "keyid_of",
    "load_private_key",
    "load_public_key",
    "pae",
    "public_key_from_pem",
    "public_key_pem",
    "verify_envelope",
]

PAYLOAD_TYPE = "application/vnd.in-toto+json"
ALGORITHM = "ed25519"
KEYID_ENCODING = "sha256 of the DER SubjectPublicKeyInfo"
PRIVATE_KEY_NAME = "firedrill-signing.key"
PUBLIC_KEY_NAME = "firedrill-signing.pub"
DEFAULT_KEY_DIR = Path(".firedrill/keys")
"""Where ``firedrill keygen`` writes the key pair unless told ``--out``."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE v1 pre-authentication encoding: the bytes actually signed."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def keyid_of(public_key: Ed25519PublicKey) -> str:
    """SHA-256 hex of the DER SubjectPublicKeyInfo."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return sha256_hex(der)


def public_key_pem(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def public_key_from_pem(data: bytes, where: str) -> Ed25519PublicKey:
    """Parse a SubjectPublicKeyInfo PEM; ``where`` names its file in any :class:`KeyFileError`."""
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(f"{where}: not a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{where}: a {type(key).__name__} key; Firedrill signs with Ed25519")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read the public key ({exc.strerror or exc})") from None
    return public_key_from_pem(data, str(path))


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """Read an unencrypted PKCS#8 PEM Ed25519 key, refusing one that group or others may access."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no such signing key (make one with `firedrill keygen`)") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read the signing key ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise KeyFileError(f"{path}: the signing key is not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise KeyFileError(f"{path}: the signing key is accessible by group or others (mode {mode:04o}); "
                           f"a signing key must be private: chmod 600 {path}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read the signing key ({exc.strerror or exc})") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise KeyFileError(f"{path}: the signing key is encrypted; Firedrill reads unencrypted PKCS#8 PEM "
                           "keys kept private by their file mode") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise KeyFileError(f"{path}: not a PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path}: a {type(key).__name__} key; Firedrill signs with Ed25519")
    return key


def generate_keypair(directory: Path) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair into ``directory`` (made if missing) and return (private, public) paths.

    Refuses, touching nothing, if either file already exists."""
    private_path, public_path = directory / PRIVATE_KEY_NAME, directory / PUBLIC_KEY_NAME
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise KeyFileError(f"{path} already exists; refusing to overwrite a signing key "
                               "(move it away or choose another directory with --out)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KeyFileError(f"{directory}: cannot create the key directory ({exc.strerror or exc})") from None
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    _write_new(private_path, private_pem, 0o600)
    try:
        _write_new(public_path, public_key_pem(key.public_key()), 0o644)
    except KeyFileError:
        private_path.unlink(missing_ok=True)
        raise
    return private_path, public_path


def _write_new(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    except FileExistsError:
        raise KeyFileError(f"{path} already exists; refusing to overwrite a signing key") from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot create ({exc.strerror or exc})") from None
    try:
        os.fchmod(fd, mode)  # whatever the umask
        os.write(fd, data)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes
    """The raw 64-byte Ed25519 signature (base64 only in JSON)."""

    def to_dict(self) -> dict[str, str]:
        return {"keyid": self.keyid, "sig": base64.b64encode(self.sig).decode("ascii")}


@dataclass(frozen=True)
class Envelope:
    """A DSSE envelope."""

    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def pae(self) -> bytes:
        return pae(self.payload_type, self.payload)

    def to_dict(self) -> dict[str, Any]:
        return {"payload": base64.b64encode(self.payload).decode("ascii"), "payloadType": self.payload_type,
                "signatures": [s.to_dict() for s in self.signatures]}

    def to_json(self) -> bytes:
        """The envelope file's bytes (canonical JSON)."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "Envelope":
        """Parse an envelope file strictly; ``where`` names it in any :class:`EnvelopeError`."""
        try:
            d = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise EnvelopeError(f"{where}: not a JSON DSSE envelope ({exc})") from None
        if not isinstance(d, dict) or not isinstance(d.get("payload"), str) \
                or not isinstance(d.get("payloadType"), str) or not isinstance(d.get("signatures"), list):
            raise EnvelopeError(f"{where}: not a DSSE envelope (needs payload, payloadType and signatures)")
        payload = _b64(d["payload"], f"{where}: payload")
        sigs: list[Signature] = []
        for i, s in enumerate(d["signatures"]):
            if not isinstance(s, dict) or not isinstance(s.get("sig"), str) \
                    or not isinstance(s.get("keyid", ""), str):
                raise EnvelopeError(f"{where}: signature {i} needs a base64 sig and a keyid string")
            sigs.append(Signature(s.get("keyid", ""), _b64(s["sig"], f"{where}: signature {i}")))
        return cls(d["payloadType"], payload, tuple(sigs))


def _b64(text: str, where: str) -> bytes:
    for altchars in (None, b"-_"):  # DSSE readers accept the URL-safe alphabet too
        try:
            return base64.b64decode(text, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            pass
    raise EnvelopeError(f"{where} is not base64")


class Signer:
    """An Ed25519 private key that signs DSSE envelopes; ``ephemeral`` when it was made for one run."""

    def __init__(self, private_key: Ed25519PrivateKey, *, ephemeral: bool = False) -> None:
        self._key = private_key
        self.ephemeral = ephemeral
        self.public_key = private_key.public_key()
        self.keyid = keyid_of(self.public_key)

    @classmethod
    def generate_ephemeral(cls) -> "Signer":
        """A throwaway key for a run without a signing key: integrity, not identity."""
        return cls(Ed25519PrivateKey.generate(), ephemeral=True)

    @classmethod
    def from_key_file(cls, path: Path) -> "Signer":
        return cls(load_private_key(path))

    @property
    def public_pem(self) -> bytes:
        return public_key_pem(self.public_key)

    def sign(self, payload_type: str, payload: bytes) -> Envelope:
        return Envelope(payload_type, payload, (Signature(self.keyid, self._key.sign(pae(payload_type, payload))),))

    def info(self) -> dict[str, Any]:
        """``signer.json``: who signed, as far as the archive can say."""
        return {"algorithm": ALGORITHM, "keyid": self.keyid, "keyidEncoding": KEYID_ENCODING,
                "ephemeral": self.ephemeral, "publicKey": "public-key.pem"}


@dataclass(frozen=True)
class SignatureCheck:
    keyid: str
    valid: bool
    reason: str = ""


def verify_envelope(envelope: Envelope, public_key: Ed25519PublicKey) -> list[SignatureCheck]:
    """Check every signature of ``envelope`` against ``public_key``.  A signature whose keyid names another
    key is reported invalid (a Firedrill archive is signed by one key); an envelope with no signature gets
    one invalid check."""
    expected = keyid_of(public_key)
    if not envelope.signatures:
        return [SignatureCheck("", False, "the envelope has no signature")]
    checks: list[SignatureCheck] = []
    message = envelope.pae()
    for sig in envelope.signatures:
        if sig.keyid and sig.keyid != expected:
            checks.append(SignatureCheck(sig.keyid, False, f"signed by keyid {sig.keyid[:16]}…, "
                                                           f"not the verifying key {expected[:16]}…"))
            continue
        try:
            public_key.verify(sig.sig, message)
        except InvalidSignature:
            checks.append(SignatureCheck(sig.keyid, False, "the Ed25519 signature does not match the payload"))
        else:
            checks.append(SignatureCheck(sig.keyid or expected, True))
    return checks


def all_valid(checks: Sequence[SignatureCheck]) -> bool:
    return bool(checks) and all(c.valid for c in checks)
