"""Issue 32: what a scenario needs from its target, read from its sentences: whether it can run there at all, and
the permissions it needs (``firedrill rbac``, and the run's access pre-flight)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from drills.bdd.features import load_features
from drills.bdd.rbac import needed, render
from drills.cli import app
from drills.errors import FiredrillError
from drills.kube.flavors import GangFlavor
from drills.scenario import needs
from drills.target.access import CLUSTER, Permission, Subject, access_review, merged, role_manifests
from drills.target.profile import FaultMethod, FaultSettings, load_profile, reference_profile

REPO = Path(__file__).resolve().parents[3]
FEATURES = load_features(REPO / "features")
runner = CliRunner()


def profile_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": "acceptance", "flavor": "native", "namespace": "firedrill", "queue": "default",
                           "canary_image": "registry.example.com/firedrill-canary:0.1.0",
                           "fault": {"method": "command", "command_template": "power-off {node}"},
                           "canary": {"shared_volume": {"nfs": {"server": "nfs.example", "path": "/firedrill"}}}}
    doc.update(changes)
    return doc


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(profile_doc()))
    return path


def scenario(name: str) -> needs.ScenarioNeeds:
    (found,) = [sc for f in FEATURES for sc in f.scenarios if sc.name.startswith(name)]
    return needs.needs_of(found.steps)


def test_a_scenario_names_its_drill_kinds_and_faults() -> None:
    pull = scenario("A training job survives losing the node")
    assert [k.kind for k in pull.kinds] == ["node-pull"] and pull.methods == (None,)
    partition = scenario("A partitioned node's old rank is fenced")
    assert partition.methods == (FaultMethod.PARTITION,)
    gang = scenario("A gang that fits is placed whole")
    assert [k.kind for k in gang.kinds] == ["gang-submission"] and gang.methods == ()


def test_every_shipped_scenario_runs_on_the_reference_platform() -> None:
    for f in FEATURES:
        for sc in f.scenarios:
            assert needs.problems(needs.needs_of(sc.steps), reference_profile(), reference=True) == [], sc.name


def test_on_a_cluster_what_cannot_run_says_why_and_what_to_set(profile_file: Path) -> None:
    profile = load_profile(profile_file)
    assert needs.problems(scenario("A training job survives losing the node"), profile, reference=False) == []
    (why,) = needs.problems(scenario("A partitioned node's old rank is fenced"), profile, reference=False)
    assert "with partition" in why and "set fault.stand_ins.partition" in why
    # the leak drill's canary runs as any training job (a batch/v1 Indexed Job here); its report source is asked
    # when the scenario starts, before anything is injected
    assert needs.problems(scenario("The leak report names the data pipeline hole"), profile, reference=False) == []
    # the partitioned node's sentence picks a node of the cluster that advertises its layout, when it runs
    assert needs.problems(scenario("Filling a partitioned GPU beyond its slices"), profile, reference=False) == []
    (gov,) = needs.problems(scenario("Access: a tenant stays in its namespace"), profile, reference=False)
    assert "governance.tenant_kubeconfig" in gov
    no_storage = dataclasses.replace(profile, canary=dataclasses.replace(profile.canary, shared_volume=None))
    assert any("canary.shared_volume" in p for p in needs.problems(scenario("A gang that fits is placed whole"),
                                                                    no_storage, reference=False))
    kai = dataclasses.replace(profile, flavor=GangFlavor.KAI)
    assert any("flavor kai has no training job" in p
               for p in needs.problems(scenario("A training job survives"), kai, reference=False))
    mapped = dataclasses.replace(profile, fault=FaultSettings(FaultMethod.COMMAND, "power-off {node}",
                                                              stand_ins=((FaultMethod.PARTITION,
                                                                          FaultMethod.KUBELET_STOP),)))
    assert needs.problems(scenario("A partitioned node's old rank is fenced"), mapped, reference=False) == []


def test_the_dry_run_flags_each_scenario_that_cannot_run_on_the_cluster(profile_file: Path) -> None:
    result = runner.invoke(app, ["run", "--dry-run", "--kubeconfig", "/nonexistent", "--profile", str(profile_file),
                                 "--features", str(REPO / "features")])
    assert result.exit_code == 3, result.output
    assert "WOULD BE INCONCLUSIVE here: the scenario pulls a node with partition" in result.output
    assert "can run on this target;" in result.output
    embedded = runner.invoke(app, ["run", "--dry-run", "--features", str(REPO / "features")])
    assert embedded.exit_code == 0 and "WOULD BE INCONCLUSIVE" not in embedded.output, embedded.output


def rules_of(manifests: list[dict[str, Any]], kind: str, namespace: str | None = None) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m in manifests:
        if m["kind"] == kind and m["metadata"].get("namespace") == namespace:
            for rule in m["rules"]:
                for resource in rule["resources"]:
                    out.setdefault(f"{resource}.{rule['apiGroups'][0]}".rstrip("."), set()).update(rule["verbs"])
    return out


def test_the_role_follows_flavor_and_fault_method(profile_file: Path) -> None:
    profile = load_profile(profile_file)
    subject = Subject("firedrill", "firedrill")
    native = role_manifests(needed(FEATURES, profile), subject)
    role = rules_of(native, "Role", "firedrill")
    assert role["jobs.batch"] == {"create", "delete", "patch"}  # patch: the hang drill writes its threshold
    assert role["workloads.scheduling.k8s.io"] == role["podgroups.scheduling.k8s.io"] == {"create", "delete"}
    assert {"create", "patch", "delete"} <= role["pods"] and role["pods/log"] == {"get"}
    cluster = rules_of(native, "ClusterRole")
    assert cluster["pods"] == {"list"} and {"get", "list", "watch"} <= cluster["nodes"]
    assert "delete" not in cluster["nodes"] and not rules_of(native, "Role", "kube-system")
    assert "jobs.batch.volcano.sh" not in role  # the leak drill cannot run here
    assert cluster["leakreport.firedrill.dev"] == {"list"}  # the run's own leak report, from the API server's path

    volcano = role_manifests(needed(FEATURES, dataclasses.replace(profile, flavor=GangFlavor.VOLCANO)), subject)
    assert rules_of(volcano, "Role", "firedrill")["jobs.batch.volcano.sh"] == {"create", "delete", "patch"}
    assert rules_of(volcano, "Role", "firedrill")["pods"] >= {"create"}  # now the leak drill fills nodes too
    url = dataclasses.replace(profile, leak_report=dataclasses.replace(profile.leak_report,
                                                                        url="https://leaks.example/report"))
    assert "leakreport.firedrill.dev" not in rules_of(role_manifests(needed(FEATURES, url), subject), "ClusterRole")

    stop = dataclasses.replace(profile, fault=FaultSettings(FaultMethod.KUBELET_STOP))
    assert rules_of(role_manifests(needed(FEATURES, stop), subject), "Role", "kube-system")["pods"] == {
        "create", "delete", "get"}
    delete = dataclasses.replace(profile, fault=FaultSettings(FaultMethod.DELETE_NODE))
    assert {"create", "delete"} <= rules_of(role_manifests(needed(FEATURES, delete), subject), "ClusterRole")["nodes"]


def test_a_cluster_wide_grant_covers_the_namespaces_and_reasons_are_kept() -> None:
    kept = merged([Permission("ns", "", "pods", "list", why="a"), Permission(CLUSTER, "", "pods", "list", why="b"),
                   Permission("ns", "", "pods", "get", why="c"), Permission("ns", "", "pods", "get", why="d")])
    assert [(p.namespace, p.verb, p.why) for p in kept] == [("", "list", "b"), ("ns", "get", "c; d")]


def test_every_permission_is_granted_by_the_printed_objects_and_nothing_else(profile_file: Path) -> None:
    wanted = needed(FEATURES, load_profile(profile_file))
    manifests = role_manifests(wanted, Subject("firedrill", "firedrill"))
    granted = {(m["metadata"].get("namespace", ""), group, resource, verb)
               for m in manifests if "rules" in m for rule in m["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted == {(p.namespace, p.group, p.resource_name, p.verb) for p in wanted}
    bindings = [m for m in manifests if m["kind"].endswith("Binding")]
    assert bindings and all(b["subjects"] == [{"kind": "ServiceAccount", "name": "firedrill",
                                               "namespace": "firedrill"}] for b in bindings)


def test_the_access_review_asks_what_kubectl_auth_can_i_asks() -> None:
    log = Permission("firedrill", "", "pods", "get", "log", "why")
    assert access_review(log)["spec"]["resourceAttributes"] == {"verb": "get", "group": "", "resource": "pods",
                                                                "subresource": "log", "namespace": "firedrill"}
    assert log.can_i() == "kubectl auth can-i get pods/log -n firedrill"
    nodes = Permission(CLUSTER, "", "nodes", "list")
    assert "namespace" not in access_review(nodes)["spec"]["resourceAttributes"]
    assert nodes.can_i() == "kubectl auth can-i list nodes --all-namespaces"


@pytest.mark.parametrize(("text", "expected"), [("serviceaccount:ops:runner", Subject("runner", "ops")),
                                                ("user:alice", Subject("alice")), ("ops:runner", Subject("runner", "ops"))])
def test_subjects(text: str, expected: Subject) -> None:
    assert Subject.parse(text) == expected


def test_a_bad_subject_says_how_to_write_one() -> None:
    with pytest.raises(FiredrillError, match="write serviceaccount:NAMESPACE:NAME or user:NAME"):
        Subject.parse("alice")


def test_firedrill_rbac_prints_applicable_yaml(profile_file: Path) -> None:
    result = runner.invoke(app, ["rbac", "--profile", str(profile_file), "--features", str(REPO / "features"),
                                 "--subject", "user:acceptance"])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.output) if d]
    assert [d["kind"] for d in docs] == ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Role",
                                         "RoleBinding"]
    assert docs[1]["subjects"] == [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "acceptance"}]
    assert "# Least-privilege RBAC for Firedrill" in result.output and "pods/log in firedrill (get)" in result.output
    assert render(needed(FEATURES, load_profile(profile_file)), Subject("u"), source="x").startswith("# Least")


def test_firedrill_rbac_refuses_a_bad_profile(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(profile_doc(flavor="slurm")))
    result = runner.invoke(app, ["rbac", "--profile", str(bad)])
    assert result.exit_code == 2 and "flavor: 'slurm' is not allowed" in result.output
