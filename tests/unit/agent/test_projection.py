"""Projected, configMap, secret and downwardAPI volumes: what a real kube-apiserver puts in every pod
(``kube-api-access-<x>``), filled through the node's client before the pod's processes start; and pod
annotations written through ``pods/status`` where the API refuses a node identity a patch of the pod."""

from __future__ import annotations

import base64
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refplatform.agent.clock import VirtualClock
from refplatform.agent.errors import ContainerSpecError
from refplatform.agent.logs import LogStore
from refplatform.agent.podenv import PodFacts
from refplatform.agent.pods import FAILED_MOUNT, PodSync
from refplatform.agent.projection import (FieldItem, KeyItem, ProjectedSource, ProjectionError, Projector, SourceKind,
                                          parse_sources, write_files)

from .fakeapi import FakeApi, status_error
from .test_runtime import PY, Env, pod_path

KUBE_API_ACCESS = {
    "name": "kube-api-access-x7k2p",
    "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ],
    },
}
MOUNT = {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}
TOKEN_PATH = "/api/v1/namespaces/default/serviceaccounts/default/token"
ROOT_CA = "/api/v1/namespaces/default/configmaps/kube-root-ca.crt"


def test_the_service_account_volume_kube_apiserver_adds_parses_into_three_sources() -> None:
    sources, mode = parse_sources(KUBE_API_ACCESS, "spec.volumes[0]")
    assert mode == 0o644
    where = "spec.volumes[0].projected.sources"
    assert sources == (
        ProjectedSource(SourceKind.SERVICE_ACCOUNT_TOKEN, f"{where}[0].serviceAccountToken", path="token",
                        expiration_seconds=3607),
        ProjectedSource(SourceKind.CONFIG_MAP, f"{where}[1].configMap", name="kube-root-ca.crt",
                        items=(KeyItem("ca.crt", "ca.crt"),)),
        ProjectedSource(SourceKind.DOWNWARD_API, f"{where}[2].downwardAPI",
                        fields=(FieldItem("metadata.namespace", "namespace"),)),
    )
    secret, _ = parse_sources({"name": "s", "secret": {"secretName": "creds", "optional": True}}, "spec.volumes[1]")
    assert secret == (ProjectedSource(SourceKind.SECRET, "spec.volumes[1].secret", name="creds", optional=True),)


@pytest.mark.parametrize(("volume", "message"), [
    ({"projected": {"sources": [{"clusterTrustBundle": {"path": "b"}}]}},
     "spec.volumes[0].projected.sources[0].clusterTrustBundle: not supported"),
    ({"downwardAPI": {"items": [{"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu"}}]}},
     "spec.volumes[0].downwardAPI.items[0].resourceFieldRef: not supported"),
    ({"downwardAPI": {"items": [{"path": "x", "fieldRef": {"fieldPath": "spec.priority"}}]}},
     "spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath: unsupported field path 'spec.priority'"),
    ({"configMap": {"name": "c", "items": [{"key": "k", "path": "../escape"}]}},
     "spec.volumes[0].configMap.items[0].path: must be a relative path without '..'"),
    ({"projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 60}}]}},
     "spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds: must be an integer of at least 600"),
    ({"secret": {"defaultMode": 4096}}, "spec.volumes[0].secret.defaultMode: must be a file mode"),
])
def test_what_the_agent_cannot_fill_names_its_field(volume: dict[str, Any], message: str) -> None:
    with pytest.raises(ContainerSpecError) as err:
        parse_sources({"name": "v", **volume}, "spec.volumes[0]")
    assert str(err.value).startswith(message)


