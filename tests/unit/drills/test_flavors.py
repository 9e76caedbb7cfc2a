"""Gang manifests: every custom resource validates against the upstream CRD schema, every pod against V1Pod."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import yaml
from kubernetes.client import ApiClient

from drills.kube.flavors import (
    GANG_LABEL, RUN_LABEL, FlavorError, GangFlavor, GangSpec, VolcanoForm, eviction_tolerations, flavor_apis,
    gang_manifests, locate, pod_names, queue_manifests, run_selector, volcano_job_pod_group_name,
)
from tests.conftest import shared_path

Schemas = dict[tuple[str, str], dict[str, dict[str, Any]]]
"""(group, kind) -> {version: openAPIV3Schema}"""


@pytest.fixture(scope="module")
def crd_schemas() -> Schemas:
    root = shared_path("crds")
    schemas: Schemas = {}
    for path in sorted(root.glob("*/*.yaml")):
        if path.name == "workload.yaml":  # 1.4 MB and never generated: Kueue writes Workloads itself
            continue
        crd = yaml.safe_load(path.read_text())
        versions = schemas.setdefault((crd["spec"]["group"], crd["spec"]["names"]["kind"]), {})
        for block in crd["spec"]["versions"]:
            versions[block["name"]] = block["schema"]["openAPIV3Schema"]
    return schemas


@pytest.fixture(scope="module")
def api() -> Iterator[ApiClient]:
    with ApiClient() as client:
        yield client


def schema_for(schemas: Schemas, manifest: dict[str, Any]) -> dict[str, Any]:
    group, _, version = manifest["apiVersion"].rpartition("/")
    versions = schemas.get((group, manifest["kind"]))
    assert versions, f"no CRD in ../shared/crds for {manifest['kind']}.{group}"
    assert version in versions, f"{manifest['kind']}.{group} serves {sorted(versions)}, not {version}"
    return versions[version]


def pruned(obj: Any, schema: dict[str, Any], path: str = "", root: bool = True) -> list[str]:
    """Fields a structural-schema API server would silently drop (plain jsonschema lets them through)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    dropped: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            where = f"{path}.{key}" if path else key
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            if props is not None and key in props:
                dropped += pruned(value, props[key], where, root=False)
            elif isinstance(extra, dict):
                dropped += pruned(value, extra, where, root=False)
            elif extra is not True:
                dropped.append(where)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            dropped += pruned(item, schema["items"], f"{path}[{i}]", root=False)
    return dropped


def check_custom_resource(schemas: Schemas, manifest: dict[str, Any]) -> None:
    schema = schema_for(schemas, manifest)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft4Validator(schema).iter_errors(manifest)]
    assert not errors, f"{manifest['kind']} {manifest['metadata']['name']} fails its CRD schema: {errors}"
    assert not pruned(manifest, schema), f"{manifest['kind']} fields the API server would prune: " \
                                         f"{pruned(manifest, schema)}"


def check_pod(api: ApiClient, pod: dict[str, Any]) -> None:
    obj = api._ApiClient__deserialize(pod, "V1Pod")  # type: ignore[attr-defined]
    assert api.sanitize_for_serialization(obj) == pod, "a pod field was lost in V1Pod (misspelt or mistyped)"


def check(schemas: Schemas, api: ApiClient, manifests: list[dict[str, Any]]) -> None:
    for manifest in manifests:
        if manifest["apiVersion"] == "v1":
            assert manifest["kind"] == "Pod"
            check_pod(api, manifest)
        else:
            check_custom_resource(schemas, manifest)


def minimal(**overrides: Any) -> GangSpec:
    fields: dict[str, Any] = {"name": "train", "run_id": "run-42", "workers": 4, "gpus_per_worker": 8,
                              "image": "busybox:1.36"}
    return GangSpec(**{**fields, **overrides})


def full(**overrides: Any) -> GangSpec:
    fields: dict[str, Any] = {
        "namespace": "team-a", "queue": "gpu-team", "priority_class": "high", "min_member": 3,
        "labels": {"app": "llm"},
        "annotations": {"firedrill.dev/workload": "training", "firedrill.dev/steps-total": "100"},
        "command": ("python", "-m", "train"), "args": ("--steps", "100"),
        "tolerations": eviction_tolerations(2), "node_selector": {"nvidia.com/gpu.product": "H100"}}
    return minimal(**{**fields, **overrides})


