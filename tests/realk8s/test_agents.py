"""refplatform node agents as the kubelets of the real control plane (issue 13, item 2).

The same ``python -m refplatform.agent`` processes ``firedrill up`` starts, each with its node's own
identity (``system:node:<name>``, so the Node authorizer and NodeRestriction limit it like a kubelet):
they register GPU Nodes that the real node lifecycle controller keeps Ready, run what the real
kube-scheduler binds to them as processes (the training canary), report pod status, serve their logs
over TLS to kube-apiserver's log proxy (``kubectl logs``), fill the service-account volume kube-apiserver
adds to every pod, and, when SIGKILLed with their pods, are declared unreachable by the real controllers,
which evict their pods.

Run: ``python -m pytest tests/realk8s -m realk8s -p no:cacheprovider``.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.realk8s.agents import RefAgents
from tests.realk8s.cluster import RealCluster
from tests.realk8s.conftest import NODE_MONITOR_GRACE_PERIOD_S
from tests.realk8s.standin import NODE_LEASE_NAMESPACE, api_client, parse_time, wait_for
from tests.realk8s.test_control_plane import (LIFECYCLE_MARGIN_S, UNREACHABLE, kubectl,
                                              namespace_with_default_service_account, node_json, ready_condition,
                                              taints)

pytestmark = pytest.mark.realk8s

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def admin(real_cluster: RealCluster) -> Iterator[client.ApiClient]:
    api = api_client(real_cluster.url, real_cluster.ca_file, real_cluster.admin_token)
    yield api
    api.close()


@pytest.fixture(scope="module")
def namespace(admin: client.ApiClient) -> str:
    name = "realk8s-agents"
    namespace_with_default_service_account(admin, name)
    return name


def pod_json(admin: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = admin.sanitize_for_serialization(client.CoreV1Api(admin).read_namespaced_pod(name, namespace))
    return pod


def canary_pod(name: str, *, steps: int, gpus: int = 4, node: str | None = None) -> dict[str, Any]:
    """A world-1 training canary (``docs/WORKLOAD.md``) as a plain pod, as a user writes it."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "canary", "image": "firedrill-canary:test", "command": ["firedrill-canary"],
                        "args": ["train", "--steps-total", str(steps), "--compute-seconds", "0.05"],
                        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create(real_cluster: RealCluster, namespace: str, doc: dict[str, Any]) -> None:
    kubectl(real_cluster.admin_kubeconfig, "-n", namespace, "create", "-f", "-", stdin=json.dumps(doc))


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_agents_register_gpu_nodes_renew_leases_and_stay_ready_under_the_real_lifecycle_controller(
        real_cluster: RealCluster, ref_agents: RefAgents, admin: client.ApiClient) -> None:
    agent = ref_agents.start("refagent-0")
    state = agent.state()
    node = node_json(admin, "refagent-0")
    status, labels = node["status"], node["metadata"]["labels"]
    assert status["capacity"]["nvidia.com/gpu"] == "8" and status["allocatable"]["nvidia.com/gpu"] == "8"
    assert labels["nvidia.com/gpu.count"] == "8" and labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["kubernetes.io/hostname"] == "refagent-0"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == state["logPort"]
    assert state["logScheme"] == "https"
    assert node["spec"]["podCIDR"] == state["podCIDR"] == "127.30.0.0/24"

    coordination = client.CoordinationV1Api(admin)
    first = coordination.read_namespaced_lease("refagent-0", NODE_LEASE_NAMESPACE)
    assert first.spec.holder_identity == "refagent-0"
    assert first.metadata.owner_references[0].uid == node["metadata"]["uid"]
    # Past the grace period: the node lifecycle controller, reading the renewed Lease, keeps it Ready.
    time.sleep(NODE_MONITOR_GRACE_PERIOD_S + 2)
    later = coordination.read_namespaced_lease("refagent-0", NODE_LEASE_NAMESPACE)
    assert later.spec.renew_time > first.spec.renew_time
    condition = ready_condition(node_json(admin, "refagent-0"))
    assert (condition["status"], condition["reason"]) == ("True", "KubeletReady")
    assert taints(node_json(admin, "refagent-0")) == set()
    registered = client.CoreV1Api(admin).list_namespaced_event(
        "default", field_selector="involvedObject.name=refagent-0,reason=RegisteredNode").items
    assert registered and registered[0].source.component == "node-controller"


