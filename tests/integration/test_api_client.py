"""The API server, driven over HTTP by the official kubernetes client: verbs, selectors, watch."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from refplatform.cluster import Cluster, ClusterSpec
from tests.integration.kube import api_client, pod_manifest

pytestmark = pytest.mark.integration


@pytest.fixture
def v1(apiserver: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(api_client(apiserver))


def test_create_get_list_delete(v1: client.CoreV1Api) -> None:
    created = v1.create_namespaced_pod("default", pod_manifest("p1", gpus=2, labels={"app": "train"}))
    assert created.metadata.uid and int(created.metadata.resource_version) > 0
    assert created.status.phase == "Pending"
    got = v1.read_namespaced_pod("p1", "default")
    assert got.metadata.uid == created.metadata.uid
    assert got.spec.containers[0].resources.limits == {"nvidia.com/gpu": "2"}
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_pod("default", pod_manifest("p1"))
    assert exc.value.status == 409 and '"reason":"AlreadyExists"' in exc.value.body.replace(" ", "")
    v1.delete_namespaced_pod("p1", "default")
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_pod("p1", "default")
    assert exc.value.status == 404


def test_list_with_label_and_field_selectors(v1: client.CoreV1Api) -> None:
    v1.create_namespace({"metadata": {"name": "team-a"}})
    for name, app, ns in [("a", "train", "default"), ("b", "serve", "default"), ("c", "train", "team-a")]:
        v1.create_namespaced_pod(ns, pod_manifest(name, labels={"app": app, "tier": "gpu"}))
    v1.create_namespaced_pod_binding("a", "default", {"target": {"kind": "Node", "name": "n1"},
                                                      "metadata": {"name": "a"}}, _preload_content=False)

    def names(**kw: str) -> list[str]:
        return sorted(p.metadata.name for p in v1.list_pod_for_all_namespaces(**kw).items)

    assert names(label_selector="app=train") == ["a", "c"]
    assert names(label_selector="app!=train") == ["b"]
    assert names(label_selector="app in (serve,other),tier") == ["b"]
    assert names(label_selector="!tier") == []
    assert names(field_selector="spec.nodeName=n1") == ["a"]
    assert names(field_selector="spec.nodeName=") == ["b", "c"]
    assert names(field_selector="metadata.namespace=team-a") == ["c"]
    assert names(field_selector="status.phase=Pending,metadata.name!=a") == ["b", "c"]
    assert [p.metadata.name for p in v1.list_namespaced_pod("team-a").items] == ["c"]
    with pytest.raises(ApiException) as exc:
        v1.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert exc.value.status == 400 and "field label not supported: spec.bogus" in exc.value.body


def test_pagination_with_limit_and_continue(v1: client.CoreV1Api) -> None:
    for i in range(7):
        v1.create_namespaced_pod("default", pod_manifest(f"p{i}"))
    seen, token = [], None
    while True:
        page = v1.list_namespaced_pod("default", limit=3, _continue=token)
        seen += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert seen == [f"p{i}" for i in range(7)]


def test_update_conflicts_on_stale_resource_version(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod_manifest("p"))
    first = v1.read_namespaced_pod("p", "default")
    second = v1.read_namespaced_pod("p", "default")
    first.metadata.labels = {"owner": "first"}
    updated = v1.replace_namespaced_pod("p", "default", first)
    assert updated.metadata.labels == {"owner": "first"}
    assert int(updated.metadata.resource_version) > int(second.metadata.resource_version)
    second.metadata.labels = {"owner": "second"}
    with pytest.raises(ApiException) as exc:
        v1.replace_namespaced_pod("p", "default", second)
    assert exc.value.status == 409 and "Conflict" in exc.value.body
    assert v1.read_namespaced_pod("p", "default").metadata.labels == {"owner": "first"}


def test_each_patch_type(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod_manifest("p", labels={"a": "1", "b": "2"}))
    # strategic merge (the client's default for a dict body): merge containers by name
    v1.patch_namespaced_pod("p", "default", {"spec": {"containers": [{"name": "main", "image": "canary:2"}]}})
    pod = v1.read_namespaced_pod("p", "default")
    assert [c.image for c in pod.spec.containers] == ["canary:2"]
    # JSON merge patch: null deletes a key
    v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": None, "c": "3"}}},
                            _content_type="application/merge-patch+json")
    assert v1.read_namespaced_pod("p", "default").metadata.labels == {"b": "2", "c": "3"}
    # JSON patch (a list body)
    v1.patch_namespaced_pod("p", "default", [{"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}},
                                             {"op": "test", "path": "/metadata/labels/b", "value": "2"}])
    assert v1.read_namespaced_pod("p", "default").metadata.annotations == {"x": "y"}
    with pytest.raises(ApiException) as exc:
        v1.patch_namespaced_pod("p", "default", [{"op": "test", "path": "/metadata/labels/b", "value": "9"}])
    assert exc.value.status == 422
    assert v1.read_namespaced_pod("p", "default").metadata.annotations == {"x": "y"}


def test_node_status_subresource_and_cordon(v1: client.CoreV1Api) -> None:
    node = {"metadata": {"name": "n1"}, "status": {"capacity": {"nvidia.com/gpu": "8"},
                                                  "allocatable": {"nvidia.com/gpu": "8"}}}
    v1.create_node(node)
    v1.patch_node("n1", {"spec": {"unschedulable": True}})
    assert v1.read_node("n1").spec.unschedulable is True
    # status is only writable through /status
    v1.patch_node("n1", {"status": {"capacity": {"nvidia.com/gpu": "4"}}})
    assert v1.read_node("n1").status.capacity == {"nvidia.com/gpu": "8"}
    v1.patch_node_status("n1", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    got = v1.read_node("n1")
    assert got.status.conditions[0].type == "Ready" and got.spec.unschedulable is True


def test_graceful_delete_of_a_bound_pod_waits_for_its_node(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod_manifest("p"))
    v1.create_namespaced_pod_binding("p", "default", {"target": {"kind": "Node", "name": "n1"},
                                                      "metadata": {"name": "p"}}, _preload_content=False)
    v1.delete_namespaced_pod("p", "default")
    pod = v1.read_namespaced_pod("p", "default")
    assert pod.metadata.deletion_timestamp is not None and pod.metadata.deletion_grace_period_seconds == 30
    v1.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    with pytest.raises(ApiException):
        v1.read_namespaced_pod("p", "default")


def test_binding_twice_conflicts(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod_manifest("p"))
    body = {"target": {"kind": "Node", "name": "n1"}, "metadata": {"name": "p"}}
    v1.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_pod_binding("p", "default", {**body, "target": {"kind": "Node", "name": "n2"}},
                                         _preload_content=False)
    assert exc.value.status == 409
    assert v1.read_namespaced_pod("p", "default").spec.node_name == "n1"


def _collect(v1: client.CoreV1Api, count: int, **kw: object) -> tuple[list[tuple[str, str, int]], watch.Watch]:
    w = watch.Watch()
    seen: list[tuple[str, str, int]] = []
    for ev in w.stream(v1.list_namespaced_pod, "default", **kw):
        seen.append((ev["type"], ev["object"].metadata.name, int(ev["object"].metadata.resource_version)))
        if len(seen) >= count:
            w.stop()
            break
    return seen, w


def test_watch_resumes_from_resource_version_without_gaps_or_replays(v1: client.CoreV1Api) -> None:
    start_rv = v1.list_namespaced_pod("default").metadata.resource_version
    writes_done = threading.Event()

    def writer() -> None:
        for i in range(30):
            v1.create_namespaced_pod("default", pod_manifest(f"w{i}"))
            v1.patch_namespaced_pod(f"w{i}", "default", {"metadata": {"labels": {"i": str(i)}}})
        writes_done.set()

    t = threading.Thread(target=writer)
    t.start()
    # First watch: stop mid-stream after 17 events.
    first, _ = _collect(v1, 17, resource_version=start_rv, timeout_seconds=20)
    resume_rv = str(first[-1][2])
    t.join(timeout=30)
    assert writes_done.is_set()
    # Second watch resumes from the last version seen.
    second, _ = _collect(v1, 60 - 17, resource_version=resume_rv, timeout_seconds=20)
    events = first + second
    rvs = [rv for _, _, rv in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 60, "events must be in order, each exactly once"
    expected = [(kind, f"w{i}") for i in range(30) for kind in ("ADDED", "MODIFIED")]
    assert [(k, n) for k, n, _ in events] == expected


def test_watch_from_a_compacted_version_gets_410(tmp_path) -> None:
    cluster = Cluster(ClusterSpec(tmp_path / "c", nodes=0, extra_server_args=("--changelog-limit", "16")))
    cluster.start_server()
    try:
        v1 = client.CoreV1Api(api_client(cluster))
        old_rv = v1.list_namespaced_pod("default").metadata.resource_version
        for i in range(300):  # the log is trimmed every 256 versions, to the newest 16
            v1.create_namespaced_pod("default", pod_manifest(f"p{i}"))
        with pytest.raises(ApiException) as exc:
            for _ in watch.Watch().stream(v1.list_namespaced_pod, "default", resource_version=old_rv,
                                          timeout_seconds=2):
                pass
        assert exc.value.status == 410
        # A current version still works.
        rv = v1.list_namespaced_pod("default").metadata.resource_version
        v1.create_namespaced_pod("default", pod_manifest("after"))
        seen, _ = _collect(v1, 1, resource_version=rv, timeout_seconds=5)
        assert seen[0][:2] == ("ADDED", "after")
    finally:
        cluster.stop()


def test_watch_sends_bookmarks_when_asked(v1: client.CoreV1Api) -> None:
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    kinds = []
    for ev in watch.Watch().stream(v1.list_namespaced_pod, "default", resource_version=rv,
                                   allow_watch_bookmarks=True, timeout_seconds=2):
        kinds.append(ev["type"])
    assert "BOOKMARK" in kinds


def test_watch_with_selector_reports_objects_leaving_it(v1: client.CoreV1Api) -> None:
    v1.create_namespaced_pod("default", pod_manifest("p", labels={"app": "a"}))
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    v1.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"app": "b"}}})
    seen, _ = _collect(v1, 1, resource_version=rv, label_selector="app=a", timeout_seconds=5)
    assert seen[0][:2] == ("DELETED", "p")
