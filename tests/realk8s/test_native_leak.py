"""The leak feature on the upstream control plane, computed from a real Prometheus (issue 29).

Four refplatform agents are the kubelets of a real kube-apiserver, kube-controller-manager and kube-scheduler;
the shipped ``features/leak_identification.feature`` runs unedited with the ``native`` flavor (the canary as a
``batch/v1`` Indexed Job).  kube-apiserver serves no leak report, so the profile's ``prometheus.url`` names a
Prometheus (Debian's, as the embedded test runs it) that scrapes every second

- each agent's DCGM-named ``/metrics`` (HTTPS, the cluster CA: the agents serve with certificates it signed);
- the kube-state-metrics series, from the stand-in this suite runs because kube-state-metrics is not built
  here: ``python -m refplatform.controllers --controllers kube-state-metrics`` against the real API server.

Data pipeline and fragmentation are named and sized from the metrics alone; communication and fault tolerance
cannot be computed from these metrics, and the drill says so before injecting anything (INCONCLUSIVE, naming
the source and why), never PASS or FAIL on numbers it does not have.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from refplatform.cluster import ManagedProcess, wait_until
from tests.realk8s.firedrill import firedrill_run as run
from tests.realk8s.test_native_nodepull import PullCluster, profile_yaml, start_pull_cluster

pytestmark = pytest.mark.realk8s

REPO = Path(__file__).resolve().parents[2]
FEATURE = REPO / "features" / "leak_identification.feature"
PROMETHEUS = shutil.which("prometheus")
RUN_TIMEOUT_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Observed:
    """The cluster and the Prometheus (fed by the kube-state-metrics stand-in) this test made."""

    made: PullCluster
    prometheus_url: str


@pytest.fixture(scope="module")
def observed(realk8s_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    if PROMETHEUS is None:
        pytest.skip("no prometheus on PATH: install Debian's 'prometheus' package (.ci/run does)")
    work = tmp_path_factory.mktemp("leak")
    made = start_pull_cluster(realk8s_bin_dir, work / "cluster", ())
    procs: list[ManagedProcess] = []
    try:
        token = work / "admin.token"
        token.write_text(made.cluster.admin_token)
        token.chmod(0o600)
        ksm_port = free_port()
        procs.append(ManagedProcess.spawn("kube-state-metrics", [
            sys.executable, "-m", "refplatform.controllers", "--api", made.cluster.url, "--token-file", str(token),
            "--ca-file", str(made.cluster.ca_file), "--controllers", "kube-state-metrics",
            "--metrics-address", f"127.0.0.1:{ksm_port}"], work / "ksm.log"))
        agents = sorted(json.loads(p.read_text())["logPort"] for p in (made.agents.data_dir / "agents").glob("*.json"))
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                  "scrape_configs": [
                      {"job_name": "dcgm", "scheme": "https", "tls_config": {"ca_file": str(made.cluster.ca_file)},
                       "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in agents]}]},
                      {"job_name": "kube-state-metrics", "static_configs": [{"targets": [f"127.0.0.1:{ksm_port}"]}]}]}
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        url = f"http://127.0.0.1:{free_port()}"
        procs.append(ManagedProcess.spawn("prometheus", [
            str(PROMETHEUS), f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address={url.removeprefix('http://')}"], work / "prometheus.log"))

        def scraping() -> bool:
            try:
                targets = httpx.get(f"{url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
                have = httpx.get(f"{url}/api/v1/query", timeout=5, params={
                    "query": "count(DCGM_FI_DEV_FB_USED) and on() count(kube_node_status_allocatable)"}).json()
            except (httpx.HTTPError, ValueError, KeyError):
                return False
            return len(targets) == len(agents) + 1 and all(t["health"] == "up" for t in targets) \
                and bool(have["data"]["result"])
        wait_until(scraping, 60, "prometheus scraping every agent and the kube-state-metrics stand-in", interval=0.5)
        yield Observed(made, url)
    finally:
        for proc in procs:
            proc.stop()
        made.agents.close()
        made.cluster.stop()


def test_the_leak_feature_is_judged_from_prometheus_on_the_upstream_control_plane(observed: Observed,
                                                                                  tmp_path: Path) -> None:
    features = tmp_path / "features"
    features.mkdir()
    (features / FEATURE.name).write_text(FEATURE.read_text())  # unedited
    profile = tmp_path / "profile.yaml"
    profile.write_text(profile_yaml(observed.made.agents) + f"prometheus:\n  url: {observed.prometheus_url}\n")
    proc, scenarios = run(observed.made.cluster.admin_kubeconfig, profile, features, tmp_path / "reports",
                          timeout=RUN_TIMEOUT_S)
    out = proc.stdout + proc.stderr
    by_hole = {s["details"]["leak"]["hole"]: s for s in scenarios}
    where = f"the configured Prometheus {observed.prometheus_url}"
    print("leak on the upstream control plane, from Prometheus: " + ", ".join(
        f"{hole} {s['verdict']}" for hole, s in by_hole.items()))
    for hole in ("dataPipeline", "fragmentation"):
        s = by_hole[hole]
        leak = s["details"]["leak"]
        assert s["verdict"] == "PASS", (hole, s["findings"], leak.get("report"), out)
        assert leak["reported"]["largest"] == hole and leak["report"]["computedFrom"]["source"] == "prometheus"
    for hole, words in (("communication", "communication"), ("faultTolerance", "fault tolerance")):
        s = by_hole[hole]
        assert s["verdict"] == "INCONCLUSIVE", (hole, s, out)
        assert f"{where} cannot measure {words}" in s["details"]["leak"]["unmeasured"], s
        assert "asked before injecting anything" in s["details"]["leak"]["unmeasured"], s
    assert proc.returncode == 3, out  # INCONCLUSIVE is the run's worst verdict
