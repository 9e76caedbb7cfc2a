"""Pods with a command run as real processes on a real cluster: logs, process tree, exit codes, signals,
pod IPs and volumes.

Every wait is on a condition with a deadline; no bare sleeps.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refplatform.client import ApiStatusError, RestClient, resource_path
from refplatform.cluster import Cluster, ClusterSpec, wait_until

pytestmark = pytest.mark.integration

HEARTBEAT = 0.5
NODES = ("gpu-node-0", "gpu-node-1")
DEADLINE = 30.0
PODS = resource_path("", "v1", "pods", "default")
PY = os.path.basename(sys.executable)

TRAP = """
import json, os, signal, sys, time
def on_term(signum, frame):
    print('got SIGTERM', flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print(json.dumps({'pid': os.getpid(), 'ip': os.environ.get('POD_IP')}), flush=True)
while True:
    time.sleep(0.05)
"""

BIND = """
import json, os, socket, time
s = socket.socket()
s.bind((os.environ['POD_IP'], 29500))  # every pod may use the same port: each has its own address
s.listen()
print(json.dumps({'pid': os.getpid(), 'ip': s.getsockname()[0]}), flush=True)
time.sleep(120)
"""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(ClusterSpec(tmp_path / "cluster", nodes=2, heartbeat=HEARTBEAT, bookmark_interval=0.5, controllers=()))
    c.start_server()
    try:
        for name in NODES:
            c.start_agent(name)
        yield c
    finally:
        c.stop()


@pytest.fixture
def api(cluster: Cluster) -> Iterator[RestClient]:
    with RestClient(cluster.url, cluster.token, ca_file=cluster.ca_file) as client:
        wait_for(cluster, lambda: all(ready(client, n) for n in NODES), "both nodes Ready")
        yield client


def ready(api: RestClient, name: str) -> bool:
    try:
        node = api.get(resource_path("", "v1", "nodes", None, name))
    except ApiStatusError:
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in node["status"].get("conditions") or [])


def wait_for(cluster: Cluster, predicate: Any, what: str, timeout: float = DEADLINE) -> None:
    def check() -> bool:
        for name, proc in cluster.agents.items():
            if proc.popen.poll() is not None and proc.popen.returncode not in (-9, 0):
                raise AssertionError(f"agent {name} exited {proc.popen.returncode}:\n{proc.tail(40)}")
        return bool(predicate())

    wait_until(check, timeout, what, interval=0.05)


def run_pod(api: RestClient, name: str, node: str, code: str, *, env: list[dict[str, Any]] | None = None,
            mounts: list[dict[str, Any]] | None = None, volumes: list[dict[str, Any]] | None = None,
            args: list[str] | None = None) -> None:
    container: dict[str, Any] = {"name": "main", "image": "firedrill/canary", "command": [PY, "-c", code]}
    if args:
        container["args"] = args
    container["env"] = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}, *(env or [])]
    if mounts:
        container["volumeMounts"] = mounts
    api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                      "spec": {"nodeName": node, "containers": [container], "volumes": volumes or []}})


def pod(api: RestClient, name: str) -> dict[str, Any]:
    return api.get(f"{PODS}/{name}")


def phase(api: RestClient, name: str) -> str:
    return str(pod(api, name)["status"].get("phase"))


def log_text(api: RestClient, name: str) -> str:
    try:
        return api.get_raw(f"{PODS}/{name}/log").decode()
    except ApiStatusError:
        return ""


def first_json(api: RestClient, name: str) -> dict[str, Any] | None:
    for line in log_text(api, name).splitlines():
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    return None


def ppid_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def deleted(api: RestClient, name: str) -> bool:
    try:
        pod(api, name)
    except ApiStatusError as err:
        return err.not_found
    return False


def test_a_pod_with_a_command_is_a_real_child_process_of_its_agent(cluster: Cluster, api: RestClient) -> None:
    # Output comes through pods/log; the process is the agent's child, at the pod's own loopback address.
    run_pod(api, "trap", NODES[0], TRAP)
    wait_for(cluster, lambda: first_json(api, "trap") is not None, "the trap pod's first line")
    info = first_json(api, "trap")
    assert info is not None
    agent0 = cluster.agents[NODES[0]]
    assert ppid_of(info["pid"]) == agent0.pid
    assert os.getpgid(info["pid"]) == agent0.pid  # in the agent's process group: node faults reach it
    status = pod(api, "trap")["status"]
    node0 = api.get(resource_path("", "v1", "nodes", None, NODES[0]))
    cidr = cluster.pod_cidr(NODES[0])  # 127.10.0.0/24 where no other reference cluster runs here
    assert node0["spec"]["podCIDR"] == cidr and re.fullmatch(r"127\.\d+\.0\.0/24", cidr)
    assert status["phase"] == "Running" and status["podIP"] == info["ip"] == cidr.replace(".0/24", ".2")
    assert status["hostIP"] == "127.0.0.1"

    # Exit codes land in the container's state.
    run_pod(api, "exit7", NODES[1], "import sys; print('bye', flush=True); sys.exit(7)")
    wait_for(cluster, lambda: phase(api, "exit7") == "Failed", "exit7 Failed")
    term = pod(api, "exit7")["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (7, "Error")
    assert log_text(api, "exit7") == "bye\n"
    run_pod(api, "exit0", NODES[1], "pass")
    wait_for(cluster, lambda: phase(api, "exit0") == "Succeeded", "exit0 Succeeded")

    # Deletion: SIGTERM to the process, which logs it and exits; then the agent deletes the pod.
    api.delete(f"{PODS}/trap")
    wait_for(cluster, lambda: deleted(api, "trap"), "the agent to delete the trap pod")
    log_file = cluster.data_dir / "logs" / NODES[0] / "default_trap_main.log"
    assert log_file.read_text().splitlines()[-1].endswith(" got SIGTERM")
    assert gone(info["pid"])

    # A graceful stop of an agent (SIGTERM) ends its pods first, with SIGTERM.
    run_pod(api, "trap1", NODES[1], TRAP)
    wait_for(cluster, lambda: first_json(api, "trap1") is not None, "the trap1 pod's first line")
    info1 = first_json(api, "trap1")
    assert info1 is not None and ppid_of(info1["pid"]) == cluster.agents[NODES[1]].pid
    assert cluster.agents[NODES[1]].stop(timeout=10) == 0
    log1 = cluster.data_dir / "logs" / NODES[1] / "default_trap1_main.log"
    assert log1.read_text().splitlines()[-1].endswith(" got SIGTERM") and gone(info1["pid"])


def test_pod_ips_are_distinct_loopback_addresses_and_a_node_kill_takes_its_pods(cluster: Cluster,
                                                                               api: RestClient) -> None:
    for name, node in (("a", NODES[0]), ("b", NODES[0]), ("c", NODES[1])):
        run_pod(api, name, node, BIND)
    wait_for(cluster, lambda: all(first_json(api, n) is not None for n in "abc"), "three pods bound their address")
    seen = {n: first_json(api, n) for n in "abc"}
    ips = {n: s["ip"] for n, s in seen.items() if s is not None}
    assert len(set(ips.values())) == 3, ips
    nets = {n: ipaddress.ip_network(cluster.pod_cidr(node)) for n, node in (("a", NODES[0]), ("c", NODES[1]))}
    assert nets["a"] != nets["c"]
    assert all(ipaddress.ip_address(ips[n]) in nets["a"] for n in "ab") and ipaddress.ip_address(ips["c"]) in nets["c"]
    assert {n: pod(api, n)["status"]["podIP"] for n in "abc"} == ips

    # Killing the node (the agent's process group) kills its pods, and only its pods.
    pids = {n: s["pid"] for n, s in seen.items() if s is not None}
    cluster.agents[NODES[0]].kill()
    wait_until(lambda: gone(pids["a"]) and gone(pids["b"]), 10, "node 0's pods killed with it")
    assert not gone(pids["c"])

    # The agent comes back: a pod found Running is restarted in place, at the address it had.
    cluster.start_agent(NODES[0])

    def restarted() -> bool:
        statuses = pod(api, "a")["status"].get("containerStatuses") or []
        return bool(statuses) and statuses[0].get("restartCount") == 1 and "running" in statuses[0]["state"]

    wait_for(cluster, restarted, "pod a restarted by the new agent")
    assert pod(api, "a")["status"]["podIP"] == ips["a"]
    assert pod(api, "a")["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "Unknown"

    # SIGKILL of the agent alone (not its group): its pods still die with it (PR_SET_PDEATHSIG).
    cluster.agents[NODES[1]].signal(signal.SIGKILL)
    wait_until(lambda: gone(pids["c"]), 10, "node 1's pod killed by its parent-death signal")


def test_an_nfs_volume_is_shared_across_nodes_and_an_emptydir_is_not(cluster: Cluster, api: RestClient) -> None:
    volumes = [{"name": "shared", "nfs": {"server": "nfs-0", "path": "/exports/ckpt"}},
               {"name": "scratch", "emptyDir": {}}]
    mounts = [{"name": "shared", "mountPath": "/ckpt"}, {"name": "scratch", "mountPath": "/scratch"}]
    writer = ("import sys, pathlib; [pathlib.Path(d, 'mark').write_text('from-' + sys.argv[3]) for d in sys.argv[1:3]];"
              "print('wrote', flush=True)")
    run_pod(api, "writer", NODES[0], writer, mounts=mounts, volumes=volumes, args=["/ckpt", "/scratch", "writer"])
    wait_for(cluster, lambda: phase(api, "writer") == "Succeeded", "the writer pod Succeeded")
    reader = ("import json, sys, pathlib; p = [pathlib.Path(d, 'mark') for d in sys.argv[1:3]];"
              "print(json.dumps([x.read_text() if x.exists() else None for x in p]), flush=True)")
    run_pod(api, "reader", NODES[1], reader, mounts=mounts, volumes=volumes, args=["/ckpt", "/scratch"])
    wait_for(cluster, lambda: phase(api, "reader") == "Succeeded", "the reader pod Succeeded")
    assert json.loads(log_text(api, "reader")) == ["from-writer", None]
    assert (cluster.data_dir / "nfs/nfs-0/exports/ckpt/mark").read_text() == "from-writer"


def canary_rank(rank: int, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"canary-{rank}"},
        "spec": {"nodeName": node, "volumes": [{"name": "job", "nfs": {"server": "nfs-0", "path": "/jobs/canary"}}],
                 "containers": [{
                     "name": "trainer", "image": "firedrill/canary",
                     "command": [PY, "-m", "drills.canary", "train"],
                     "args": ["--input-seconds", "0.1", "--compute-seconds", "0.05", "--checkpoint-every", "5",
                              "--checkpoint-dir", "/job/ckpt", "--rendezvous-dir", "/job/rendezvous"],
                     "env": [{"name": "RANK", "value": str(rank)}, {"name": "WORLD_SIZE", "value": "2"},
                             {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                     "volumeMounts": [{"name": "job", "mountPath": "/job"}]}]},
    }


def test_the_simulated_gpu_observes_a_two_rank_canary(cluster: Cluster, api: RestClient) -> None:
    for rank in (0, 1):
        api.create(PODS, canary_rank(rank, NODES[rank]))

    def annotations(name: str) -> dict[str, str]:
        return pod(api, name)["metadata"].get("annotations") or {}

    def progressed() -> bool:
        return all(float(annotations(f"canary-{r}").get("firedrill.dev/stepped-seconds", "0")) >= 1.0
                   and int(annotations(f"canary-{r}").get("firedrill.dev/step", "0")) >= 5 for r in (0, 1))

    wait_for(cluster, progressed, "both ranks stepping, observed by their nodes' devices")
    for rank in (0, 1):
        ann = annotations(f"canary-{rank}")
        stepped, waited = float(ann["firedrill.dev/stepped-seconds"]), float(ann["firedrill.dev/input-stall-seconds"])
        assert 0.5 < waited / stepped < 0.8, ann  # 0.1 s of each ~0.15 s step waits on input
        lines = [json.loads(ln) for ln in log_text(api, f"canary-{rank}").splitlines() if ln.startswith("{")]
        assert {"start", "rendezvous", "resumed", "step"} <= {ln["event"] for ln in lines}
    assert int(annotations("canary-0").get("firedrill.dev/checkpoint-step", "0")) >= 5
    assert list((cluster.data_dir / "nfs/nfs-0/jobs/canary/ckpt").glob("ckpt-*.json"))
    events = api.list(resource_path("", "v1", "events", "default"),
                      {"fieldSelector": "involvedObject.name=canary-1"})["items"]
    assert [e["message"] for e in events if e["reason"] == "Resumed"] == [
        "Resumed training at step 1 beyond checkpoint 0"]


def test_with_stalls_as_compute_the_platform_reports_no_input_stall(tmp_path: Path) -> None:
    c = Cluster(ClusterSpec(tmp_path / "cluster", nodes=1, heartbeat=HEARTBEAT, controllers=(),
                            defects=("stalls-as-compute",)))
    c.start_server()
    try:
        c.start_agent(NODES[0])
        with RestClient(c.url, c.token, ca_file=c.ca_file) as api:
            wait_for(c, lambda: ready(api, NODES[0]), "node Ready")
            rank = canary_rank(0, NODES[0])
            rank["spec"]["containers"][0]["env"][1]["value"] = "1"  # WORLD_SIZE 1
            api.create(PODS, rank)

            def stepped() -> float:
                return float((pod(api, "canary-0")["metadata"].get("annotations") or {})
                             .get("firedrill.dev/stepped-seconds", "0"))

            wait_for(c, lambda: stepped() >= 1.0, "the rank stepping")
            ann = pod(api, "canary-0")["metadata"]["annotations"]
            assert float(ann["firedrill.dev/input-stall-seconds"]) == 0.0, ann  # the canary waited ~2/3 of each step
    finally:
        c.stop()