FORMS = [(GangFlavor.VOLCANO, VolcanoForm.JOB), (GangFlavor.VOLCANO, VolcanoForm.PODGROUP),
         (GangFlavor.KUEUE, VolcanoForm.JOB), (GangFlavor.KAI, VolcanoForm.JOB)]
FORM_IDS = ["volcano-job", "volcano-podgroup", "kueue", "kai"]


@pytest.mark.parametrize(("flavor", "form"), FORMS, ids=FORM_IDS)
@pytest.mark.parametrize("variant", ["minimal", "full", "cpu-only"])
def test_manifests_validate_against_upstream_schemas(crd_schemas: Schemas, api: ApiClient, flavor: GangFlavor,
                                                     form: VolcanoForm, variant: str) -> None:
    if variant == "minimal":
        spec = minimal()
    elif variant == "cpu-only":
        spec = minimal(gpus_per_worker=0, workers=1)
    else:
        spec = full(min_member=4) if flavor is GangFlavor.KUEUE else full()
    check(crd_schemas, api, gang_manifests(spec, flavor, form))


@pytest.mark.parametrize("flavor", list(GangFlavor))
def test_queue_manifests_validate(crd_schemas: Schemas, flavor: GangFlavor) -> None:
    for manifest in queue_manifests(flavor, queue="gpu-team", namespace="team-a", gpus=16, run_id="run-42"):
        check_custom_resource(crd_schemas, manifest)
        assert manifest["metadata"]["labels"][RUN_LABEL] == "run-42"


def test_the_pruning_check_catches_a_misspelt_field(crd_schemas: Schemas) -> None:
    bad = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "x"},
           "spec": {"minMember": 2, "subgroups": [{"name": "a", "minMember": 1}]}}
    schema = schema_for(crd_schemas, bad)
    jsonschema.Draft4Validator(schema).validate(bad)  # plain jsonschema lets it through...
    assert pruned(bad, schema) == ["spec.subgroups"]  # ...which is why the tests also look for pruned fields


def pods(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == "Pod"]


@pytest.mark.parametrize(("flavor", "form", "scheduler"), [
    (GangFlavor.VOLCANO, VolcanoForm.PODGROUP, "volcano"),
    (GangFlavor.KUEUE, VolcanoForm.JOB, None),
    (GangFlavor.KAI, VolcanoForm.JOB, "kai-scheduler"),
], ids=["volcano-podgroup", "kueue", "kai"])
def test_bare_pods_share_the_common_shape(flavor: GangFlavor, form: VolcanoForm, scheduler: str | None) -> None:
    spec = full(min_member=4)
    made = pods(gang_manifests(spec, flavor, form))
    assert [p["metadata"]["name"] for p in made] == pod_names(spec) == [f"train-worker-{i}" for i in range(4)]
    for pod in made:
        meta, pod_spec = pod["metadata"], pod["spec"]
        assert meta["namespace"] == "team-a"
        assert meta["labels"][RUN_LABEL] == "run-42" and meta["labels"][GANG_LABEL] == "train"
        assert meta["labels"]["app"] == "llm"
        assert meta["annotations"]["firedrill.dev/workload"] == "training"
        assert pod_spec["restartPolicy"] == "Never"
        assert pod_spec.get("schedulerName") == scheduler
        assert pod_spec["priorityClassName"] == "high"
        assert pod_spec["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
        assert {t["key"] for t in pod_spec["tolerations"]} == {"node.kubernetes.io/not-ready",
                                                              "node.kubernetes.io/unreachable"}
        (container,) = pod_spec["containers"]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
        assert container["command"] == ["python", "-m", "train"] and container["args"] == ["--steps", "100"]


def test_volcano_job() -> None:
    (job,) = gang_manifests(full(), GangFlavor.VOLCANO)
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["kind"] == "Job"
    assert job["metadata"]["labels"][RUN_LABEL] == "run-42"
    spec = job["spec"]
    assert spec["schedulerName"] == "volcano" and spec["queue"] == "gpu-team"
    assert spec["minAvailable"] == 3 and spec["maxRetry"] == 3 and spec["priorityClassName"] == "high"
    assert spec["policies"] == [{"event": "PodEvicted", "action": "RestartJob"},
                                {"event": "PodFailed", "action": "RestartJob"}]
    (task,) = spec["tasks"]
    assert task["name"] == "worker" and task["replicas"] == 4
    template = task["template"]
    assert template["metadata"]["labels"][RUN_LABEL] == "run-42"
    assert template["metadata"]["annotations"]["firedrill.dev/steps-total"] == "100"
    assert template["spec"]["restartPolicy"] == "Never"
    assert template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert volcano_job_pod_group_name("train", "0c1d") == "train-0c1d"


def test_volcano_plain_form() -> None:
    group, *members = gang_manifests(full(), GangFlavor.VOLCANO, VolcanoForm.PODGROUP)
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1" and group["kind"] == "PodGroup"
    assert group["spec"] == {"minMember": 3, "queue": "gpu-team", "minResources": {"nvidia.com/gpu": "24"},
                             "priorityClassName": "high"}
    assert len(members) == 4
    assert {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in members} == {"train"}


def test_kueue_pod_group() -> None:
    made = gang_manifests(minimal(queue="lq-gpu"), GangFlavor.KUEUE)
    assert len(made) == 4 and all(m["kind"] == "Pod" for m in made)
    for pod in made:
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "lq-gpu"
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] == "train"
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "4"


