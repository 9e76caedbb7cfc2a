"""Whether a real cluster's scheduler is asked to keep a gang inside one rack, read before anything is created:
Kueue's LocalQueue -> ClusterQueue -> ResourceFlavor -> Topology chain, and a dry run of the native PodGroup.
A fake driver answers with the objects a cluster admin would have written."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from drills.kinds.topology.asking import KUEUE_API, kueue_problem, native_problem, scheduler_problem
from drills.kube.driver import KubeError
from drills.kube.flavors import GangFlavor
from drills.target.profile import reference_profile

RACK = "cloud.provider.com/topology-rack"
PROFILE = replace(reference_profile(), flavor=GangFlavor.KUEUE, namespace="team", queue="lq")


class FakeDriver:
    def __init__(self, objects: dict[str, dict[str, Any]], dry_run: dict[str, Any] | None = None) -> None:
        self.objects, self.dry_run, self.posted = objects, dry_run, []

    def request(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None,
                retry: bool = True) -> dict[str, Any]:
        if method == "POST":
            self.posted.append((path, body, query))
            if self.dry_run is None:
                raise KubeError("not found", code=404)
            return self.dry_run
        if path not in self.objects:
            raise KubeError("not found", code=404)
        return self.objects[path]


def kueue(flavor_spec: dict[str, Any], levels: list[str] | None = None) -> FakeDriver:
    objects = {f"{KUEUE_API}/namespaces/team/localqueues/lq": {"spec": {"clusterQueue": "cq"}},
               f"{KUEUE_API}/clusterqueues/cq": {"spec": {"resourceGroups": [{"flavors": [{"name": "gpu"}]}]}},
               f"{KUEUE_API}/resourceflavors/gpu": {"spec": flavor_spec}}
    if levels is not None:
        objects[f"{KUEUE_API}/topologies/racks"] = {"spec": {"levels": [{"nodeLabel": lv} for lv in levels]}}
    return FakeDriver(objects)


def test_a_flavor_whose_topology_has_a_level_on_the_label_is_asked() -> None:
    driver = kueue({"topologyName": "racks", "nodeLabels": {"a": "b"}}, ["block", RACK, "kubernetes.io/hostname"])
    assert kueue_problem(driver, PROFILE, RACK) == ""  # type: ignore[arg-type]
    assert scheduler_problem(driver, PROFILE, RACK, "r") == ""  # type: ignore[arg-type]


@pytest.mark.parametrize(("driver", "named"), [
    (kueue({}), "ResourceFlavor gpu names no topology"),
    (kueue({"topologyName": "racks"}, ["cloud.provider.com/topology-block"]),
     "Topology racks (of ResourceFlavor gpu) has levels cloud.provider.com/topology-block"),
    (kueue({"topologyName": "racks"}), "Topology racks (of ResourceFlavor gpu) has levels none"),
])
def test_a_queue_not_set_up_for_the_label_is_named_with_the_fix(driver: FakeDriver, named: str) -> None:
    problem = kueue_problem(driver, PROFILE, RACK)  # type: ignore[arg-type]
    assert named in problem and "ClusterQueue cq of LocalQueue lq" in problem
    assert "name it in the flavor's spec.topologyName" in problem


def test_a_missing_local_queue_is_named() -> None:
    assert "LocalQueue team/lq does not exist" in kueue_problem(FakeDriver({}), PROFILE, RACK)  # type: ignore[arg-type]


def test_the_native_pod_group_is_dry_run_and_a_dropped_constraint_names_the_gate() -> None:
    native = replace(PROFILE, flavor=GangFlavor.NATIVE)
    kept = FakeDriver({}, dry_run={"spec": {"schedulingConstraints": {"topology": [{"key": RACK}]}}})
    assert native_problem(kept, native, RACK, "r1") == ""  # type: ignore[arg-type]
    path, body, query = kept.posted[0]
    assert query == {"dryRun": "All"} and path.endswith("/namespaces/team/podgroups")
    assert body["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    dropped = FakeDriver({}, dry_run={"spec": {"schedulingPolicy": {}}})
    said = native_problem(dropped, native, RACK, "r1")  # type: ignore[arg-type]
    assert "TopologyAwareWorkloadScheduling feature gate is off" in said
    assert "does not serve podgroups" in native_problem(FakeDriver({}), native, RACK, "r1")  # type: ignore[arg-type]


def test_other_flavors_are_not_asked_here() -> None:
    volcano = replace(PROFILE, flavor=GangFlavor.VOLCANO)
    assert scheduler_problem(FakeDriver({}), volcano, RACK, "r") == ""  # type: ignore[arg-type]
