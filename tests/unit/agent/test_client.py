"""The small REST client, against a stdlib HTTP server on loopback."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from refplatform.client import (
    JSON_PATCH,
    MERGE_PATCH,
    ApiStatusError,
    ApiUnreachable,
    RestClient,
    resource_path,
)
from refplatform.errors import RefPlatformError


class Recorder:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.hangups = threading.Semaphore(0)


class Handler(BaseHTTPRequestHandler):
    server: Any
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n)) if n else None

    def _send(self, code: int, payload: Any, ctype: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        rec: Recorder = self.server.rec
        rec.requests.append(
            {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": self._body()}
        )
        if self.path.startswith("/api/v1/namespaces/default/pods/missing"):
            self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                             "message": 'pods "missing" not found', "code": 404})
        elif self.path.startswith("/boom"):
            self._send(500, b"internal trouble", "text/plain")
        elif self.path.startswith("/api/v1/pods?") and "watch=true" in self.path:
            self._watch()
        elif self.path.startswith("/gone"):
            self._send(410, {"kind": "Status", "reason": "Expired", "message": "too old resource version", "code": 410})
        else:
            self._send(200, {"kind": "Pod", "echo": rec.requests[-1]["body"]})

    def _watch(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(obj: dict[str, Any]) -> None:
            data = (json.dumps(obj) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        chunk({"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}})
        chunk({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
        if "hang" in self.path:
            self.server.rec.release.wait(10)
            return
        chunk({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "gone"}})
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def finish(self) -> None:
        super().finish()
        self.server.rec.hangups.release()  # the client closed its connection: this handler's thread ends


@pytest.fixture
def server() -> Iterator[tuple[str, Recorder]]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.rec = Recorder()  # type: ignore[attr-defined]
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", srv.rec  # type: ignore[attr-defined]
    finally:
        srv.rec.release.set()  # type: ignore[attr-defined]
        srv.shutdown()
        srv.server_close()


def test_resource_paths() -> None:
    assert resource_path("", "v1", "nodes") == "/api/v1/nodes"
    assert resource_path("", "v1", "nodes", None, "n1", "status") == "/api/v1/nodes/n1/status"
    assert resource_path("", "v1", "pods", "default", "p", "binding") == "/api/v1/namespaces/default/pods/p/binding"
    assert (
        resource_path("scheduling.volcano.sh", "v1beta1", "podgroups", "ns")
        == "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups"
    )
    with pytest.raises(ValueError):
        resource_path("", "v1", "pods", "default", None, "status")


def test_verbs_send_json_token_and_content_types(server: tuple[str, Recorder]) -> None:
    url, rec = server
    with RestClient(url, "s3cret") as c:
        assert c.get("/api/v1/nodes/n1")["kind"] == "Pod"
        assert c.create("/api/v1/nodes", {"a": 1})["echo"] == {"a": 1}
        c.update("/api/v1/nodes/n1", {"metadata": {"resourceVersion": "3"}})
        c.patch("/api/v1/nodes/n1/status", {"status": {}})
        c.patch("/api/v1/nodes/n1", [{"op": "add", "path": "/x", "value": 1}], JSON_PATCH)
        c.delete("/api/v1/nodes/n1", {"gracePeriodSeconds": 0}, {"gracePeriodSeconds": 0, "dryRun": None})
        assert c.get_raw("/api/v1/nodes/n1").startswith(b"{")
        with pytest.raises(ValueError):
            c.patch("/x", {}, "application/yaml")
    methods = [(r["method"], r["path"], r["headers"].get("Content-Type")) for r in rec.requests]
    assert methods == [
        ("GET", "/api/v1/nodes/n1", None),
        ("POST", "/api/v1/nodes", "application/json"),
        ("PUT", "/api/v1/nodes/n1", "application/json"),
        ("PATCH", "/api/v1/nodes/n1/status", MERGE_PATCH),
        ("PATCH", "/api/v1/nodes/n1", JSON_PATCH),
        ("DELETE", "/api/v1/nodes/n1?gracePeriodSeconds=0", "application/json"),
        ("GET", "/api/v1/nodes/n1", None),
    ]
    assert all(r["headers"]["Authorization"] == "Bearer s3cret" for r in rec.requests)


def test_a_closed_client_connects_again_and_copies_share_its_connections(server: tuple[str, Recorder]) -> None:
    url, rec = server
    c = RestClient(url, "a")
    other = c.with_token("b")
    assert c.get("/api/v1/nodes/n1")["kind"] == "Pod"
    assert other.get("/api/v1/nodes/n2")["kind"] == "Pod"
    c.close()  # closes the connections both use; each connects again on its next request
    assert other.get("/api/v1/nodes/n3")["kind"] == "Pod"
    assert c.get("/api/v1/nodes/n4")["kind"] == "Pod"
    assert [(r["path"], r["headers"]["Authorization"]) for r in rec.requests] == [
        ("/api/v1/nodes/n1", "Bearer a"), ("/api/v1/nodes/n2", "Bearer b"),
        ("/api/v1/nodes/n3", "Bearer b"), ("/api/v1/nodes/n4", "Bearer a")]


def test_close_hangs_up_now(server: tuple[str, Recorder]) -> None:
    url, rec = server
    c = RestClient(url)
    assert c.get("/api/v1/nodes/n1")["kind"] == "Pod"
    assert not rec.hangups.acquire(timeout=0.2)  # kept alive for the next request
    c.close()  # the client is still referenced: nothing waits for the collector to close its socket
    assert rec.hangups.acquire(timeout=5)


def test_status_errors_carry_code_reason_message(server: tuple[str, Recorder]) -> None:
    url, _ = server
    with RestClient(url) as c:  # closed at the end: a kept-alive connection would hold a server thread open
        with pytest.raises(ApiStatusError) as info:
            c.get("/api/v1/namespaces/default/pods/missing")
        err = info.value
        assert isinstance(err, RefPlatformError)
        assert (err.code, err.reason, err.message) == (404, "NotFound", 'pods "missing" not found')
        assert err.not_found and not err.conflict and err.status is not None
        with pytest.raises(ApiStatusError) as info:
            c.get("/boom")
        assert (info.value.code, info.value.reason, info.value.message) == (500, "InternalServerError",
                                                                            "internal trouble")
        with pytest.raises(ApiStatusError) as info:
            c.watch("/gone")
        assert info.value.gone


def test_unreachable_names_the_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = RestClient(f"http://127.0.0.1:{port}", timeout=2)
    with pytest.raises(ApiUnreachable, match=f"127.0.0.1:{port}/api/v1/nodes") as info:
        c.list("/api/v1/nodes")
    assert isinstance(info.value, RefPlatformError)
    with pytest.raises(ApiUnreachable):
        c.watch("/api/v1/pods")


def test_watch_yields_events_tracks_versions_and_ends_with_the_stream(server: tuple[str, Recorder]) -> None:
    url, rec = server
    c = RestClient(url)
    stream = c.watch("/api/v1/pods", {"fieldSelector": "spec.nodeName=n1"}, resource_version="4", timeout_seconds=7)
    events = list(stream)
    assert [t for t, _ in events] == ["ADDED", "BOOKMARK", "ERROR"]
    assert events[2].object["code"] == 410
    assert stream.resource_version == "9"
    q = rec.requests[0]["path"]
    for part in ("watch=true", "resourceVersion=4", "timeoutSeconds=7", "allowWatchBookmarks=true", "fieldSelector=spec.nodeName%3Dn1"):
        assert part in q


def test_watch_read_timeout_ends_the_iteration(server: tuple[str, Recorder]) -> None:
    url, _ = server
    stream = RestClient(url).watch("/api/v1/pods", {"hang": "1"}, read_timeout=0.3)
    t0 = time.monotonic()
    assert [t for t, _ in stream] == ["ADDED", "BOOKMARK"]
    assert time.monotonic() - t0 < 5


def test_watch_stop_from_another_thread_unblocks(server: tuple[str, Recorder]) -> None:
    url, _ = server
    stream = RestClient(url).watch("/api/v1/pods", {"hang": "1"}, read_timeout=30)
    seen: list[str] = []
    done = threading.Event()

    def consume() -> None:
        for etype, _ in stream:
            seen.append(etype)
        done.set()

    threading.Thread(target=consume, daemon=True).start()
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        done.wait(0.02)
    stream.stop()
    assert done.wait(5), "stop() did not end the iteration"
    assert seen == ["ADDED", "BOOKMARK"] and stream.stopped


def _pki(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(1).not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "apiserver")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
        .not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = tmp_path / "ca.crt", tmp_path / "server.crt", tmp_path / "server.key"
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_path, cert_path, key_path


def test_https_is_verified_against_the_given_ca(tmp_path: Path) -> None:
    import ssl

    ca, cert, key = _pki(tmp_path)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.rec = Recorder()  # type: ignore[attr-defined]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    url = f"https://127.0.0.1:{srv.server_address[1]}"
    try:
        with RestClient(url, "tok", ca_file=ca) as c:
            assert c.get("/api/v1/nodes/n1")["kind"] == "Pod"
        with RestClient(url, "tok", timeout=3) as c, pytest.raises(ApiUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
            c.get("/api/v1/nodes/n1")  # the system trust store does not know our CA
    finally:
        srv.shutdown()
        srv.server_close()
