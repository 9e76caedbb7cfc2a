"""The control-plane drill's pure parts: per-verb p99, startup p99 with pods that never started, the writes it
checks, and the kubeconfig it hands the load users."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client

from drills.kinds.controlplane.drill import (acknowledged_creates, kubeconfig_for, mutating_series, refusals,
                                             refused_finding, startup_p99, worst_p99)
from drills.kube.driver import KubeDriver
from drills.load.run import Outcome, Sample


def sample(kind: str, latency: float, outcome: Outcome = Outcome.ANSWERED, obj: str | None = None) -> Sample:
    return Sample(f"r{latency}", kind, 0.0, 1.0, 1.0 + latency, latency, outcome, 201, None, None, obj)


def test_the_mutating_p99_is_the_worst_verb_and_names_each() -> None:
    samples = (*(sample("k8s-create", 0.01 * i) for i in range(1, 101)),
               *(sample("k8s-update", 0.5) for _ in range(10)), sample("k8s-update", 9.0, Outcome.FAILED),
               sample("k8s-list", 30.0))
    worst, note = worst_p99(samples)
    assert worst == 0.99  # the create p99, the worse verb; the failed update and the list are not in it
    assert note == "create p99 0.990 s over 100; update p99 0.500 s over 10"
    assert worst_p99(()) == (None, "no mutating call was answered")


def test_startup_p99_is_never_when_it_lands_on_a_pod_that_never_started() -> None:
    assert startup_p99([0.5] * 99 + [None]) == (0.5, "100 pods, 1 never started")
    assert startup_p99([0.5] * 98 + [None, None]) == (None, "100 pods, 2 never started")
    assert startup_p99([]) == (None, "no startup pod was judged")


def test_only_answered_creates_with_a_name_are_acknowledged_writes() -> None:
    samples = (sample("k8s-create", 0.1, obj="a"), sample("k8s-create", 0.1, Outcome.FAILED, obj="b"),
               sample("k8s-update", 0.1, obj="c"), sample("k8s-create", 0.1))
    assert set(acknowledged_creates(samples)) == {"a"}


def test_the_series_buckets_mutating_calls_by_start_relative_to_the_pull() -> None:
    def at(kind: str, start: float, latency: float, outcome: Outcome = Outcome.ANSWERED) -> Sample:
        return Sample(f"r{start}", kind, 0.0, 100.0 + start, 100.0 + start + latency, latency, outcome, 201)
    samples = (at("k8s-create", -0.4, 0.02), at("k8s-update", -0.1, 0.04),  # bucket -1: the second before the pull
               *(at("k8s-create", 0.01 * i, 0.01 * i) for i in range(1, 51)),  # bucket 0: 50 answered
               at("k8s-update", 0.9, 5.0, Outcome.LOST), at("k8s-create", 0.95, 0.3, Outcome.FAILED),
               at("k8s-list", 0.5, 9.0), at("k8s-watch", 1.5, 9.0),  # reads are not in it
               at("k8s-create", 2.2, 1.0, Outcome.LOST))  # bucket 2: nothing answered, no p99
    out = mutating_series(samples, origin=100.0)
    assert [b["t"] for b in out] == [-1.0, 0.0, 2.0]
    assert out[0] == {"t": -1.0, "sent": 2, "answered": 2, "failed": 0, "lost": 0, "p99_latency_s": 0.04}
    assert (out[1]["sent"], out[1]["answered"], out[1]["failed"], out[1]["lost"]) == (52, 50, 1, 1)
    assert out[1]["p99_latency_s"] == 0.5  # nearest rank over the 50 answered; the lost call's 5 s is not in it
    assert out[2] == {"t": 2.0, "sent": 1, "answered": 0, "failed": 0, "lost": 1, "p99_latency_s": None}
    assert mutating_series((), origin=0.0) == []


def test_the_load_users_kubeconfig_carries_the_drivers_server_ca_and_token(tmp_path: Path) -> None:
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert, cfg.api_key = "https://127.0.0.1:6443", str(tmp_path / "ca.crt"), {
        "authorization": "Bearer s3cret"}
    path = kubeconfig_for(KubeDriver(client.ApiClient(cfg)), tmp_path / "kc")
    doc = yaml.safe_load(path.read_text())
    assert doc["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:6443",
                                             "certificate-authority": str(tmp_path / "ca.crt")}
    assert doc["users"][0]["user"] == {"token": "s3cret"} and oct(path.stat().st_mode & 0o777) == "0o600"


def refused(kind: str, start: float, status: int) -> Sample:
    return Sample(f"x{start}", kind, 0.0, start, start + 0.01, 0.01, Outcome.FAILED, status, None,
                  f"HTTP {status}: Forbidden", f"load-{start:g}")


def test_a_refused_call_is_missing_evidence_named_with_its_count_and_the_first() -> None:
    """A 401/403/429 is not a fast answer: the latency promise cannot rest on it (issue 32). A 5xx or a lost call
    is the server's own failure and stays a plain finding."""
    samples = (sample("k8s-create", 0.1, obj="a"), refused("k8s-update", 7.0, 403), refused("k8s-update", 5.0, 403),
               refused("k8s-create", 6.0, 429), refused("k8s-update", 8.0, 500), refused("k8s-list", 1.0, 403))
    found = refusals(samples)
    assert [(s.kind, s.start_mono) for s in found] == [("k8s-update", 5.0), ("k8s-create", 6.0), ("k8s-update", 7.0)]
    text = refused_finding(found, act_mono=4.0)
    assert text.startswith("3 mutating call(s) were refused (HTTP 403, 429): a refused call is missing evidence")
    assert "the first: k8s-update load-5 (+1.00 s from the pull): HTTP 403: Forbidden" in text
    assert refusals((sample("k8s-create", 0.1), refused("k8s-update", 1.0, 500))) == []