def test_a_canary_pod_is_scheduled_runs_as_a_process_and_kubectl_logs_reads_it_through_the_api_server(
        real_cluster: RealCluster, ref_agents: RefAgents, admin: client.ApiClient, namespace: str) -> None:
    agents = {name: ref_agents.start(name) for name in ("refagent-0", "refagent-1")}
    kubeconfig = real_cluster.admin_kubeconfig
    create(real_cluster, namespace, canary_pod("canary", steps=60))
    phases: list[str] = []

    def running() -> dict[str, Any] | None:
        pod = pod_json(admin, namespace, "canary")
        phases.append(pod["status"].get("phase", ""))
        return pod if pod["status"].get("phase") == "Running" else None
    pod = wait_for(running, 60, "the canary pod to run", interval=0.1)
    node = pod["spec"]["nodeName"]
    assert node in agents, f"bound to {node}, not to an agent node"
    assert phases[0] == "Pending"
    pod_ip = ipaddress.ip_address(pod["status"]["podIP"])
    assert pod_ip in ipaddress.ip_network(node_json(admin, node)["spec"]["podCIDR"])
    assert pod["status"]["hostIP"] == "127.0.0.1"
    statuses = pod["status"]["containerStatuses"]
    assert statuses[0]["name"] == "canary" and "running" in statuses[0]["state"]
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"

    # kubectl logs -f through kube-apiserver's proxy to the agent (TLS both ways) until the container ends.
    followed = kubectl(kubeconfig, "-n", namespace, "logs", "-f", "canary").stdout
    lines = json_lines(followed)
    assert lines[0]["event"] == "start" and lines[-1]["event"] == "exit" and lines[-1]["code"] == 0
    assert [line["step"] for line in lines if line["event"] == "step"] == list(range(1, 61))

    def succeeded() -> dict[str, Any] | None:
        pod = pod_json(admin, namespace, "canary")
        return pod if pod["status"].get("phase") == "Succeeded" else None
    done = wait_for(succeeded, 30, "the canary pod to succeed")
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    conditions = {c["type"]: (c["status"], c.get("reason")) for c in done["status"]["conditions"]}
    assert conditions["Ready"] == ("False", "PodCompleted")
    assert done["status"]["podIP"] == str(pod_ip)
    # The agent's claims (published right after the final status), which a node may only write through
    # pods/status on a real cluster.
    wait_for(lambda: (pod_json(admin, namespace, "canary")["metadata"].get("annotations") or {})
             .get("firedrill.dev/step") == "60", 10, "the agent's final firedrill.dev/step claim")

    assert json_lines(kubectl(kubeconfig, "-n", namespace, "logs", "canary", "--tail=1").stdout) == [lines[-1]]
    stamped = kubectl(kubeconfig, "-n", namespace, "logs", "canary", "--tail=2", "--timestamps").stdout.splitlines()
    assert len(stamped) == 2 and all(parse_time(s.split(" ", 1)[0]) <= time.time() for s in stamped)
    assert json.loads(stamped[-1].split(" ", 1)[1]) == lines[-1]
    assert len(json_lines(kubectl(kubeconfig, "-n", namespace, "logs", "canary", "--since=1h").stdout)) == len(lines)
    limited = kubectl(kubeconfig, "-n", namespace, "logs", "canary", "--limit-bytes=20").stdout
    assert limited == followed[:20]
    previous = kubectl(kubeconfig, "-n", namespace, "logs", "canary", "--previous", check=False)
    assert previous.returncode != 0 and "previous terminated container" in previous.stderr

    started = client.CoreV1Api(admin).list_namespaced_event(
        namespace, field_selector="involvedObject.name=canary,reason=Started").items
    assert started and (started[0].source.component, started[0].source.host) == ("kubelet", node)


