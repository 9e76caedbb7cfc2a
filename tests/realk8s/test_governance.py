"""The governance feature against the upstream control plane (issue 15: "on a real cluster the same drill runs
with the profile's tenant credentials; a chain the cluster has no gate for is FAIL, not skipped").

The module starts its own cluster (``governed``): the session's shared one has no audit log and no limited
priority class, and these flags are not added to it so the other realk8s tests keep the API server they were
written against. What this cluster has beyond the fixture's:

- kube-apiserver ``--audit-log-path WORK/audit.log`` with ``--audit-policy-file`` (audit.k8s.io/v1 Policy:
  ``Metadata`` for every request, stage ``RequestReceived`` omitted, so one ``ResponseComplete`` line per
  request, refused reads included) and ``--admission-control-config-file`` whose ResourceQuotaConfiguration
  lists ``limitedResources`` pods with scope ``PriorityClass In [firedrill-critical]`` (upstream's "limit
  priority class consumption by default": a pod of that class is admitted only in a namespace with a
  ResourceQuota covering that scope);
- static tokens for ``tenant-a`` and ``tenant-b``, each bound (RoleBinding) to upstream's ``edit`` ClusterRole
  in its own namespace (``firedrill-tenant``, ``firedrill-neighbour``); ``edit`` lets a namespace user create
  ``pods/eviction`` in its namespace, so the change-control chain's eviction of a pod of ANOTHER namespace
  (the profile's ``firedrill``) is still refused;
- ResourceQuota ``gpu-quota`` (``requests.nvidia.com/gpu: 4``) in the tenant's namespace; PriorityClasses
  ``firedrill-critical`` (limited) and ``firedrill-ungated`` (as high, not limited);
- two refplatform agents as kubelets (2 simulated GPUs each, ``system:node:<name>`` tokens, node group
  ``governance``: the profile's allow label), and a kubeconfig of one node's identity.

``firedrill run --profile`` then runs the shipped feature with the admin's kubeconfig and a profile whose
``governance`` section names the tenant's and the node's kubeconfigs and the audit log: every chain PASSes,
and each record digest in the evidence is the SHA-256 of a line of the real audit log.  One upstream answer
differs from the embedded platform's: kube-apiserver refuses a pod of the limited class with HTTP 500
("insufficient quota to match these scopes", the ResourceQuota plugin's plain error), not 403; the drill
counts that 500, by its message, as the gate's refusal (before it did, the chain was INCONCLUSIVE).

The negatives (a chain the cluster has no gate for is FAIL): the priority scenario on a second API server
started without the admission configuration (``firedrill-critical`` is limited by nothing), and on this
cluster with ``restricted_priority_class: firedrill-ungated`` (a class no ``limitedResources`` entry lists).
The module takes about 45 s on 2 cores.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.realk8s.agents import RefAgents
from tests.realk8s.cluster import Component, RealCluster, RealClusterSpec, StaticUser, write_kubeconfig
from tests.realk8s.conftest import (DEFAULT_NOT_READY_TOLERATION_S, DEFAULT_UNREACHABLE_TOLERATION_S,
                                    NODE_MONITOR_GRACE_PERIOD_S, NODE_MONITOR_PERIOD_S)
from tests.realk8s.firedrill import firedrill_run
from tests.realk8s.standin import api_client, node_user, wait_for
from tests.realk8s.test_control_plane import kubectl

pytestmark = [pytest.mark.realk8s, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
FEATURE = REPO / "features" / "governance.feature"
NODES = ("gov-node-0", "gov-node-1")
NODE_GROUP = "governance"
TENANT, NEIGHBOUR = StaticUser("tenant-a"), StaticUser("tenant-b")
TENANT_NS, NEIGHBOUR_NS, DRILL_NS = "firedrill-tenant", "firedrill-neighbour", "firedrill"
LIMITED_CLASS, UNGATED_CLASS = "firedrill-critical", "firedrill-ungated"
GPU_QUOTA = 4
RUN_TIMEOUT_S = 240

AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata"}]}
ADMISSION_CONFIG = {
    "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
    "plugins": [{"name": "ResourceQuota", "configuration": {
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "ResourceQuotaConfiguration",
        "limitedResources": [{"resource": "pods", "matchScopes": [
            {"scopeName": "PriorityClass", "operator": "In", "values": [LIMITED_CLASS]}]}]}}]}

SETUP = [
    *({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in (DRILL_NS, TENANT_NS, NEIGHBOUR_NS)),
    {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-quota", "namespace": TENANT_NS},
     "spec": {"hard": {"requests.nvidia.com/gpu": str(GPU_QUOTA)}}},
    *({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
       "metadata": {"name": f"{user.name}-edit", "namespace": ns},
       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
       "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user.name}]}
      for user, ns in ((TENANT, TENANT_NS), (NEIGHBOUR, NEIGHBOUR_NS))),
    *({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": 1_000_000,
       "description": "Firedrill governance test: a class tenants may not use"}
      for name in (LIMITED_CLASS, UNGATED_CLASS)),
]


@dataclass
class Governed:
    cluster: RealCluster
    agents: RefAgents
    work: Path
    audit_log: Path
    tenant_kubeconfig: Path
    node_kubeconfig: Path

    def profile(self, path: Path, restricted_class: str = LIMITED_CLASS) -> Path:
        doc = {
            "apiVersion": "firedrill.dev/v1alpha1", "kind": "TargetProfile", "name": "realk8s-governance",
            "flavor": "native", "namespace": DRILL_NS, "queue": "default", "canary_image": "firedrill-canary:0",
            "fault": {"method": "kubelet-stop", "timeout_seconds": 90},
            "safety": {"allow_label": f"firedrill.dev/node-group={NODE_GROUP}", "max_nodes": 1,
                       "max_gpu_share": 0.5},
            "governance": {"tenant_kubeconfig": str(self.tenant_kubeconfig), "tenant_namespace": TENANT_NS,
                           "other_namespace": NEIGHBOUR_NS, "restricted_priority_class": restricted_class,
                           "node_kubeconfig": str(self.node_kubeconfig), "node_name": NODES[0],
                           "audit_log": str(self.audit_log), "record_wait_seconds": 10},
        }
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path


def _write_yaml(path: Path, doc: Any) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def settle_tenants(cluster: RealCluster, agents: RefAgents, namespaces: Sequence[str], nodes: Sequence[str],
                   node_of: str, work: Path) -> tuple[Path, Path]:
    """Wait until the tenants' setup took effect (each namespace's ``default`` ServiceAccount, which pods are
    admitted only with; the tenant's quota status; every node in ``nodes`` Ready), then write the tenant's
    kubeconfig and node ``node_of``'s: (tenant, node)."""
    api = api_client(cluster.url, cluster.ca_file, cluster.admin_token)
    try:
        core = client.CoreV1Api(api)
        for ns in namespaces:
            wait_for(lambda ns=ns: any(sa.metadata.name == "default"
                                       for sa in core.list_namespaced_service_account(ns).items),
                     30, f"the service-account controller to create {ns}/default")
        wait_for(lambda: (core.read_namespaced_resource_quota("gpu-quota", TENANT_NS).status.hard or None),
                 30, "the quota controller to fill in gpu-quota's status")
    finally:
        api.close()
    for name in nodes:
        agents.wait_ready(name)
    tenant = write_kubeconfig(work / "tenant-a.kubeconfig", cluster.url, cluster.ca_file, TENANT.name,
                              cluster.tokens[TENANT.name])
    node_name = node_user(node_of).name
    node = write_kubeconfig(work / f"node-{node_of}.kubeconfig", cluster.url, cluster.ca_file, node_name,
                            cluster.tokens[node_name])
    return tenant, node


