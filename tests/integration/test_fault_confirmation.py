"""Real-cluster faults are confirmed by the node, here against a real reference API server and real agents.

The ``command`` fault method runs a real command; this one signals a node agent the test started to cut its
heartbeats (the agent's SIGUSR1 partition), standing in for an IPMI power-off.  The fault is confirmed only
when the node's Lease, read through the API, stops being renewed; a command that exits 0 but leaves the node
up, or one that fails, leaves it unconfirmed.  (No controllers run, so nothing but the Lease can confirm it;
the Ready and deletion rules are covered by tests/unit/drills/test_confirm.py.)

``kubelet-stop`` creates its privileged pod for real, bound to a Node that no agent runs (so nothing ever
executes it: its nsenter must never run on this machine); the test's own thread renews that Node's Lease,
as a kubelet would, until it sees the pod, which is what the pod would do to a real kubelet.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from datetime import datetime, timezone
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.kube.driver import NODE, POD, RESOURCES, KubeDriver
from drills.target.confirm import ConfirmedBy
from drills.target.faults import ClusterFaults
from drills.target.profile import FaultMethod, FaultSettings
from refplatform.cluster import Cluster, wait_until
from tests.integration.kube import agents_only

pytestmark = pytest.mark.integration

PARTITION = """\
import json, os, signal, sys
state = json.load(open(os.path.join(sys.argv[1], "agents", sys.argv[2] + ".json")))
os.kill(state["pid"], signal.SIGUSR1)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with agents_only(tmp_path_factory.mktemp("confirm") / "c") as c:
        yield c


@pytest.fixture
def driver(cluster: Cluster) -> Iterator[KubeDriver]:
    d = KubeDriver.connect(Path(str(cluster.kubeconfig)))
    yield d
    d.close()


def faults(driver: KubeDriver, template: str, timeout: float) -> ClusterFaults:
    return ClusterFaults(driver, "fdtest", FaultSettings(FaultMethod.COMMAND, command_template=template,
                                                         timeout_seconds=timeout), poll=0.2)


def test_a_command_fault_is_confirmed_when_the_nodes_lease_stops(cluster: Cluster, driver: KubeDriver,
                                                                   tmp_path: Path) -> None:
    script = tmp_path / "partition.py"
    script.write_text(PARTITION)
    node = cluster.spec.node_names()[1]
    started = time.monotonic()
    record = faults(driver, f"{sys.executable} {script} {cluster.data_dir} {{node}}", 20).inject(
        node, FaultMethod.COMMAND)
    took = time.monotonic() - started
    try:
        assert record.confirmed, record.detail
        assert record.confirmation is not None and record.confirmation.by is ConfirmedBy.LEASE_STOPPED
        assert record.confirmation.last_renew_time is not None
        # the tuned agent's lease lasts 4 s, renewed every 1 s: stopped once unchanged for more than 2 s
        assert record.confirmation.unchanged_seconds > 2.0
        assert 2.0 < took < 20, took
        assert "was not renewed" in record.detail and "rc 0" in record.detail
        assert record.acted_at is not None and started <= record.acted_at <= record.confirmation.at  # type: ignore[operator]
    finally:
        cluster.agents[node].signal(signal.SIGUSR2)  # heal the partition for the next test


def test_a_command_that_exits_0_but_leaves_the_node_up_is_not_confirmed(cluster: Cluster,
                                                                          driver: KubeDriver) -> None:
    node = cluster.spec.node_names()[0]
    record = faults(driver, "true {node}", 4).inject(node, FaultMethod.COMMAND)
    assert not record.confirmed
    assert record.confirmation is not None and record.confirmation.renewals_seen >= 2
    assert "not confirmed within 4 s" in record.detail and "Lease was renewed" in record.detail


def test_a_failing_command_is_not_confirmed_and_not_waited_for(cluster: Cluster, driver: KubeDriver) -> None:
    node = cluster.spec.node_names()[0]
    started = time.monotonic()
    record = faults(driver, "false {node}", 30).inject(node, FaultMethod.COMMAND)
    assert not record.confirmed and record.confirmation is None
    assert "the fault command failed" in record.detail and "rc 1" in record.detail
    assert time.monotonic() - started < 10


LEASE = RESOURCES[("coordination.k8s.io/v1", "Lease")]
GHOST = "ghost-node"
STOP_POD = f"firedrill-kubelet-stop-{GHOST}"


class GhostKubelet:
    """Renews the Lease of a Node no agent runs (1 s lease: renewed every 0.25 s) until the kubelet-stop pod
    exists, unless told to ignore it."""

    def __init__(self, driver: KubeDriver, obeys: bool) -> None:
        self.driver, self.obeys = driver, obeys
        self.stop = threading.Event()
        self.renewals = 0
        now = self.now()
        driver.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": GHOST,
                                                                       "labels": {"firedrill.dev/chaos": "allowed"}}})
        driver.patch(NODE, GHOST, {"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now,
             "lastTransitionTime": now}]}}, sub="status")
        driver.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": GHOST, "namespace": "kube-node-lease"},
                       "spec": {"holderIdentity": GHOST, "leaseDurationSeconds": 1, "renewTime": now}})
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    @staticmethod
    def now() -> str:
        return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def run(self) -> None:
        while not self.stop.wait(0.25):
            if self.obeys and self.driver.find(POD, STOP_POD, "kube-system") is not None:
                return  # the pod stopped this "kubelet"
            self.driver.patch(LEASE, GHOST, {"spec": {"renewTime": self.now()}}, "kube-node-lease")
            self.renewals += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.driver.delete(POD, STOP_POD, "kube-system", grace_seconds=0)
        self.driver.delete(LEASE, GHOST, "kube-node-lease")
        self.driver.delete(NODE, GHOST)


@pytest.mark.parametrize("obeys", [True, False], ids=["kubelet-stops", "kubelet-keeps-renewing"])
def test_kubelet_stop_is_confirmed_by_the_lease_not_by_its_pod(driver: KubeDriver, obeys: bool) -> None:
    kubelet = GhostKubelet(driver, obeys)
    try:
        wait_until(lambda: kubelet.renewals >= 2, 10, "the ghost kubelet to renew its Lease before the fault")
        faults = ClusterFaults(driver, "fdtest", FaultSettings(FaultMethod.KUBELET_STOP, timeout_seconds=3),
                               poll=0.1)
        record = faults.inject(GHOST, FaultMethod.KUBELET_STOP)
        pod = driver.find(POD, STOP_POD, "kube-system")
        assert pod is not None and pod["spec"]["nodeName"] == GHOST  # created, and never run by anyone
        assert "the platform's word only" in record.detail
        assert record.confirmation is not None
        if obeys:
            assert record.confirmed and record.confirmation.by is ConfirmedBy.LEASE_STOPPED, record.detail
        else:
            assert not record.confirmed and record.confirmation.renewals_seen >= 3, record.detail
            assert "Lease was renewed" in record.detail
        assert record.undo is not None
        record.undo()
        assert driver.find(POD, STOP_POD, "kube-system") is None
    finally:
        kubelet.close()
