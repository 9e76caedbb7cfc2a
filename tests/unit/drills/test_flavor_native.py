"""The ``native`` gang flavor: Kubernetes' own Workload and PodGroup (``scheduling.k8s.io/v1beta1``) and
pods naming their PodGroup; and what the gang drill says when a cluster does not serve a flavor's API.

The shapes are checked here against the upstream Go types (``k8s.io/api@v0.37.2``, scheduling/v1beta1 and
core/v1 ``PodSchedulingGroup``); the real kube-apiserver's validation of them runs in
``tests/realk8s/test_native_gang.py`` (server-side dry-run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from drills.kinds.gang.drill import GangDrill
from drills.kube.driver import KubeError, resource_for
from drills.kube.flavors import (GANG_LABEL, RUN_LABEL, WORKER_INDEX_LABEL, GangFlavor, GangSpec, flavor_apis,
                                 gang_manifests, locate, native_gang, queue_manifests)
from drills.records.verdict import DrillInconclusive, DrillResult
from drills.target.profile import load_profile

REPO = Path(__file__).resolve().parents[3]


def spec(**overrides: Any) -> GangSpec:
    fields: dict[str, Any] = {"name": "train", "run_id": "run-7", "workers": 3, "gpus_per_worker": 8,
                              "image": "firedrill-canary:0", "namespace": "team-a"}
    return GangSpec(**{**fields, **overrides})


def test_a_native_gang_is_a_workload_its_pod_group_and_pods_naming_the_group() -> None:
    workload, group, *pods = native_gang(spec(min_member=2, priority_class="training"))
    assert workload == {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": "train", "namespace": "team-a", "labels": {RUN_LABEL: "run-7", GANG_LABEL: "train"}},
        "spec": {"podGroupTemplates": [{"name": "worker", "schedulingPolicy": {"gang": {"minCount": 2}},
                                        "priorityClassName": "training"}]},
    }
    assert group == {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "team-a", "labels": {RUN_LABEL: "run-7", GANG_LABEL: "train"}},
        "spec": {"workloadRef": {"workloadName": "train", "templateName": "worker"},
                 "schedulingPolicy": {"gang": {"minCount": 2}}, "priorityClassName": "training"},
    }
    assert [p["metadata"]["name"] for p in pods] == ["train-worker-0", "train-worker-1", "train-worker-2"]
    for i, pod in enumerate(pods):
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "train"}
        assert "schedulerName" not in pod["spec"], "the default kube-scheduler gang-schedules"
        assert pod["metadata"]["labels"][WORKER_INDEX_LABEL] == str(i)
        assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
        assert pod["spec"]["priorityClassName"] == "training"
    assert gang_manifests(spec(), GangFlavor.NATIVE) == native_gang(spec())


def test_min_member_defaults_to_every_worker_and_no_queue_objects_exist() -> None:
    workload, group, *_ = native_gang(spec())
    assert workload["spec"]["podGroupTemplates"][0] == {"name": "worker", "schedulingPolicy": {"gang": {"minCount": 3}}}
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert queue_manifests(GangFlavor.NATIVE, queue="ignored", namespace="team-a", gpus=8) == []
    assert flavor_apis(GangFlavor.NATIVE) == {"scheduling.k8s.io": ("v1beta1",)}


def test_the_driver_addresses_the_native_objects_and_locate_points_at_the_pod_group() -> None:
    workload, group, pod = native_gang(spec(workers=1))
    assert resource_for(workload).path("team-a", "train") == \
        "/apis/scheduling.k8s.io/v1beta1/namespaces/team-a/workloads/train"
    assert resource_for(group).path("team-a", "train", "status") == \
        "/apis/scheduling.k8s.io/v1beta1/namespaces/team-a/podgroups/train/status"
    found = locate(spec(), GangFlavor.NATIVE)
    assert found.group.path == "/apis/scheduling.k8s.io/v1beta1/namespaces/team-a/podgroups/train"
    assert found.pod_selector == f"{RUN_LABEL}=run-7,{GANG_LABEL}=train"
    assert pod["kind"] == "Pod"


def test_the_native_example_profile_loads() -> None:
    profile = load_profile(REPO / "examples" / "profile-native.yaml")
    assert profile.flavor is GangFlavor.NATIVE
    assert profile.canary.shared_volume is not None and "nfs" in profile.canary.shared_volume


# --- the gang drill against a cluster that does not serve the flavor's API -------------------------


@dataclass
class FakeDriver:
    """Answers creates with ``create_error`` and discovery of ``/apis/<group>/<version>`` with ``served``."""

    create_error: KubeError
    served: dict[str, list[str]] = field(default_factory=dict)
    created: list[dict[str, Any]] = field(default_factory=list)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        raise self.create_error

    def request(self, method: str, path: str, retry: bool = True) -> dict[str, Any]:
        api = path.removeprefix("/apis/")
        if api not in self.served:
            raise KubeError(f"GET {path}: 404 NotFound", 404, "NotFound")
        return {"resources": [{"name": n} for n in self.served[api]]}


@dataclass
class FakeTarget:
    driver: FakeDriver
    profile: Any


def drill(driver: FakeDriver) -> GangDrill:
    profile = load_profile(REPO / "examples" / "profile-native.yaml")
    return GangDrill(FakeTarget(driver, profile), DrillResult("gang-submission"), "run-7")  # type: ignore[arg-type]


NOT_SERVED = KubeError("POST .../workloads: 404 NotFound: the server could not find the requested resource", 404,
                       "NotFound")


@pytest.mark.parametrize("served", [{}, {"scheduling.k8s.io/v1beta1": ["podgroups"]}],
                         ids=["group-version-absent", "resource-absent"])
def test_an_unserved_flavor_api_makes_the_drill_inconclusive_naming_it(served: dict[str, list[str]]) -> None:
    workload = native_gang(spec())[0]
    with pytest.raises(DrillInconclusive) as why:
        drill(FakeDriver(NOT_SERVED, served))._create_group_object(workload)
    message = str(why.value)
    assert message.startswith("the cluster does not serve workloads in scheduling.k8s.io/v1beta1, which the "
                              "native gang flavor writes")
    assert "GenericWorkload" in message


def test_a_404_for_a_served_api_is_not_blamed_on_the_flavor() -> None:
    missing_namespace = KubeError('POST ...: 404 NotFound: namespaces "team-a" not found', 404, "NotFound")
    served = {"scheduling.k8s.io/v1beta1": ["workloads", "podgroups"]}
    with pytest.raises(KubeError) as raised:
        drill(FakeDriver(missing_namespace, served))._create_group_object(native_gang(spec())[0])
    assert raised.value is missing_namespace
    forbidden = KubeError("POST ...: 403 Forbidden", 403, "Forbidden")
    with pytest.raises(KubeError) as raised:
        drill(FakeDriver(forbidden))._create_group_object(native_gang(spec())[0])
    assert raised.value is forbidden
