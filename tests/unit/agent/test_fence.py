"""Self-fencing: a cut-off node kills its pods only when a peer proves the fault is its own."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from refplatform.agent.fence import FenceDecision, SelfFence, decide, peer_health_urls
from refplatform.profiles import K8S_DEFAULTS, TUNED


@pytest.mark.parametrize("age, peers_ok, decision", [
    (None, None, FenceDecision.WAIT),        # never renewed yet: nothing to fence
    (0.5, 3, FenceDecision.CONNECTED),
    (1.99, 3, FenceDecision.CONNECTED),
    (2.0, None, FenceDecision.WAIT),         # cut off, but no peer could be asked
    (2.0, 0, FenceDecision.API_DOWN),        # nobody reaches the API: an outage, not this node's fault
    (2.0, 1, FenceDecision.FENCE),
    (30.0, 4, FenceDecision.FENCE),
])
def test_the_rule(age: float | None, peers_ok: int | None, decision: FenceDecision) -> None:
    assert decide(age, 2.0, peers_ok) is decision


@pytest.mark.parametrize("asked, peers_ok, decision", [
    (4, 4, FenceDecision.FENCE),       # alone cut off of 5: the control plane will replace this node
    (4, 2, FenceDecision.DISRUPTION),  # 3 of 5 cut off = 60 %: a partial disruption of a small cluster, no eviction
    (5, 2, FenceDecision.DISRUPTION),  # 4 of 6 cut off
    (3, 1, FenceDecision.DISRUPTION),  # 3 of 4 cut off
    (5, 3, FenceDecision.FENCE),       # 3 of 6 = 50 % < 55 %: still an ordinary loss
    (80, 30, FenceDecision.FENCE),     # a large cluster keeps evicting, slowly, in a disruption
    (2, 1, FenceDecision.FENCE),       # 2 of 3 cut off: not more than 2 nodes, an ordinary loss
])
def test_a_node_cut_off_with_most_of_the_cluster_does_not_fence(asked: int, peers_ok: int,
                                                                 decision: FenceDecision) -> None:
    assert decide(3.0, 2.0, peers_ok, asked) is decision


def test_tuned_fences_one_heartbeat_before_the_grace_period_and_stock_kubernetes_never() -> None:
    assert TUNED.fence_after() == pytest.approx(TUNED.node_monitor_grace_period - TUNED.heartbeat)
    assert TUNED.fence_after() < TUNED.node_monitor_grace_period
    assert K8S_DEFAULTS.fence_after() is None


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[tuple[ThreadingHTTPServer, type[_Health]]]:
    handler = type("Peer", (_Health,), {"status": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "peer.json").write_text(json.dumps({"node": "peer", "logPort": server.server_port}))
    (tmp_path / "agents" / "me.json").write_text(json.dumps({"node": "me", "logPort": 1}))
    (tmp_path / "agents" / "broken.json").write_text("{not json")
    yield server, handler
    server.shutdown()
    server.server_close()


def test_peers_are_the_other_agents_of_the_data_directory(tmp_path: Path, peer: tuple[ThreadingHTTPServer, type]) -> None:
    server, _ = peer
    assert peer_health_urls(tmp_path, "me") == [f"http://127.0.0.1:{server.server_port}/healthz/api"]


def fence_with(tmp_path: Path, age: list[float | None], fenced: list[str]) -> SelfFence:
    return SelfFence("me", safe_time=2.0, interval=0.1, lease_age=lambda: age[0],
                     peers=lambda: peer_health_urls(tmp_path, "me"), fence=fenced.append)


def test_a_cut_off_node_with_a_healthy_peer_fences_once_per_outage(tmp_path: Path,
                                                                   peer: tuple[ThreadingHTTPServer, type]) -> None:
    age: list[float | None] = [0.5]
    fenced: list[str] = []
    fence = fence_with(tmp_path, age, fenced)
    assert fence.check() is FenceDecision.CONNECTED and fenced == []
    age[0] = 2.5
    assert fence.check() is FenceDecision.FENCE
    assert fence.check() is FenceDecision.FENCE
    assert len(fenced) == 1 and "no Lease renewal for 2.5s" in fenced[0] and "1 peer(s) reach the API" in fenced[0]
    age[0] = 0.1  # reconnected; a second outage fences again
    fence.check()
    age[0] = 3.0
    fence.check()
    assert len(fenced) == 2


def test_when_no_peer_reaches_the_api_nothing_is_fenced(tmp_path: Path, peer: tuple[ThreadingHTTPServer, type]) -> None:
    _, handler = peer
    handler.status = 503
    age: list[float | None] = [10.0]
    fenced: list[str] = []
    assert fence_with(tmp_path, age, fenced).check() is FenceDecision.API_DOWN
    assert fenced == []


def test_an_unreachable_peer_counts_as_not_reaching_the_api(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "gone.json").write_text(json.dumps({"node": "gone", "logPort": 9}))  # discard port
    age: list[float | None] = [10.0]
    fenced: list[str] = []
    assert fence_with(tmp_path, age, fenced).check() is FenceDecision.API_DOWN


def test_a_node_the_api_answers_again_is_not_fenced_at_the_end_of_a_blip(
        tmp_path: Path, peer: tuple[ThreadingHTTPServer, type]) -> None:
    """A control-plane blip ends: the peers reach the API again a moment before this node renews its Lease. The
    node asks the API itself before it fences, and does not fence; cut off for real, it still does."""
    age: list[float | None] = [21.0]
    fenced: list[str] = []
    answers = [(True, "")]
    fence = SelfFence("me", safe_time=2.0, interval=0.1, lease_age=lambda: age[0],
                      peers=lambda: peer_health_urls(tmp_path, "me"), fence=fenced.append,
                      reach_api=lambda: answers[0])
    assert fence.check() is FenceDecision.CONNECTED and fenced == []
    answers[0] = (False, "simulated network partition")
    assert fence.check() is FenceDecision.FENCE and len(fenced) == 1
