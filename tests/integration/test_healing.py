"""The healing loop on a live ``tuned`` platform: a node is pulled under a training gang, and it heals.

4 nodes + 1 spare, 8 GPUs each; a 2-rank x 4-GPU canary Volcano Job steps every
0.1 s and checkpoints every 5 steps (its record on the Job).  Once a checkpoint
exists the node hosting rank 0 is pulled (SIGKILL of its agent, SIGSTOP, or a
partition via SIGUSR1) and the test checks, *in order*, from the platform's own
records (the global resourceVersion of every change, read back with a watch
from before the fault, and the Events' microsecond ``eventTime``):

node Ready leaves True -> unreachable taint -> rank pods evicted -> job
restarted (epoch + 1) -> every rank Running on healthy nodes (the released
spare among them) -> ``resumed from checkpoint step=N`` in the new rank 0's log
with N the last checkpoint -> steps beyond N.

Order and the checkpoint step are asserted, never durations (those are the
benchmark's: ``tests/bench/bench_nodepull.py``).
"""

from __future__ import annotations

import json
import re
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from refplatform.client import ApiStatusError, ApiUnreachable, RestClient, resource_path
from refplatform.cluster import Cluster, ClusterSpec, wait_until
from tests.integration.kube import canary_job

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
NS = "default"
JOBS = resource_path("batch.volcano.sh", "v1alpha1", "jobs", NS)
PODS = resource_path("", "v1", "pods", NS)
NODES = resource_path("", "v1", "nodes")
EVENTS = resource_path("", "v1", "events", NS)
LEASES = resource_path("coordination.k8s.io", "v1", "leases", "kube-node-lease")
DEADLINE = 45.0
UNREACHABLE = "node.kubernetes.io/unreachable"
CONDITION_TAINTS = (UNREACHABLE, "node.kubernetes.io/not-ready")