def test_kueue_refuses_a_partial_gang() -> None:
    with pytest.raises(FlavorError, match=r"min_member \(3\) must equal workers \(4\).*volcano or kai"):
        gang_manifests(minimal(min_member=3), GangFlavor.KUEUE)


def test_kueue_queues() -> None:
    rf, cq, lq = queue_manifests(GangFlavor.KUEUE, queue="lq-gpu", namespace="team-a", gpus=16)
    assert [m["kind"] for m in (rf, cq, lq)] == ["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    assert all(m["apiVersion"] == "kueue.x-k8s.io/v1beta2" for m in (rf, cq, lq))
    assert cq["spec"]["cohortName"] == "firedrill"
    (group,) = cq["spec"]["resourceGroups"]
    assert "nvidia.com/gpu" in group["coveredResources"]
    assert {"name": "nvidia.com/gpu", "nominalQuota": 16} in group["flavors"][0]["resources"]
    assert lq["metadata"] == {"name": "lq-gpu", "namespace": "team-a"}
    assert lq["spec"] == {"clusterQueue": cq["metadata"]["name"]}
    assert group["flavors"][0]["name"] == rf["metadata"]["name"]


def test_kai_gang_and_queue() -> None:
    group, *members = gang_manifests(minimal(queue="team-a"), GangFlavor.KAI)
    assert group["apiVersion"] == "scheduling.run.ai/v2alpha2" and group["spec"] == {"minMember": 4,
                                                                                     "queue": "team-a"}
    for pod in members:
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
        assert pod["metadata"]["annotations"]["pod-group-name"] == "train"
    parent, leaf = queue_manifests(GangFlavor.KAI, queue="team-a", namespace="x", gpus=8)
    assert parent["apiVersion"] == leaf["apiVersion"] == "scheduling.run.ai/v2"
    assert leaf["metadata"]["name"] == "team-a" and leaf["spec"]["parentQueue"] == parent["metadata"]["name"]
    assert leaf["spec"]["resources"]["gpu"]["quota"] == 8


@pytest.mark.parametrize(("flavor", "form"), FORMS, ids=FORM_IDS)
def test_scheduler_name_override(flavor: GangFlavor, form: VolcanoForm) -> None:
    made = gang_manifests(minimal(scheduler_name="my-sched"), flavor, form)
    if form is VolcanoForm.JOB and flavor is GangFlavor.VOLCANO:
        assert made[0]["spec"]["schedulerName"] == "my-sched"
    else:
        assert {p["spec"]["schedulerName"] for p in pods(made)} == {"my-sched"}


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, _, value in (term.partition("=") for term in selector.split(",")))