class TokenApi(FakeApi):
    """FakeApi that answers TokenRequests like kube-apiserver (a token in the status)."""

    def __init__(self) -> None:
        super().__init__()
        self.token_requests: list[dict[str, Any]] = []

    def create(self, path: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        if path.endswith("/token"):
            self._check("POST", path, body)
            self.token_requests.append(body)
            return {**body, "status": {"token": f"token-for-{body['spec']['boundObjectRef']['name']}"}}
        return super().create(path, body, params)


FACTS = PodFacts(name="p", namespace="default", uid="uid-9", node_name="n", pod_ip="", host_ip="127.0.0.1",
                 labels={"app": "canary", "b": 'say "hi"'}, annotations={})


def test_the_projector_fetches_token_keys_and_fields_through_the_node_client(tmp_path: Path) -> None:
    api = TokenApi()
    api.put_object(ROOT_CA, {"data": {"ca.crt": "PEM"}})
    api.put_object("/api/v1/namespaces/default/secrets/creds",
                   {"data": {"user": base64.b64encode(b"u").decode(), "pass": base64.b64encode(b"\x00p").decode()}})
    sources, mode = parse_sources(KUBE_API_ACCESS, "spec.volumes[0]")
    files = Projector(api).files({}, sources, mode, FACTS)
    assert files == {"token": (b"token-for-p", 0o644), "ca.crt": (b"PEM", 0o644), "namespace": (b"default", 0o644)}
    spec = api.token_requests[0]["spec"]
    assert spec == {"audiences": [], "expirationSeconds": 3607,
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-9"}}

    secret, _ = parse_sources({"name": "s", "secret": {"secretName": "creds", "defaultMode": 0o400,
                                                       "items": [{"key": "pass", "path": "db/pass", "mode": 0o600}]}},
                              "spec.volumes[1]")
    assert Projector(api).files({}, secret, 0o400, FACTS) == {"db/pass": (b"\x00p", 0o600)}
    labels, _ = parse_sources({"name": "l", "downwardAPI": {"items": [
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}, "spec.volumes[2]")
    assert Projector(api).files({}, labels, None, FACTS)["labels"][0] == b'app="canary"\nb="say \\"hi\\""'

    write_files(tmp_path / "vol", {**files, "db/pass": (b"\x00p", 0o600)})
    assert (tmp_path / "vol" / "token").read_bytes() == b"token-for-p"
    assert stat.S_IMODE((tmp_path / "vol" / "db" / "pass").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "vol" / "ca.crt").stat().st_mode) == 0o644


def test_a_missing_object_or_key_is_an_error_unless_optional() -> None:
    api = TokenApi()
    api.put_object(ROOT_CA, {"data": {"other": "x"}})
    missing_key, _ = parse_sources({"name": "c", "configMap": {"name": "kube-root-ca.crt",
                                                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}}, "v")
    with pytest.raises(ProjectionError, match="configMap default/kube-root-ca.crt has no key 'ca.crt'"):
        Projector(api).files({}, missing_key, None, FACTS)
    gone, _ = parse_sources({"name": "c", "configMap": {"name": "absent"}}, "v")
    with pytest.raises(ProjectionError, match="v.configMap: configMap default/absent: 404"):
        Projector(api).files({}, gone, None, FACTS)
    optional, _ = parse_sources({"name": "c", "configMap": {"name": "absent", "optional": True}}, "v")
    assert Projector(api).files({}, optional, None, FACTS) == {}
    api.fail = lambda verb, path: status_error(403, "Forbidden", "no") if path == TOKEN_PATH else None
    token, _ = parse_sources({"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}, "v")
    with pytest.raises(ProjectionError, match="token of service account default/default: 403"):
        Projector(api).files({}, token, None, FACTS)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    e.api = TokenApi()
    e.sync.client = e.api  # type: ignore[assignment]
    e.events.client = e.api
    try:
        yield e
    finally:
        e.close()


def cat(*names: str) -> dict[str, Any]:
    paths = [f"{MOUNT['mountPath']}/{n}" for n in names]
    return {"name": "main", "image": "busybox", "volumeMounts": [MOUNT],
            "command": [PY, "-c", "import sys\nfor p in sys.argv[1:]: print(open(p).read())", *paths]}


def test_a_pod_of_a_real_cluster_reads_its_service_account_volume(env: Env) -> None:
    env.api.put_object(ROOT_CA, {"data": {"ca.crt": "CLUSTER-CA"}})
    env.add_pod("sa", [cat("namespace", "token", "ca.crt")], volumes=[KUBE_API_ACCESS], restartPolicy="Never")
    env.until(lambda: env.phase("sa") == "Succeeded", "the pod to read its projected files")
    assert env.log("sa") == ["default", "token-for-sa", "CLUSTER-CA"]
    assert env.api.token_requests[0]["spec"]["boundObjectRef"]["uid"] == env.pod("sa")["metadata"]["uid"]


def test_a_volume_that_cannot_be_filled_keeps_the_pod_pending_with_failed_mount_until_it_can(env: Env) -> None:
    env.add_pod("wait", [cat("ca.crt")], volumes=[KUBE_API_ACCESS], restartPolicy="Never")
    for _ in range(3):
        env.step()
        env.sync._mounts[env.pod("wait")["metadata"]["uid"]].retry_at = 0.0
    assert env.phase("wait") == "Pending" and env.sync.workers == {}
    assert env.log("wait") == []
    env.events.drain()
    events = [b for verb, path, b in env.api.calls if verb == "POST" and path.endswith("/events")]
    assert events and events[0]["reason"] == FAILED_MOUNT and events[0]["type"] == "Warning"
    assert "kube-root-ca.crt" in events[0]["message"] and events[0]["involvedObject"]["name"] == "wait"
    env.api.put_object(ROOT_CA, {"data": {"ca.crt": "LATE-CA"}})  # the root-CA publisher caught up
    env.until(lambda: env.phase("wait") == "Succeeded", "the pod to start once its volume could be filled")
    assert env.log("wait") == ["LATE-CA"]
    assert env.sync._mounts == {}


TRAINING = {"firedrill.dev/workload": "training", "firedrill.dev/step-seconds": "0.5",
            "firedrill.dev/steps-total": "4"}


def test_annotations_go_through_pods_status_when_the_api_refuses_the_node_a_pod_patch(tmp_path: Path) -> None:
    """A real kube-apiserver's Node authorizer lets a kubelet write pods/status, never the pod itself."""
    api = FakeApi()
    forbidden = status_error(403, "Forbidden", 'User "system:node:n" cannot patch resource "pods"')
    api.fail = lambda verb, path: forbidden if verb == "PATCH" and path == pod_path("t") else None
    clock = VirtualClock()
    sync = PodSync(api, "n", LogStore(tmp_path / "logs"), clock)  # type: ignore[arg-type]
    pod = api.put_object(pod_path("t"), {"apiVersion": "v1", "kind": "Pod",
                                         "metadata": {"name": "t", "namespace": "default", "annotations": TRAINING},
                                         "spec": {"nodeName": "n", "containers": [{"name": "main"}]},
                                         "status": {"phase": "Pending"}})
    sync._apply("ADDED", pod)
    for _ in range(12):
        clock.advance(0.5)
        sync.sync_once()
        sync._apply("MODIFIED", api.objects[pod_path("t")])
        for w in sync.workers.values():
            w.retry_at = 0.0
    stored = api.objects[pod_path("t")]
    assert stored["status"]["phase"] == "Succeeded"
    assert stored["metadata"]["annotations"]["firedrill.dev/step"] == "4"
    patches = [path for verb, path, _ in api.calls if verb == "PATCH"]
    assert patches.count(pod_path("t")) == 1, "the agent kept trying the refused patch"
    assert any(body == {"metadata": {"annotations": body["metadata"]["annotations"]}} and path.endswith("/status")
               for verb, path, body in api.calls if verb == "PATCH" and "metadata" in (body or {}))


def test_a_simulated_rank_whose_node_may_not_list_its_job_says_why_it_stalls_once(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from refplatform.agent.gang import RankSpec
    from refplatform.agent.jobs import JobCoordinator

    api = FakeApi()
    api.fail = lambda verb, path: status_error(403, "Forbidden", "pods is forbidden") if verb == "LIST" else None
    clock = VirtualClock()
    jobs = JobCoordinator(api, clock, poll_interval=0.5)
    link = jobs.attach("u0", RankSpec("default", "j", 0, 2, 0))
    with caplog.at_level(logging.WARNING, logger="refplatform.agent.jobs"):
        for _ in range(3):
            clock.advance(1)
            jobs.poll_now()
            jobs.run_once()
    warnings = [r.getMessage() for r in caplog.records if "may not list the job's pods" in r.getMessage()]
    assert len(warnings) == 1 and "pods is forbidden" in warnings[0]
    assert link.status(clock.now()).window is None  # no view: the rank stalls
