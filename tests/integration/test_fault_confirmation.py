"""Real-cluster faults are confirmed by the node, here against a real reference API server and real agents.

The ``command`` fault method runs a real command; this one signals a node agent the test started to cut its
heartbeats (the agent's SIGUSR1 partition), standing in for an IPMI power-off.  The fault is confirmed only
when the node's Lease, read through the API, stops being renewed; a command that exits 0 but leaves the node
up, or one that fails, leaves it unconfirmed.  (No controllers run, so nothing but the Lease can confirm it;
the Ready and deletion rules are covered by tests/unit/drills/test_confirm.py.)
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.confirm import ConfirmedBy
from drills.faults import ClusterFaults
from drills.kube.driver import KubeDriver
from drills.target import FaultMethod, FaultSettings
from refplatform.cluster import Cluster, ClusterSpec

pytestmark = pytest.mark.integration

PARTITION = """\
import json, os, signal, sys
state = json.load(open(os.path.join(sys.argv[1], "agents", sys.argv[2] + ".json")))
os.kill(state["pid"], signal.SIGUSR1)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    spec = ClusterSpec(tmp_path_factory.mktemp("confirm") / "c", nodes=2, profile="tuned", controllers=())
    c = Cluster(spec)
    try:
        c.start()
        c.wait_ready(60)
        yield c
    finally:
        c.stop()


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