def start_governed(bin_dir: Path, work: Path, *, limit_class: bool = True, nodes: tuple[str, ...] = NODES,
                   node_monitor_grace_period: float = NODE_MONITOR_GRACE_PERIOD_S,
                   controller_manager_args: tuple[str, ...] = ()) -> Governed:
    """A control plane with the audit log, the tenants, their RBAC, the quota and the classes; ``limit_class``
    False starts kube-apiserver without the admission configuration (no class is limited); ``nodes``: the
    refplatform agents to start as kubelets (the node kubeconfig is the first one's); ``node_monitor_grace_period`` and
    ``controller_manager_args`` as :func:`tests.realk8s.test_native_gang.start_gang_cluster` takes them."""
    work.mkdir(parents=True, exist_ok=True)
    audit_log = work / "audit.log"
    apiserver = [f"--audit-log-path={audit_log}",
                 f"--audit-policy-file={_write_yaml(work / 'audit-policy.yaml', AUDIT_POLICY)}"]
    if limit_class:
        apiserver.append(f"--admission-control-config-file={_write_yaml(work / 'admission.yaml', ADMISSION_CONFIG)}")
    cluster = RealCluster(RealClusterSpec(
        bin_dir=bin_dir, work_dir=work / "cluster", node_monitor_grace_period=node_monitor_grace_period,
        node_monitor_period=NODE_MONITOR_PERIOD_S,
        default_unreachable_toleration_seconds=DEFAULT_UNREACHABLE_TOLERATION_S,
        default_not_ready_toleration_seconds=DEFAULT_NOT_READY_TOLERATION_S,
        extra_users=(TENANT, NEIGHBOUR, *(node_user(n) for n in NODES)),
        extra_args={Component.APISERVER: tuple(apiserver), Component.CONTROLLER_MANAGER: controller_manager_args}))
    cluster.start()
    agents = RefAgents(cluster, work / "agents", gpus=2)
    try:
        for name in nodes:
            agents.start(name, wait_ready=False, extra=("--node-group", NODE_GROUP))
        kubectl(cluster.admin_kubeconfig, "apply", "-f", "-",
                stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": SETUP}))
        tenant, node = settle_tenants(cluster, agents, (DRILL_NS, TENANT_NS, NEIGHBOUR_NS), nodes, NODES[0], work)
        _wait_edit_aggregated(tenant)
    except BaseException:
        agents.close()
        cluster.stop()
        raise
    return Governed(cluster, agents, work, audit_log, tenant, node)


@pytest.fixture(scope="module")
def governed(realk8s_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Governed]:
    made = start_governed(realk8s_bin_dir, tmp_path_factory.mktemp("governance"))
    try:
        yield made
    finally:
        made.agents.close()
        made.cluster.stop()


def _wait_edit_aggregated(tenant: Path, deadline_s: float = 60.0) -> None:
    """``edit`` is an aggregated ClusterRole: kube-controller-manager's clusterrole-aggregation controller fills
    its rules from ``system:aggregate-to-edit`` some time after the control plane starts (seconds on a loaded
    machine). Wait for that, with a deadline, before asking what the tenant may do."""
    end = time.monotonic() + deadline_s
    while True:
        answer = kubectl(tenant, "auth", "can-i", "create", "pods", "--subresource=eviction", "-n", TENANT_NS,
                         check=False).stdout.strip()
        if answer == "yes":
            return
        if time.monotonic() >= end:
            raise AssertionError(f"the edit ClusterRole was not aggregated within {deadline_s:g} s of the control "
                                 f"plane's start (the tenant may not evict in {TENANT_NS}: {answer!r})")
        time.sleep(0.5)


def _features(work: Path, only: str | None = None) -> Path:
    """A copy of the shipped feature (``only``: just the scenario whose title starts with it)."""
    features = work / "features"
    features.mkdir(parents=True)
    text = FEATURE.read_text()
    if only is not None:
        head, *scenarios = text.split("\n  @clause:")
        text = head + "".join("\n  @clause:" + s for s in scenarios if f"Scenario: {only}" in s)
        assert f"Scenario: {only}" in text
    (features / FEATURE.name).write_text(text)
    return features


def _audit_digests(audit_log: Path) -> set[str]:
    return {hashlib.sha256(line.rstrip(b"\r")).hexdigest() for line in audit_log.read_bytes().split(b"\n") if line}


def _chains(scenarios: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per chain, what its scenarios add up to (the quota chain has two: one request, then several at once): the
    worst verdict, the findings, the attempts, and the tally's records."""
    out: dict[str, dict[str, Any]] = {}
    for scenario in scenarios:
        details = scenario["details"]["governance"]
        for chain, tally in details.get("chains", {}).items():
            mine = [a for a in details["attempts"] if a["chain"] == chain]
            if chain not in out:
                out[chain] = {"verdict": scenario["verdict"], "findings": list(scenario["findings"]),
                              "attempts": mine, "tally": {"recorded": tally["recorded"],
                                                          "records_sha256": list(tally["records_sha256"])}}
                continue
            c = out[chain]
            c["verdict"] = c["verdict"] if scenario["verdict"] == "PASS" else scenario["verdict"]
            c["findings"] += scenario["findings"]
            c["attempts"] += mine
            c["tally"]["recorded"] += tally["recorded"]
            c["tally"]["records_sha256"] += tally["records_sha256"]
    return out


def test_the_governance_feature_passes_on_the_upstream_control_plane(governed: Governed, tmp_path: Path) -> None:
    # What the tenant may do, asked of the real authorizer: edit in its namespace includes evictions there.
    tenant = governed.tenant_kubeconfig

    def can(verb: str, resource: str, namespace: str, subresource: str) -> str:
        return kubectl(tenant, "auth", "can-i", verb, resource, f"--subresource={subresource}", "-n", namespace,
                       check=False).stdout.strip()
    assert can("create", "pods", TENANT_NS, "eviction") == "yes"
    assert can("create", "pods", DRILL_NS, "eviction") == "no"
    assert can("create", "pods", TENANT_NS, "binding") == "no"

    proc, scenarios = firedrill_run(governed.cluster.admin_kubeconfig, governed.profile(tmp_path / "profile.yaml"),
                                    _features(tmp_path), tmp_path / "reports", timeout=RUN_TIMEOUT_S)
    chains = _chains(scenarios)
    verdicts = {chain: c["verdict"] for chain, c in chains.items()}
    assert verdicts == {"admission-and-quota": "PASS", "access": "PASS", "priority": "PASS",
                        "change-control": "PASS"}, json.dumps({k: c["findings"] for k, c in chains.items()}, indent=1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {k: c["tally"]["recorded"] for k, c in chains.items()} == {
        "admission-and-quota": 3, "access": 4, "priority": 2, "change-control": 3}

    # Each digest in the evidence is the SHA-256 of a line of kube-apiserver's own audit log.
    lines = _audit_digests(governed.audit_log)
    records = [a["record"] for c in chains.values() for a in c["attempts"]]
    assert len(records) == 12 and all(r["sha256"] in lines for r in records), records
    for c in chains.values():
        assert set(c["tally"]["records_sha256"]) <= lines
    limited = next(a for a in chains["priority"]["attempts"] if LIMITED_CLASS in a["action"])
    assert limited["answer"].startswith("HTTP 500") and limited["record"]["code"] == 500, limited
    by_user = {r["user"] for r in records}
    # The tenant's refusals, the node's, and the controllers' (the job's pod refused by quota; the scheduler
    # holding the tenant's pod) are each recorded under the identity the API server knows.
    assert {TENANT.name, node_user(NODES[0]).name, "system:kube-scheduler"} <= by_user, by_user
    assert any(u.startswith("system:serviceaccount:kube-system:job-controller") for u in by_user), by_user


def _priority_fails_naming(scenarios: list[dict[str, Any]], cls: str) -> None:
    (scenario,) = scenarios
    assert scenario["verdict"] == "FAIL", scenario["findings"]
    let_through = [f for f in scenario["findings"] if f.startswith("priority: the gate let it through")]
    assert len(let_through) == 1 and f"of PriorityClass {cls}" in let_through[0], scenario["findings"]
    assert "admitted at priority 1000000" in let_through[0], let_through


def test_without_the_limited_priority_configuration_the_priority_chain_fails(realk8s_bin_dir: Path,
                                                                             tmp_path: Path) -> None:
    """The same cluster, its kube-apiserver started without --admission-control-config-file: nothing limits
    firedrill-critical, so the chain has no gate and FAILs, never skipped.  No agents: the preemption step is
    INCONCLUSIVE (no node with a free GPU), which does not soften the FAIL."""
    made = start_governed(realk8s_bin_dir, tmp_path / "cluster", limit_class=False, nodes=())
    try:
        proc, scenarios = firedrill_run(made.cluster.admin_kubeconfig, made.profile(tmp_path / "profile.yaml"),
                                        _features(tmp_path, only="Priority"), tmp_path / "reports",
                                        timeout=RUN_TIMEOUT_S)
        left = kubectl(made.cluster.admin_kubeconfig, "-n", TENANT_NS, "get", "pods", "-o", "name").stdout.strip()
    finally:
        made.agents.close()
        made.cluster.stop()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _priority_fails_naming(scenarios, LIMITED_CLASS)
    assert any("no eligible node has a free" in f for f in scenarios[0]["findings"]), scenarios[0]["findings"]
    assert left == "", f"the drill's rollback left {left}"


def test_a_priority_class_the_cluster_does_not_limit_fails_the_priority_chain(governed: Governed,
                                                                              tmp_path: Path) -> None:
    """On the configured cluster, a class its limitedResources does not list (firedrill-ungated) is no gate
    either: the same FAIL."""
    proc, scenarios = firedrill_run(
        governed.cluster.admin_kubeconfig, governed.profile(tmp_path / "profile.yaml", UNGATED_CLASS),
        _features(tmp_path, only="Priority"), tmp_path / "reports", timeout=RUN_TIMEOUT_S)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    _priority_fails_naming(scenarios, UNGATED_CLASS)
    left = kubectl(governed.cluster.admin_kubeconfig, "-n", TENANT_NS, "get", "pods", "-o", "name")
    assert left.stdout.strip() == "", f"the drill's rollback left {left.stdout}"


def test_the_audit_log_is_upstream_s(governed: Governed) -> None:
    """Every line is an audit.k8s.io/v1 Event at level Metadata, one per request (RequestReceived omitted)."""
    events = [json.loads(line) for line in governed.audit_log.read_text().splitlines() if line]
    assert events
    assert {(e["apiVersion"], e["kind"], e["level"]) for e in events} == {("audit.k8s.io/v1", "Event", "Metadata")}
    assert {e["stage"] for e in events} <= {"ResponseComplete", "ResponseStarted", "Panic"}