@pytest.mark.parametrize(("flavor", "form"), FORMS, ids=FORM_IDS)
def test_locate_finds_the_pods_and_the_group_object(flavor: GangFlavor, form: VolcanoForm) -> None:
    spec = minimal()
    made = gang_manifests(spec, flavor, form)
    where = locate(spec, flavor, form)
    assert where.namespace == "default" and where.flavor is flavor
    if flavor is GangFlavor.VOLCANO and form is VolcanoForm.JOB:
        pod_labels = [made[0]["spec"]["tasks"][0]["template"]["metadata"]["labels"]]
    else:
        pod_labels = [p["metadata"]["labels"] for p in pods(made)]
    assert pod_labels and all(selector_matches(where.pod_selector, labels) for labels in pod_labels)
    assert not selector_matches(where.pod_selector, {**pod_labels[0], GANG_LABEL: "other"})
    assert all(selector_matches(run_selector("run-42"), m["metadata"]["labels"]) for m in made)
    ref = where.group
    assert ref.name == "train" and ref.namespace == "default"
    assert ref.group in flavor_apis(flavor)
    if flavor is GangFlavor.KUEUE:  # Kueue names the Workload after the pod group
        assert (ref.group, ref.version, ref.plural, ref.kind) == ("kueue.x-k8s.io", "v1beta2", "workloads",
                                                                  "Workload")
        assert {p["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] for p in made} == {ref.name}
    else:
        group_object = made[0]
        assert group_object["apiVersion"] == f"{ref.group}/{ref.version}" and group_object["kind"] == ref.kind
        assert ref.plural == ref.kind.lower() + "s"
        assert ref.path == f"/apis/{ref.group}/{ref.version}/namespaces/default/{ref.plural}/train"


@pytest.mark.parametrize("flavor", list(GangFlavor))
def test_flavor_apis_name_the_versions_written(flavor: GangFlavor) -> None:
    apis = flavor_apis(flavor)
    made = gang_manifests(minimal(), flavor, VolcanoForm.PODGROUP) + gang_manifests(minimal(), flavor)
    made += queue_manifests(flavor, queue="q", namespace="default", gpus=1)
    written = {m["apiVersion"].rpartition("/")[::2] for m in made if m["apiVersion"] != "v1"}
    assert written == {(group, version) for group, versions in apis.items() for version in versions}


@pytest.mark.parametrize(("overrides", "message"), [
    ({"name": "Train"}, "must be a DNS-1123 label"),
    ({"name": "x" * 60}, "too long.*use at most 54 characters"),
    ({"namespace": "team_a"}, "namespace 'team_a'"),
    ({"run_id": ""}, "run_id"),
    ({"run_id": "run 1"}, "run_id"),
    ({"workers": 0}, "at least 1"),
    ({"gpus_per_worker": -1}, "gpus_per_worker"),
    ({"min_member": 5}, r"between 1 and workers \(4\)"),
    ({"min_member": 0}, "min_member is 0"),
    ({"image": ""}, "image is empty"),
    ({"queue": ""}, "queue is empty"),
    ({"labels": {RUN_LABEL: "x"}}, "set by Firedrill"),
    ({"labels": {"app": "a b"}}, "not a valid label value"),
    ({"labels": {"/app": "a"}}, "not a valid key"),
    ({"annotations": {"firedrill.dev/steps-total": 100}}, "values must be strings"),
    ({"node_selector": {"bad key!": "x"}}, "not a valid key"),
    ({"gpu_resource": "nvidia.com/"}, "gpu_resource"),
])
def test_spec_errors_name_the_gang_and_the_fix(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(FlavorError, match=message) as caught:
        minimal(**overrides)
    assert "cannot be written" in str(caught.value)


def test_spec_is_immutable_and_defaults_min_member() -> None:
    spec = minimal(labels={"app": "x"})
    assert spec.min_member == 4 == spec.min_available
    with pytest.raises(TypeError):
        spec.labels["app"] = "y"  # type: ignore[index]
    made = gang_manifests(spec, GangFlavor.KAI)
    made[1]["metadata"]["labels"]["app"] = "changed"  # manifests are fresh dicts, never views of the spec
    assert spec.labels["app"] == "x" and gang_manifests(spec, GangFlavor.KAI)[2]["metadata"]["labels"]["app"] == "x"


def test_mig_resource() -> None:
    made = gang_manifests(minimal(gpu_resource="nvidia.com/mig-1g.10gb", gpus_per_worker=1), GangFlavor.KAI)
    assert pods(made)[0]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
