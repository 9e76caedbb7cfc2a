"""The load generator's control-plane user against the real kube-apiserver + etcd (docs/LOAD.md): ConfigMaps,
which the reference platform does not serve, created, replaced, listed and watched through the official client
by locust in its own process; every write the API acknowledged is found afterwards.

Run: ``python -m pytest tests/realk8s -m realk8s -k load``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from drills.load.run import LoadSpec, LoadUser, Outcome, run_load
from tests.realk8s.cluster import RealCluster
from tests.realk8s.standin import api_client

pytestmark = pytest.mark.realk8s


def test_control_plane_load_on_configmaps_keeps_every_acknowledged_write(real_cluster: RealCluster,
                                                                        tmp_path: Path) -> None:
    result = run_load(LoadSpec(host=real_cluster.url, out_dir=tmp_path / "load", users=3, spawn_rate=3,
                               duration_s=4, user_classes=(LoadUser.CONTROL_PLANE,),
                               kubeconfig=real_cluster.admin_kubeconfig, k8s_object="configmap", run_id="rk8s"))
    kinds = {k.kind: k for k in result.by_kind}
    assert set(kinds) == {"k8s-create", "k8s-update", "k8s-list", "k8s-watch"}, kinds
    assert (result.totals.failed, result.totals.lost) == (0, 0), [s.error for s in result.samples if s.error][:3]
    assert result.locust.requests == result.totals.sent > 20
    # the Kubernetes scalability SLO for mutating calls (p99 <= 1 s) holds on an idle loopback control plane
    for kind in ("k8s-create", "k8s-update"):
        latency = kinds[kind].latency
        assert latency is not None and latency.p99 <= 1.0, (kind, latency)
    watch = kinds["k8s-watch"].ttft
    assert watch is not None and watch.max < 5, "a watch did not deliver its own fresh write"
    created = {s.object_name for s in result.samples if s.kind == "k8s-create" and s.outcome is Outcome.ANSWERED}
    api = client.CoreV1Api(api_client(real_cluster.url, real_cluster.ca_file, real_cluster.admin_token))
    try:
        found = {c.metadata.name: c for c in
                 api.list_namespaced_config_map("default", label_selector="firedrill.dev/load=rk8s").items}
        assert created and created <= set(found), sorted(created - set(found))[:5]
        updated = {s.object_name for s in result.samples if s.kind == "k8s-update" and s.outcome is Outcome.ANSWERED}
        assert updated and all(found[n].data["revision"] != "1" for n in updated)
    finally:
        api.delete_collection_namespaced_config_map("default", label_selector="firedrill.dev/load=rk8s")
        api.api_client.close()
