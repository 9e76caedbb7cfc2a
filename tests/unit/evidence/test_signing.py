"""DSSE envelopes, Ed25519 signatures, keyids and key files."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

from drills.records.evidence.canonical import sha256_hex
from drills.records.evidence.errors import EnvelopeError, KeyFileError
from drills.records.evidence.signing import (
    PAYLOAD_TYPE,
    PRIVATE_KEY_NAME,
    PUBLIC_KEY_NAME,
    Envelope,
    Signer,
    generate_keypair,
    keyid_of,
    load_private_key,
    load_public_key,
    pae,
    verify_envelope,
)


def test_pae_is_dsse_v1() -> None:
    # the DSSE specification's example
    assert pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"  # byte lengths, not characters


def test_keyid_is_sha256_of_der_spki() -> None:
    key = Ed25519PrivateKey.generate().public_key()
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert keyid_of(key) == sha256_hex(der) and len(der) == 44


def test_sign_verify_round_trip() -> None:
    signer = Signer.generate_ephemeral()
    envelope = signer.sign(PAYLOAD_TYPE, b'{"hello":"world"}')
    assert envelope.signatures[0].keyid == signer.keyid
    again = Envelope.from_json(envelope.to_json(), "e.json")
    assert again == envelope
    checks = verify_envelope(again, signer.public_key)
    assert [(c.keyid, c.valid) for c in checks] == [(signer.keyid, True)]
    d = envelope.to_dict()
    assert set(d) == {"payload", "payloadType", "signatures"}
    assert base64.b64decode(d["payload"]) == b'{"hello":"world"}' and d["payloadType"] == PAYLOAD_TYPE


def test_tampered_payload_signature_and_type_fail() -> None:
    signer = Signer.generate_ephemeral()
    envelope = signer.sign(PAYLOAD_TYPE, b'{"verdict":"FAIL"}')
    bad_payload = Envelope(envelope.payload_type, b'{"verdict":"PASS"}', envelope.signatures)
    sig = bytearray(envelope.signatures[0].sig)
    sig[0] ^= 1
    bad_sig = Envelope(envelope.payload_type, envelope.payload,
                       (type(envelope.signatures[0])(signer.keyid, bytes(sig)),))
    bad_type = Envelope("application/json", envelope.payload, envelope.signatures)
    for bad in (bad_payload, bad_sig, bad_type):
        [check] = verify_envelope(bad, signer.public_key)
        assert not check.valid and "does not match" in check.reason


def test_another_key_and_no_signature_fail() -> None:
    envelope = Signer.generate_ephemeral().sign(PAYLOAD_TYPE, b"{}")
    other = Signer.generate_ephemeral()
    [check] = verify_envelope(envelope, other.public_key)
    assert not check.valid and "not the verifying key" in check.reason
    [check] = verify_envelope(Envelope(PAYLOAD_TYPE, b"{}", ()), other.public_key)
    assert not check.valid and "no signature" in check.reason


@pytest.mark.parametrize("data", [b"not json", b"[]", b'{"payload":"!!!","payloadType":"x","signatures":[]}',
                                  b'{"payload":"e30=","payloadType":"x","signatures":[{"sig":5}]}'])
def test_bad_envelopes_name_the_file(data: bytes) -> None:
    with pytest.raises(EnvelopeError, match="^evidence/run.dsse.json"):
        Envelope.from_json(data, "evidence/run.dsse.json")


def test_urlsafe_base64_accepted() -> None:
    signer = Signer.generate_ephemeral()
    envelope = signer.sign(PAYLOAD_TYPE, b"\xfb\xff" * 10)
    d = envelope.to_dict()
    text = envelope.to_json().replace(d["payload"].encode(), base64.urlsafe_b64encode(envelope.payload))
    assert Envelope.from_json(text, "e") == envelope


def test_keygen_writes_private_0600_and_public(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        private, public = generate_keypair(tmp_path / "keys")
    finally:
        os.umask(old)
    assert (private.name, public.name) == (PRIVATE_KEY_NAME, PUBLIC_KEY_NAME)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    assert public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")  # SubjectPublicKeyInfo
    signer = Signer.from_key_file(private)
    assert not signer.ephemeral and signer.keyid == keyid_of(load_public_key(public))
    assert signer.info() == {"algorithm": "ed25519", "keyid": signer.keyid, "ephemeral": False,
                             "keyidEncoding": "sha256 of the DER SubjectPublicKeyInfo", "publicKey": "public-key.pem"}


def test_keygen_refuses_to_overwrite(tmp_path: Path) -> None:
    private, public = generate_keypair(tmp_path)
    before = private.read_bytes(), public.read_bytes()
    with pytest.raises(KeyFileError, match=f"{private}.*already exists.*refusing to overwrite"):
        generate_keypair(tmp_path)
    public.unlink()  # only the public key missing: still refuses, and the private key stays
    with pytest.raises(KeyFileError, match=f"{private}.*already exists"):
        generate_keypair(tmp_path)
    assert private.read_bytes() == before[0] and not public.exists()


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_group_or_other_readable_key_refused(tmp_path: Path, mode: int) -> None:
    private, _ = generate_keypair(tmp_path)
    private.chmod(mode)
    with pytest.raises(KeyFileError, match=rf"{private}.*mode {mode:04o}.*chmod 600 {private}"):
        load_private_key(private)


def test_key_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "none.key"
    with pytest.raises(KeyFileError, match=rf"^{missing}: no such signing key .*firedrill keygen"):
        load_private_key(missing)
    garbage = tmp_path / "garbage.key"
    garbage.write_text("hello")
    garbage.chmod(0o600)
    with pytest.raises(KeyFileError, match=rf"^{garbage}: not a PEM private key"):
        load_private_key(garbage)
    rsa = tmp_path / "rsa.key"
    rsa.write_bytes(generate_private_key(65537, 1024).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    rsa.chmod(0o600)
    with pytest.raises(KeyFileError, match=rf"^{rsa}: a .*RSA.* key; Firedrill signs with Ed25519"):
        load_private_key(rsa)
    encrypted = tmp_path / "enc.key"
    encrypted.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw")))
    encrypted.chmod(0o600)
    with pytest.raises(KeyFileError, match=rf"^{encrypted}: the signing key is encrypted"):
        load_private_key(encrypted)
    with pytest.raises(KeyFileError, match=rf"^{garbage}: not a PEM public key"):
        load_public_key(garbage)


def test_ephemeral_signer() -> None:
    a, b = Signer.generate_ephemeral(), Signer.generate_ephemeral()
    assert a.ephemeral and a.info()["ephemeral"] is True and a.keyid != b.keyid