def test_a_pod_gets_the_service_account_token_kube_apiserver_asks_for_and_the_token_authenticates(
        real_cluster: RealCluster, ref_agents: RefAgents, admin: client.ApiClient, namespace: str) -> None:
    ref_agents.start("refagent-2")
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "whoami"},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "main", "image": "busybox", "command": ["cat", f"{SA_MOUNT}/namespace"],
               "args": [f"{SA_MOUNT}/token"]}]}}
    create(real_cluster, namespace, doc)
    stored = pod_json(admin, namespace, "whoami")
    volume = next(v for v in stored["spec"]["volumes"] if v["name"].startswith("kube-api-access-"))
    assert volume["projected"]["sources"][0]["serviceAccountToken"]["path"] == "token"  # what the agent must fill
    wait_for(lambda: pod_json(admin, namespace, "whoami")["status"].get("phase") == "Succeeded", 60,
             "the pod that reads its service-account volume to succeed")
    output = kubectl(real_cluster.admin_kubeconfig, "-n", namespace, "logs", "whoami").stdout
    assert output.startswith(namespace)
    token = output[len(namespace):].strip()
    review = client.AuthenticationV1Api(admin).create_token_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
    assert review.status.authenticated, review.status.error
    assert review.status.user.username == f"system:serviceaccount:{namespace}:default"
    assert review.status.user.extra["authentication.kubernetes.io/pod-name"] == ["whoami"]


def test_sigkill_of_an_agent_group_makes_the_real_controllers_mark_it_unreachable_and_evict_its_pods(
        real_cluster: RealCluster, ref_agents: RefAgents, admin: client.ApiClient, namespace: str) -> None:
    """A node lost with its pods: the real node lifecycle controller sets Ready=Unknown after the grace
    period and taints it unreachable (another node stays healthy, so it evicts), and the taint-eviction
    controller deletes the pod once its default 3 s toleration runs out."""
    victim = ref_agents.start("refagent-3")
    ref_agents.start("refagent-4")
    create(real_cluster, namespace, canary_pod("doomed", steps=0, node="refagent-3"))
    wait_for(lambda: pod_json(admin, namespace, "doomed")["status"].get("phase") == "Running", 60,
             "the canary on the victim node to run")
    # Running comes before the canary's first line: wait for the line (the canary really runs there)
    logs = wait_for(lambda: json_lines(kubectl(real_cluster.admin_kubeconfig, "-n", namespace, "logs", "doomed",
                                               "--tail=1").stdout) or None, 30, "the canary's first log line")
    assert logs[0]["event"] in ("start", "resumed", "step")  # the canary's first lines, whichever --tail=1 meets

    killed_at = ref_agents.kill("refagent-3")
    wait_for(lambda: not victim.group_alive(), 10, "the agent's process group (agent and canary) to be gone")

    def unknown() -> dict[str, Any] | None:
        condition = ready_condition(node_json(admin, "refagent-3"))
        return condition if condition["status"] == "Unknown" else None
    condition = wait_for(unknown, NODE_MONITOR_GRACE_PERIOD_S + LIFECYCLE_MARGIN_S, "refagent-3 Ready=Unknown")
    assert condition["reason"] == "NodeStatusUnknown"
    # The last renewal was at most one heartbeat before the kill; the controller waits the grace period after it.
    noticed = parse_time(condition["lastTransitionTime"]) - killed_at
    assert noticed >= NODE_MONITOR_GRACE_PERIOD_S - ref_agents.heartbeat - 1.0, condition
    wanted = {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
    wait_for(lambda: wanted <= taints(node_json(admin, "refagent-3")), LIFECYCLE_MARGIN_S,
             f"refagent-3 to carry {sorted(wanted)}")
    assert ready_condition(node_json(admin, "refagent-4"))["status"] == "True"

    def evicted() -> dict[str, Any] | None:
        pod = pod_json(admin, namespace, "doomed")
        return pod if pod["metadata"].get("deletionTimestamp") else None
    gone = wait_for(evicted, 3 + LIFECYCLE_MARGIN_S, "the taint-eviction controller to delete the canary pod")
    reasons = {c["type"]: c.get("reason") for c in gone["status"].get("conditions") or []}
    assert reasons.get("DisruptionTarget") == "DeletionByTaintManager", reasons
    # Nothing confirms the deletion (no kubelet runs there): the pod stays Terminating, as on a real cluster.
    assert pod_json(admin, namespace, "doomed")["metadata"]["deletionTimestamp"]
