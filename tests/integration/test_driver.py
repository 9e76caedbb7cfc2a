"""The harness's one Kubernetes driver against a real server (the reference platform's)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import yaml

from drills.kube.driver import NODE, POD, KubeDriver, KubeError, TargetUnreachable
from drills.kube.timeline import Timeline
from refplatform.cluster import Cluster, ClusterSpec
from tests.integration.kube import pod_manifest

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pod(name: str) -> dict:
    return {**pod_manifest(name), "metadata": {"name": name, "namespace": "default", "labels": {"drill": "t"}}}


def test_connect_create_list_and_watch_with_stamps(apiserver: Cluster) -> None:
    timeline = Timeline()
    driver = KubeDriver.connect(apiserver.kubeconfig, timeline=timeline)
    try:
        assert driver.version()["gitVersion"].startswith("v1.")
        driver.watch(POD, "default", label_selector="drill=t")
        before = time.monotonic()
        driver.create(pod("a"))
        seen = timeline.wait_for(lambda o: o.kind == "Pod" and o.name == "a" and o.event == "ADDED", 10)
        assert seen is not None and seen.stamp.mono >= before and abs(seen.stamp.wall - time.time()) < 5
        driver.patch(POD, "a", {"metadata": {"labels": {"drill": "other"}}}, "default")
        gone = timeline.wait_for(lambda o: o.name == "a" and o.event == "DELETED", 10)
        assert gone is not None, "leaving the selector is reported as DELETED"
        assert [p["metadata"]["name"] for p in driver.list(POD, "default", label_selector="drill=other")] == ["a"]
        assert any(o.kind == "Action" and o.event == "create" for o in timeline)
    finally:
        driver.close()


def test_watch_resumes_across_a_server_restart_without_gaps(tmp_path: Path) -> None:
    cluster = Cluster(ClusterSpec(tmp_path / "c", nodes=0, port=free_port()))
    cluster.start_server()
    timeline = Timeline()
    driver = KubeDriver.connect(cluster.kubeconfig, timeline=timeline)
    try:
        driver.watch(POD, "default")
        driver.create(pod("before"))
        assert timeline.wait_for(lambda o: o.name == "before", 10)
        assert cluster.server is not None
        cluster.server.kill()
        cluster.start_server()  # same port, same data directory
        driver.create(pod("after"))
        assert timeline.wait_for(lambda o: o.name == "after" and o.event == "ADDED", 20), "watch resumed"
        added = [o.name for o in timeline if o.kind == "Pod" and o.event == "ADDED"]
        assert added.count("before") == 1 and added.count("after") == 1, added
    finally:
        driver.close()
        cluster.stop()


def test_client_errors_are_not_retried_and_name_the_problem(apiserver: Cluster) -> None:
    driver = KubeDriver.connect(apiserver.kubeconfig, attempts=5)
    try:
        started = time.monotonic()
        with pytest.raises(KubeError) as exc:
            driver.get(NODE, "no-such-node")
        assert exc.value.code == 404 and "no-such-node" in str(exc.value)
        assert time.monotonic() - started < 1.0, "a 404 is final: no backoff"
        assert driver.find(NODE, "no-such-node") is None
    finally:
        driver.close()


def test_an_unreachable_cluster_is_a_clear_error(apiserver: Cluster, tmp_path: Path) -> None:
    config = yaml.safe_load(apiserver.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    broken = tmp_path / "kubeconfig"
    broken.write_text(yaml.safe_dump(config))
    with pytest.raises(TargetUnreachable) as exc:
        KubeDriver.connect(broken, attempts=2, max_backoff=0.05)
    assert "cannot reach the cluster at https://127.0.0.1:" in str(exc.value)
    with pytest.raises(TargetUnreachable) as exc:
        KubeDriver.connect(tmp_path / "missing-kubeconfig")
    assert "cannot load kubeconfig" in str(exc.value)


def test_a_watch_the_server_refuses_raises_at_once_instead_of_waiting_silently(apiserver: Cluster) -> None:
    """Issue 32: without list on a resource a watch waited its 15 s and then retried the refused list five times
    a second, unseen; now the refusal is the caller's, naming what the identity lacks."""
    tenant = apiserver.spec.data_dir / "tenant-a.kubeconfig"
    assert tenant.is_file(), "the reference platform writes a tenant's kubeconfig"
    driver = KubeDriver.connect(tenant)
    try:
        started = time.monotonic()
        with pytest.raises(KubeError, match="cannot watch pods: .*403.*needs list and watch on pods") as caught:
            driver.watch(POD, "firedrill-neighbour")
        assert caught.value.code == 403 and time.monotonic() - started < 5
    finally:
        driver.close()
