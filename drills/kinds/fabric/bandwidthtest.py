"""A real cluster's bandwidth test: the profile's image and command (nccl-tests' ``all_reduce_perf``) on each node.

``fabric.bandwidth_test`` (docs/PROFILE.md) names an image and a command; the drill runs one pod of it per worker
of the scenario's gang, each holding the worker's GPUs, no two on one node (a required pod anti-affinity on
``kubernetes.io/hostname``), and reads each pod's own output through ``pods/log`` when it has ended: the nccl-tests
table (:mod:`drills.kinds.fabric.nccltests`), whose ``Avg bus bandwidth`` is the node's figure.  A test that
ended without its table, or computed wrong values, measured nothing: its node is INCONCLUSIVE, never judged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from drills.kinds.fabric.nccltests import NcclRun, parse_nccl_tests
from drills.kube.driver import POD, KubeDriver, KubeError
from drills.kube.flavors import RUN_LABEL, run_selector
from drills.kube.logs import read_log_head
from drills.target.profile import BandwidthTest
from drills.workloads.canaryjob import gpu_taint_toleration

__all__ = ["TEST_LABEL", "BandwidthTestRun", "NodeResult", "test_pods"]

Obj = dict[str, Any]
TEST_LABEL = "firedrill.dev/bandwidth-test"
"""On each test pod: the run id (its anti-affinity keeps the run's pods on distinct nodes)."""
LOG_LIMIT = 1 << 20
"""The most of a test's output read (nccl-tests prints a few kB)."""
TERMINAL = ("Succeeded", "Failed")


def test_pods(test: BandwidthTest, run_id: str, namespace: str, workers: int, gpus: int,
              gpu_resource: str) -> list[Obj]:
    """One pod per worker, each holding ``gpus`` GPUs and running the test once, on a node of its own."""
    out = []
    for i in range(workers):
        labels = {RUN_LABEL: run_id, TEST_LABEL: run_id}
        out.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"fabric-{run_id}-{i}", "namespace": namespace, "labels": labels},
            "spec": {
                "restartPolicy": "Never",
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {TEST_LABEL: run_id}},
                     "topologyKey": "kubernetes.io/hostname"}]}},
                "tolerations": list(gpu_taint_toleration(gpu_resource)),
                "containers": [{"name": "bandwidth-test", "image": test.image, "command": list(test.command),
                                "resources": {"limits": {gpu_resource: str(gpus)}}}],
            },
        })
    return out


@dataclass(frozen=True)
class NodeResult:
    """What one node's test said (``run`` None: its output could not be read)."""

    node: str
    pod: str
    phase: str
    run: NcclRun | None
    problem: str | None
    """Why this node measured nothing worth judging, or None."""


@dataclass
class BandwidthTestRun:
    """The test pods of one scenario: created, waited for, read, deleted."""

    driver: KubeDriver
    test: BandwidthTest
    run_id: str
    namespace: str
    created: list[str] = field(default_factory=list)

    def start(self, workers: int, gpus: int, gpu_resource: str) -> None:
        for pod in test_pods(self.test, self.run_id, self.namespace, workers, gpus, gpu_resource):
            self.driver.create(pod)
            self.created.append(pod["metadata"]["name"])

    def wait(self, now: Any = time.monotonic, sleep: Any = time.sleep, poll: float = 2.0) -> tuple[list[Obj], bool]:
        """The test pods once every one has ended, or at the profile's timeout (then False)."""
        deadline = now() + self.test.timeout_seconds
        while True:
            pods = self.driver.list(POD, self.namespace, label_selector=run_selector(self.run_id))
            mine = [p for p in pods if p["metadata"]["name"] in self.created]
            if len(mine) == len(self.created) and all((p.get("status") or {}).get("phase") in TERMINAL for p in mine):
                return mine, True
            if now() >= deadline:
                return mine, False
            sleep(poll)

    def results(self, pods: list[Obj]) -> list[NodeResult]:
        out = []
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            name, node = pod["metadata"]["name"], (pod.get("spec") or {}).get("nodeName") or ""
            phase = (pod.get("status") or {}).get("phase") or "Unknown"
            try:
                run: NcclRun | None = parse_nccl_tests(read_log_head(self.driver, self.namespace, name, LOG_LIMIT))
                problem = run.problem if run is not None else None
            except KubeError as exc:
                run, problem = None, f"its output could not be read ({exc})"
            if problem is None and phase != "Succeeded":
                problem = f"the test pod ended {phase}"
            out.append(NodeResult(node, name, phase, run, problem))
        return out

    def delete(self) -> list[str]:
        """Delete every test pod; the problems met (never raises)."""
        problems = []
        for name in self.created:
            try:
                self.driver.delete(POD, name, self.namespace, grace_seconds=0)
            except KubeError as exc:
                problems.append(f"test pod {name}: {exc}")
        return problems
