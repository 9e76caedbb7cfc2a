"""Readiness probes: the spec read from a container, the pure readiness decision on an injected clock,
the pod status it gives, and one real HTTP GET against a loopback server."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from refplatform.agent.errors import ContainerSpecError
from refplatform.agent.podstatus import ContainerRun, pod_status
from refplatform.agent.probes import HttpGetProbe, ReadinessTracker, probe_http, readiness_probe

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


def container(probe: object, ports: list[dict[str, object]] | None = None) -> dict[str, object]:
    return {"name": "serve", "ports": ports or [{"name": "http", "containerPort": 8000}], "readinessProbe": probe}


def test_defaults_are_upstream_ones_and_a_named_port_resolves() -> None:
    p = readiness_probe(container({"httpGet": {"path": "/health", "port": "http"}}), "spec.containers[0]")
    assert p == HttpGetProbe("serve", "/health", 8000, None, (), 0.0, 10.0, 1.0, 1, 3)
    p = readiness_probe(container({"httpGet": {"port": 9000}, "periodSeconds": 1, "initialDelaySeconds": 2,
                                   "failureThreshold": 1, "successThreshold": 2}), "x")
    assert p is not None and (p.path, p.port, p.period, p.initial_delay, p.failure_threshold,
                              p.success_threshold) == ("/", 9000, 1.0, 2.0, 1, 2)


def test_no_probe_is_none() -> None:
    assert readiness_probe({"name": "c"}, "spec.containers[0]") is None


@pytest.mark.parametrize(("probe", "field"), [
    ({"tcpSocket": {"port": 80}}, "spec.containers[0].readinessProbe.tcpSocket"),
    ({"httpGet": {"port": "grpc"}}, "spec.containers[0].readinessProbe.httpGet.port"),
    ({"httpGet": {"port": 80, "scheme": "HTTPS"}}, "spec.containers[0].readinessProbe.httpGet.scheme"),
    ({"httpGet": {"port": 70000}}, "spec.containers[0].readinessProbe.httpGet.port"),
    ({"httpGet": {"port": 80}, "periodSeconds": 0}, "spec.containers[0].readinessProbe.periodSeconds"),
])
def test_an_unservable_probe_names_its_field(probe: object, field: str) -> None:
    with pytest.raises(ContainerSpecError) as err:
        readiness_probe(container(probe), "spec.containers[0]")
    assert str(err.value).startswith(field + ":")


def probe(**kw: float) -> HttpGetProbe:
    base = dict(initial_delay=2.0, period=1.0, timeout=1.0, success_threshold=1, failure_threshold=3)
    base.update(kw)
    return HttpGetProbe("serve", "/health", 8000, **base)  # type: ignore[arg-type]


def test_not_ready_until_the_first_success_after_the_initial_delay() -> None:
    t = ReadinessTracker(probe(), started=100.0)
    assert not t.ready and not t.due(101.9) and t.due(102.0)
    t.begin(102.0)
    assert not t.due(102.5), "one probe at a time"
    assert t.record(False) is False and not t.ready
    assert not t.due(102.9) and t.due(103.0)
    t.begin(103.0)
    assert t.record(True) is True and t.ready


def test_thresholds_count_in_a_row() -> None:
    t = ReadinessTracker(probe(initial_delay=0.0, success_threshold=2, failure_threshold=2), started=0.0)
    for now, ok, ready in ((0, True, False), (1, False, False), (2, True, False), (3, True, True),
                           (4, False, True), (5, True, True), (6, False, True), (7, False, False)):
        assert t.due(now)
        t.begin(now)
        t.record(ok)
        assert t.ready is ready, (now, ok)


def pod() -> dict[str, object]:
    return {"metadata": {"uid": "u1", "name": "p"},
            "spec": {"containers": [{"name": "serve"}, {"name": "sidecar"}]}, "status": {}}


def conditions(status: dict[str, object]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status["conditions"]}  # type: ignore[index,union-attr]


def test_a_probed_container_holds_the_pod_not_ready_until_it_passes() -> None:
    run = ContainerRun(NOW)
    waiting = pod_status(pod(), run, NOW, probed={"serve": False})
    assert conditions(waiting)["Ready"] == "False" and conditions(waiting)["ContainersReady"] == "False"
    assert {c["name"]: c["ready"] for c in waiting["containerStatuses"]} == {"serve": False, "sidecar": True}
    assert waiting["phase"] == "Running"
    passed = pod_status({**pod(), "status": waiting}, run, NOW, probed={"serve": True})
    assert conditions(passed)["Ready"] == "True"
    assert conditions(pod_status(pod(), run, NOW))["Ready"] == "True", "no probe: ready while it runs"


class _Health(http.server.BaseHTTPRequestHandler):
    code = 503

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.send_response(_Health.code if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture()
def server() -> Iterator[http.server.HTTPServer]:
    srv = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def test_a_real_get_passes_on_2xx_and_fails_on_503_or_no_listener(server: http.server.HTTPServer) -> None:
    port = server.server_address[1]
    p = HttpGetProbe("serve", "/health", port)
    _Health.code = 503
    assert probe_http("127.0.0.1", p) is False
    _Health.code = 200
    assert probe_http("127.0.0.1", p) is True
    assert probe_http("127.0.0.1", HttpGetProbe("serve", "/other", port)) is False
    server.shutdown()
    server.server_close()
    assert probe_http("127.0.0.1", p) is False