def ann(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def rv(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


def ready_status(node: Obj) -> str:
    return next((c.get("status", "") for c in (node.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Ready"), "")


def micro(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(timezone.utc)


@dataclass
class Platform:
    cluster: Cluster
    api: RestClient
    stopped: list[str] = field(default_factory=list)  # agents to SIGCONT before teardown

    @property
    def spare(self) -> str:
        return self.cluster.spec.spare_names()[0]

    def job(self, name: str = "canary") -> Obj:
        return self.api.get(f"{JOBS}/{name}")

    def pods(self) -> list[Obj]:
        return self.api.list(PODS)["items"]

    def rank_pods(self, epoch: int | None = None) -> list[Obj]:
        return [p for p in self.pods() if ann(p).get("firedrill.dev/rank") is not None
                and (epoch is None or ann(p).get("firedrill.dev/epoch") == str(epoch))]

    def node(self, name: str) -> Obj:
        return self.api.get(f"{NODES}/{name}")

    def rank0_node(self) -> str:
        pod = next(p for p in self.rank_pods(0) if ann(p)["firedrill.dev/rank"] == "0")
        return str(pod["spec"]["nodeName"])

    def log(self, pod: str) -> str:
        try:
            return self.api.get_raw(f"{PODS}/{pod}/log").decode()
        except (ApiStatusError, ApiUnreachable):
            return ""

    def events(self) -> list[Obj]:
        return self.api.list(EVENTS)["items"]

    def event_times(self, reason: str, name: str | None = None) -> list[datetime]:
        out = []
        for e in self.events():
            if e.get("reason") != reason or (name and e["involvedObject"].get("name") != name):
                continue
            out.append(micro(e["eventTime"]))
            last = (e.get("series") or {}).get("lastObservedTime")
            if last:
                out.append(micro(last))
        return sorted(out)

    def rv_now(self) -> str:
        return str(self.api.list(NODES, {"limit": 1})["metadata"]["resourceVersion"])

    def history(self, path: str, since: str) -> list[tuple[str, Obj]]:
        """Every change under ``path`` after resourceVersion ``since``, in order (a watch resumed from it)."""
        out = []
        with self.api.watch(path, resource_version=since, timeout_seconds=1, bookmarks=False) as stream:
            for event in stream:
                if event.type in ("ADDED", "MODIFIED", "DELETED"):
                    out.append((event.type, event.object))
        return out


def wait(what: str, predicate: Any, timeout: float = DEADLINE) -> None:
    def check() -> bool:
        try:
            return bool(predicate())
        except (ApiStatusError, ApiUnreachable, StopIteration, KeyError):
            return False
    wait_until(check, timeout, what, interval=0.1)


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    cluster = Cluster(ClusterSpec(tmp_path / "c", nodes=4, spares=1, gpus_per_node=8, profile="tuned"))
    cluster.start()
    api = RestClient(cluster.url, cluster.token, ca_file=cluster.ca_file)
    p = Platform(cluster, api)
    try:
        cluster.wait_ready(30)
        yield p
    finally:
        for name in p.stopped:
            proc = cluster.agents.get(name)
            if proc is not None:
                proc.signal(signal.SIGCONT)
        api.close()
        cluster.stop()


def start_canary(p: Platform, fill: bool = False) -> int:
    """Submit the canary, optionally fill every other working node, wait for a checkpoint; returns its step."""
    p.api.create(JOBS, canary_job())
    wait("both ranks Running", lambda: sum(1 for x in p.rank_pods(0) if (x.get("status") or {}).get("phase")
                                           == "Running") == 2)
    if fill:
        used: dict[str, int] = {}
        for pod in p.rank_pods(0):
            used[pod["spec"]["nodeName"]] = used.get(pod["spec"]["nodeName"], 0) + 4
        for i, name in enumerate(p.cluster.spec.node_names()):
            free = 8 - used.get(name, 0)
            if free:
                p.api.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"filler-{i}"},
                                    "spec": {"nodeSelector": {"kubernetes.io/hostname": name}, "containers": [{
                                        "name": "main", "image": "pause",
                                        "resources": {"limits": {"nvidia.com/gpu": str(free)}}}]}})
        wait("the fillers Running", lambda: all((x.get("status") or {}).get("phase") == "Running"
                                                for x in p.pods() if x["metadata"]["name"].startswith("filler-")))
    wait("a checkpoint on the Job", lambda: int(ann(p.job()).get("firedrill.dev/checkpoint-step", "0")) >= 5)
    return int(ann(p.job())["firedrill.dev/checkpoint-step"])


def first(changes: list[tuple[str, Obj]], predicate: Any) -> int:
    """The resourceVersion of the first change that satisfies ``predicate`` (fails the test if none)."""
    for etype, obj in changes:
        if predicate(etype, obj):
            return rv(obj)
    raise AssertionError("no such change recorded")


def steps_after(text: str, marker: str) -> list[int]:
    tail = text.split(marker, 1)[1] if marker in text else ""
    return [int(m) for m in re.findall(r"\bstep=(\d+) loss=", tail)]


def check_healing_loop(p: Platform, victim: str, since: str, epoch: int = 1) -> int:
    """Waits for the gang to resume at ``epoch`` and checks the order of everything; returns the resume step."""
    wait(f"the job restarted at epoch {epoch}", lambda: ann(p.job()).get("firedrill.dev/epoch") == str(epoch))
    wait("every rank Running again", lambda: sum(1 for x in p.rank_pods(epoch)
                                                 if (x.get("status") or {}).get("phase") == "Running") == 2)
    wait("rank 0 resumed from the checkpoint", lambda: "resumed from checkpoint step=" in p.log("canary-worker-0"))
    text = p.log("canary-worker-0")
    resumed = int(re.search(r"resumed from checkpoint step=(\d+)", text).group(1))  # type: ignore[union-attr]
    wait("steps beyond the checkpoint", lambda: any(s > resumed for s in steps_after(
        p.log("canary-worker-0"), f"resumed from checkpoint step={resumed}")))

    nodes, pods, jobs = p.history(NODES, since), p.history(PODS, since), p.history(JOBS, since)
    rank_names = {"canary-worker-0", "canary-worker-1"}
    t_ready = first(nodes, lambda _, n: n["metadata"]["name"] == victim and ready_status(n) != "True")
    # DESIGN.md's t_detect: Ready leaves True, or an unreachable/not-ready taint appears (an agent that
    # stalls before it dies reports Ready=False itself and gets not-ready first).
    t_taint = first(nodes, lambda _, n: n["metadata"]["name"] == victim and any(
        t.get("key") in CONDITION_TAINTS for t in (n.get("spec") or {}).get("taints") or []))
    old = str(epoch - 1)
    t_evicted = first(pods, lambda et, x: x["metadata"]["name"] in rank_names and ann(x).get("firedrill.dev/epoch")
                      == old and x["spec"].get("nodeName") == victim and (et == "DELETED" or bool(
                          x["metadata"].get("deletionTimestamp"))))
    t_restart = first(jobs, lambda _, j: ann(j).get("firedrill.dev/epoch") == str(epoch))
    checkpoint = int(next(ann(j) for _, j in jobs if rv(j) == t_restart).get("firedrill.dev/checkpoint-step", "0"))

    running: dict[str, int] = {}
    t_running = None
    for etype, x in pods:
        if x["metadata"]["name"] in rank_names and ann(x).get("firedrill.dev/epoch") == str(epoch):
            if etype != "DELETED" and (x.get("status") or {}).get("phase") == "Running":
                running.setdefault(x["metadata"]["name"], rv(x))
        if len(running) == 2:
            t_running = max(running.values())
            break
    assert t_running is not None, "the new ranks never both ran"
    assert t_ready <= t_taint < t_evicted < t_restart < t_running, (
        (t_ready, t_taint, t_evicted, t_restart, t_running),
        [(et, rv(n), n["metadata"]["name"], ready_status(n), [t.get("key") for t in n["spec"].get("taints") or []])
         for et, n in nodes],
        [(et, rv(x), x["metadata"]["name"], ann(x).get("firedrill.dev/epoch"), x["spec"].get("nodeName"),
          (x.get("status") or {}).get("phase"), bool(x["metadata"].get("deletionTimestamp"))) for et, x in pods])

    # The new ranks run on healthy nodes, never the pulled one.
    for pod in p.rank_pods(epoch):
        host = pod["spec"]["nodeName"]
        assert host != victim and ready_status(p.node(host)) == "True"
        assert not any(t.get("key") in CONDITION_TAINTS for t in p.node(host)["spec"].get("taints") or [])

    # The resume point is the last checkpoint recorded when the job restarted, and training went past it.
    assert resumed == checkpoint, (resumed, checkpoint)

    # The Events tell the same story, with microsecond eventTimes, in the same order.
    not_ready = p.event_times("NodeNotReady", victim)
    evicted = p.event_times("TaintManagerEviction")
    restarted = p.event_times("RestartJob", "canary")
    after = [t for t in evicted if t >= not_ready[-1]]
    assert not_ready and after and restarted
    assert not_ready[-1] <= after[0] <= restarted[-1]
    for e in p.events():
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$", e["eventTime"]), e
    assert p.job()["status"]["state"]["phase"] == "Running"
    assert p.job()["status"]["retryCount"] == epoch
    return resumed


@pytest.mark.parametrize("fault", ["kill", "hang", "partition"])
def test_a_pulled_node_heals_in_order_and_the_gang_resumes_from_its_checkpoint(platform: Platform,
                                                                                fault: str) -> None:
    p = platform
    start_canary(p, fill=True)
    victim = p.rank0_node()
    since = p.rv_now()
    agent = p.cluster.agents[victim]
    if fault == "kill":
        agent.kill()
    elif fault == "hang":
        p.stopped.append(victim)
        agent.signal(signal.SIGSTOP)
    else:
        agent.signal(signal.SIGUSR1)
    check_healing_loop(p, victim, since)

    # Every other working node is full: the gang could only come back on the released spare.
    assert p.spare in {x["spec"]["nodeName"] for x in p.rank_pods(1)}
    reasons = {(e["reason"], e["involvedObject"]["name"]) for e in p.events()}
    assert ("NodeQuarantined", victim) in reasons and ("SparePromoted", p.spare) in reasons
    victim_node = p.node(victim)
    assert victim_node["metadata"]["labels"].get("firedrill.dev/quarantine") in ("unreachable", "not-ready")
    assert victim_node["spec"].get("unschedulable") is True


def test_a_pulled_node_that_comes_back_is_not_reused_until_its_health_check_passes(platform: Platform) -> None:
    p = platform
    start_canary(p)
    victim = p.rank0_node()
    p.cluster.agents[victim].kill()
    wait("the victim quarantined", lambda: p.node(victim)["metadata"]["labels"].get("firedrill.dev/quarantine"))

    # Something renews the victim's Lease, but nothing answers its /healthz (the agent is dead).
    spoofing = threading.Event()

    def spoof() -> None:
        while not spoofing.wait(0.3):
            try:
                lease = p.api.get(f"{LEASES}/{victim}")
                lease["spec"]["renewTime"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                p.api.update(f"{LEASES}/{victim}", lease)
            except (ApiStatusError, ApiUnreachable):
                pass
    thread = threading.Thread(target=spoof, daemon=True)
    thread.start()
    try:
        wait("a failed health check", lambda: p.event_times("NodeHealthCheckFailed", victim))
        node = p.node(victim)
        assert node["metadata"]["labels"].get("firedrill.dev/quarantine") in ("unreachable", "not-ready")
        assert node["metadata"]["labels"].get("firedrill.dev/spare") is None
        assert node["spec"].get("unschedulable") is True
        assert any(t["key"] in CONDITION_TAINTS for t in node["spec"].get("taints") or [])
        assert ready_status(node) != "True"
        assert not [x for x in p.pods() if x["spec"].get("nodeName") == victim]
    finally:
        spoofing.set()
        thread.join(5)

    # The real agent comes back: heartbeats, passes /healthz, and only then rejoins, as a spare.
    p.cluster.start_agent(victim)
    wait("the victim back in the spare pool", lambda: p.node(victim)["metadata"]["labels"].get(
        "firedrill.dev/spare") == "true")
    node = p.node(victim)
    assert "firedrill.dev/quarantine" not in node["metadata"]["labels"] and not node["spec"].get("unschedulable")
    assert [t["key"] for t in node["spec"].get("taints") or []] == ["firedrill.dev/spare"]
    assert ready_status(node) == "True"
    failed, recovered = p.event_times("NodeHealthCheckFailed", victim), p.event_times("NodeRecovered", victim)
    assert recovered and failed[0] < recovered[-1]
    assert p.event_times("NodeReady", victim)

    # Between drills the harness puts the roles back as the spec made them (racks are physical): the victim
    # works again and the configured spare, promoted for it, returns to the pool; the healer keeps them so.
    assert p.node(p.spare)["metadata"]["labels"].get("firedrill.dev/spare") is None
    assert p.cluster.restore_roles(10)
    wait("the configured spare back in the pool and the victim at work", lambda: (
        p.node(p.spare)["metadata"]["labels"].get("firedrill.dev/spare") == "true"
        and "firedrill.dev/spare" not in p.node(victim)["metadata"]["labels"]))
    assert [t["key"] for t in p.node(p.spare)["spec"].get("taints") or []] == ["firedrill.dev/spare"]
    assert not p.node(victim)["spec"].get("taints")
    with p.cluster.http_client() as http:
        assert p.cluster.readiness(http) == (4, 32, 1)
    assert p.cluster.restore_roles(10), "already as the spec made it: nothing to do"

    # A lost node returned to the pool while no spare was promoted for it (none was Ready at the loss): two nodes
    # in the pool, three at work.  The reset puts it back to work all the same.
    with p.cluster.http_client() as http:
        answer = http.patch(f"/api/v1/nodes/{victim}", headers={"Content-Type": "application/merge-patch+json"},
                            content=json.dumps({"metadata": {"labels": {"firedrill.dev/spare": "true"}},
                                                "spec": {"taints": [{"key": "firedrill.dev/spare", "value": "true",
                                                                     "effect": "NoSchedule"}]}}))
        assert answer.status_code == 200, answer.text
        assert p.cluster.readiness(http) == (3, 24, 2)
        assert p.cluster.restore_roles(10)
        wait("the victim at work again", lambda: p.cluster.readiness(http) == (4, 32, 1))
    assert p.node(p.spare)["metadata"]["labels"].get("firedrill.dev/spare") == "true"
    assert not p.node(victim)["spec"].get("taints")


def test_a_second_pull_while_the_job_restarts_does_not_lose_it(platform: Platform) -> None:
    p = platform
    start_canary(p)
    first_victim = p.rank0_node()
    since = p.rv_now()
    p.cluster.agents[first_victim].kill()
    wait("the restarted ranks bound", lambda: len([x for x in p.rank_pods(1) if x["spec"].get("nodeName")]) == 2)
    second_victim = next(x["spec"]["nodeName"] for x in p.rank_pods(1) if ann(x)["firedrill.dev/rank"] == "0")
    assert second_victim != first_victim
    p.cluster.agents[second_victim].kill()
    resumed = check_healing_loop(p, second_victim, since, epoch=2)
    assert resumed >= 5
    hosts = {x["spec"]["nodeName"] for x in p.rank_pods(2)}
    assert not hosts & {first_victim, second_victim}
    status = p.job()["status"]
    assert (status["state"]["phase"], status["retryCount"], status["version"]) == ("Running", 2, 2)
