"""The log server as a real kube-apiserver reaches a kubelet: every query parameter of its log proxy
(``sinceSeconds``, ``sinceTime``, ``limitBytes``, ``previous``, ``stream``), and HTTPS with client
certificates checked against the node's client CA."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import urllib3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from refplatform.agent.clock import VirtualClock
from refplatform.agent.logs import LogQuery, LogServer, LogStore, ServingTLS, parse_log_time
from refplatform.agent.workload import LogLine

START = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return START + dt.timedelta(seconds=seconds)


def test_log_times_parse_with_nanoseconds_and_without() -> None:
    assert parse_log_time("2026-11-30T00:00:01.123456789Z") == at(1.123456)
    assert parse_log_time("2026-11-30T00:00:01Z") == at(1)
    assert parse_log_time("2026-11-30T01:00:01+01:00") == at(1)
    assert parse_log_time("not a time") is None


@pytest.mark.parametrize(("query", "message"), [
    ({"previous": ["true"]}, 'previous terminated container "main" in pod "p" not found'),
    ({"stream": ["Stdout"]}, "stream=Stdout: this node keeps stdout and stderr in one log"),
    ({"stream": ["Both"]}, "stream='Both' is not one of All, Stdout, Stderr"),
    ({"sinceSeconds": ["0"]}, "sinceSeconds='0' must be at least 1"),
    ({"sinceSeconds": ["5"], "sinceTime": ["2026-11-30T00:00:00Z"]}, "sinceSeconds and sinceTime may not both"),
    ({"sinceTime": ["yesterday"]}, "sinceTime='yesterday' is not an RFC 3339 time"),
    ({"limitBytes": ["x"]}, "limitBytes='x' is not an integer"),
    ({"follow": ["maybe"]}, "follow='maybe' is not a boolean"),
])
def test_a_query_the_agent_cannot_answer_names_the_parameter(query: dict[str, list[str]], message: str) -> None:
    with pytest.raises(ValueError) as err:
        LogQuery.parse(query, START, "main", "p")
    assert str(err.value).startswith(message)


def test_a_full_query_as_kube_apiserver_sends_it() -> None:
    q = LogQuery.parse({"follow": ["true"], "timestamps": ["true"], "tailLines": ["3"], "sinceSeconds": ["10"],
                        "limitBytes": ["100"], "stream": ["All"]}, at(60), "main", "p")
    assert q == LogQuery(follow=True, timestamps=True, tail=3, since=at(50), limit_bytes=100)
    assert LogQuery.parse({"sinceTime": ["2026-11-30T00:00:07Z"]}, at(60), "main", "p").since == at(7)
    assert LogQuery.parse({}, at(60), "main", "p") == LogQuery()


@pytest.fixture
def store(tmp_path: Path) -> LogStore:
    return LogStore(tmp_path / "logs")


def fill(store: LogStore, count: int) -> None:
    log = store.open("ns", "p", "main", fresh=True)
    log.append([LogLine(at(i), f"line-{i}") for i in range(1, count + 1)])
    log.close()


def get(url: str, **kw: object) -> urllib3.BaseHTTPResponse:
    return urllib3.request("GET", url, timeout=5.0, retries=False, **kw)  # type: ignore[arg-type]


def test_since_tail_and_limit_bytes_over_http(store: LogStore) -> None:
    fill(store, 10)
    clock = VirtualClock(at(10))
    srv = LogServer(store, clock=clock)
    srv.start()
    try:
        base = f"http://127.0.0.1:{srv.port}/containerLogs/ns/p/main"
        assert get(f"{base}?sinceSeconds=3").data == b"line-7\nline-8\nline-9\nline-10\n"
        assert get(f"{base}?sinceTime=2026-11-30T00:00:09Z").data == b"line-9\nline-10\n"
        # As the kubelet: the tail first, then the since bound.
        assert get(f"{base}?tailLines=5&sinceSeconds=2").data == b"line-8\nline-9\nline-10\n"
        assert get(f"{base}?limitBytes=9").data == b"line-1\nli"
        assert get(f"{base}?follow=true&limitBytes=14").data == b"line-1\nline-2\n"
        stamped = get(f"{base}?tailLines=1&timestamps=true&limitBytes=20").data
        assert stamped == b"2026-11-30T00:00:10."
        refused = get(f"{base}?previous=true")
        assert refused.status == 400 and b"previous terminated container" in refused.data
    finally:
        srv.stop()


def test_follow_stops_once_limit_bytes_are_sent(store: LogStore) -> None:
    log = store.open("ns", "p", "main", fresh=True)
    log.append([LogLine(at(1), "first")])
    srv = LogServer(store)
    srv.start()
    try:
        resp = urllib3.request("GET", f"http://127.0.0.1:{srv.port}/containerLogs/ns/p/main?follow=true&limitBytes=10",
                               preload_content=False, timeout=10, retries=False)
        got: list[bytes] = []
        done = threading.Event()

        def read() -> None:
            while chunk := resp.read1(64):
                got.append(chunk)
            done.set()

        threading.Thread(target=read, daemon=True).start()
        time.sleep(0.2)
        assert not done.is_set(), "ended before the limit was reached"
        log.append([LogLine(at(2), "second line")])
        assert done.wait(5), "follow went on past limitBytes"
        assert b"".join(got) == b"first\nseco"
        assert not log.closed
    finally:
        srv.stop()


# --- TLS -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: tuple[Path, Path]
    client: tuple[Path, Path]
    stranger: tuple[Path, Path]
    """A client cert from another CA."""


def _ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(directory: Path, stem: str, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
          server: bool) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, stem)]))
               .issuer_name(ca[0].subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(hours=1))
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                     else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(ca[1], hashes.SHA256())
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca, other = _ca("cluster-ca"), _ca("another-ca")
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca[0].public_bytes(serialization.Encoding.PEM))
    return Pki(ca_path, _leaf(directory, "node", ca, True), _leaf(directory, "apiserver", ca, False),
               _leaf(directory, "stranger", other, False))


@pytest.fixture
def tls_server(store: LogStore, pki: Pki) -> Iterator[tuple[LogServer, str]]:
    fill(store, 3)
    srv = LogServer(store, tls=ServingTLS(pki.server[0], pki.server[1], pki.ca))
    srv.start()
    try:
        yield srv, f"https://127.0.0.1:{srv.port}"
    finally:
        srv.stop()


def https(url: str, pki: Pki, client: tuple[Path, Path] | None) -> urllib3.BaseHTTPResponse:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if client is not None:
        ctx.load_cert_chain(str(client[0]), str(client[1]))
    with urllib3.PoolManager(ssl_context=ctx, retries=False, timeout=5.0) as pool:
        return pool.request("GET", url)


def test_https_logs_need_a_client_cert_of_the_client_ca_and_healthz_does_not(
        tls_server: tuple[LogServer, str], pki: Pki) -> None:
    srv, base = tls_server
    assert srv.scheme == "https"
    ok = https(f"{base}/containerLogs/ns/p/main?tailLines=1", pki, pki.client)
    assert (ok.status, ok.data) == (200, b"line-3\n")
    anonymous = https(f"{base}/containerLogs/ns/p/main", pki, None)
    assert anonymous.status == 401 and b"client certificate" in anonymous.data
    assert https(f"{base}/healthz", pki, None).data == b"ok"
    with pytest.raises(urllib3.exceptions.HTTPError):  # the handshake refuses a cert another CA signed
        https(f"{base}/containerLogs/ns/p/main", pki, pki.stranger)
    with pytest.raises(urllib3.exceptions.HTTPError):  # plain HTTP gets no answer from an HTTPS port
        get(f"http://127.0.0.1:{srv.port}/healthz")
    # The server still answers after the failed handshakes.
    assert https(f"{base}/healthz", pki, None).status == 200


def test_a_slow_tls_client_does_not_hold_up_the_others(tls_server: tuple[LogServer, str], pki: Pki) -> None:
    import socket

    srv, base = tls_server
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5):  # connects, never says hello
        started = time.monotonic()
        assert https(f"{base}/healthz", pki, None).data == b"ok"
        assert time.monotonic() - started < 2.0


def test_follow_over_tls_ends_when_the_container_stops(store: LogStore, pki: Pki) -> None:
    log = store.open("ns", "p", "main", fresh=True)
    log.append([LogLine(at(1), "one")])
    srv = LogServer(store, tls=ServingTLS(pki.server[0], pki.server[1], pki.ca))
    srv.start()
    try:
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        ctx.load_cert_chain(str(pki.client[0]), str(pki.client[1]))
        with urllib3.PoolManager(ssl_context=ctx, retries=False, timeout=10.0) as pool:
            resp = pool.request("GET", f"https://127.0.0.1:{srv.port}/containerLogs/ns/p/main?follow=true",
                                preload_content=False)
            got: list[bytes] = []
            done = threading.Event()

            def read() -> None:
                while chunk := resp.read1(64):
                    got.append(chunk)
                done.set()

            threading.Thread(target=read, daemon=True).start()
            time.sleep(0.3)
            log.append([LogLine(at(2), "two")])
            time.sleep(0.3)
            assert not done.is_set(), "the follower ended while the container runs (a TLS read misread as EOF?)"
            log.close()
            assert done.wait(5)
            assert b"".join(got) == b"one\ntwo\n"
    finally:
        srv.stop()


def test_the_self_fence_asks_a_peer_serving_https_over_https(tmp_path: Path, store: LogStore, pki: Pki) -> None:
    import json

    from refplatform.agent.fence import SelfFence, peer_health_urls

    srv = LogServer(store, tls=ServingTLS(pki.server[0], pki.server[1], pki.ca))
    srv.start()
    try:
        agents = tmp_path / "agents"
        agents.mkdir()
        (agents / "peer.json").write_text(json.dumps({"node": "peer", "logPort": srv.port, "logScheme": "https"}))
        (agents / "old.json").write_text(json.dumps({"node": "old", "logPort": 1}))  # written before logScheme
        (agents / "me.json").write_text(json.dumps({"node": "me", "logPort": 2, "logScheme": "https"}))
        urls = peer_health_urls(tmp_path, "me")
        assert urls == ["http://127.0.0.1:1/healthz/api", f"https://127.0.0.1:{srv.port}/healthz/api"]
        fence = SelfFence("me", 1.0, 0.5, lambda: 5.0, lambda: urls[1:], lambda why: None)
        assert fence._ask_peers() == (1, 1)  # (asked, reaching the API)
    finally:
        srv.stop()


@pytest.mark.parametrize(("flags", "message"), [
    (["--client-ca-file", "CA"], "--client-ca-file needs --tls-cert-file"),
    (["--tls-cert-file", "CERT"], "--tls-cert-file and --tls-private-key-file go together"),
    (["--tls-cert-file", "CERT", "--tls-private-key-file", "missing.key"], "--tls-private-key-file"),
])
def test_the_cli_refuses_incomplete_tls_flags_naming_them(flags: list[str], message: str, pki: Pki, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    from refplatform.agent.__main__ import main

    paths = {"CA": str(pki.ca), "CERT": str(pki.server[0]), "missing.key": str(tmp_path / "missing.key")}
    argv = ["--api", "https://127.0.0.1:1", "--node", "n", "--data-dir", str(tmp_path)]
    with caplog.at_level("ERROR", logger="refplatform.agent"):
        assert main(argv + [paths.get(f, f) for f in flags]) == 1
    assert any(message in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
