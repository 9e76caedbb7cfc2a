"""Fault injectors against real child processes (the reference methods) and real commands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from drills.target.faults import FaultError, ReferenceFaults, kubelet_stop_pod, run_command
from drills.target.profile import FaultMethod
from refplatform.cluster import wait_until


POD_CODE = ("import signal, subprocess, sys, time; signal.signal(signal.SIGUSR1, lambda *a: None); "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(p.pid, flush=True); time.sleep(60)")


class Child:
    """A process this test started, shaped like the embedded platform's agent handles: its own process group;
    by default with a child of its own (the node's pod), whose pid it prints first.  Another ``code`` prints one
    line when it is ready (``first``)."""

    def __init__(self, code: str = POD_CODE, *args: str) -> None:
        self.popen = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                                      start_new_session=True)
        assert self.popen.stdout is not None
        self.first = self.popen.stdout.readline().decode().strip()
        self.pod = int(self.first) if code == POD_CODE else 0

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def signal_group(self, sig: int) -> None:
        os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        self.signal_group(signal.SIGKILL)
        self.popen.wait(timeout=10)
        assert self.popen.stdout is not None
        self.popen.stdout.close()


@pytest.fixture
def child() -> Iterator[Child]:
    c = Child()
    yield c
    if c.alive():
        c.signal_group(signal.SIGCONT)
        c.kill()
    elif c.popen.stdout is not None:
        c.popen.stdout.close()


def state_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def faults_for(child: Child, restarted: list[str]) -> ReferenceFaults:
    return ReferenceFaults(lambda node: child if node == "n1" else None, restarted.append)


def test_kill_is_confirmed_and_undone_by_a_restart(child: Child) -> None:
    restarted: list[str] = []
    record = faults_for(child, restarted).inject("n1", FaultMethod.KILL)
    assert record.confirmed and not child.alive()
    wait_until(lambda: not Path(f"/proc/{child.pod}").exists() or state_of(child.pod) == "Z", 5,
               "the pod killed with its node")
    assert record.undo is not None
    record.undo()
    assert restarted == ["n1"]


def test_hang_stops_the_node_with_its_pods_and_undo_continues_them(child: Child) -> None:
    record = faults_for(child, []).inject("n1", FaultMethod.HANG)
    assert record.confirmed and child.alive()
    assert state_of(child.pid) == "T"
    wait_until(lambda: state_of(child.pod) == "T", 5, "the pod frozen with its node")
    assert record.undo is not None
    record.undo()
    wait_until(lambda: state_of(child.pid) != "T" and state_of(child.pod) != "T", 5, "node and pod thawed")


def test_partition_signals_the_agent_which_keeps_running(child: Child) -> None:
    record = faults_for(child, []).inject("n1", FaultMethod.PARTITION)
    assert record.confirmed and child.alive() and "SIGUSR1" in record.detail
    assert state_of(child.pod) in ("S", "R")


def test_reference_faults_refuse_cluster_methods_and_unknown_nodes(child: Child) -> None:
    faults = faults_for(child, [])
    with pytest.raises(FaultError, match="for real clusters"):
        faults.inject("n1", FaultMethod.KUBELET_STOP)
    with pytest.raises(FaultError, match="node n9 has no running agent"):
        faults.inject("n9", FaultMethod.KILL)


def test_a_command_fault_is_confirmed_by_its_exit_code() -> None:
    assert run_command("true", "n1", 5).confirmed
    failed = run_command("false", "n1", 5)
    assert not failed.confirmed and "rc 1" in failed.detail
    with pytest.raises(FaultError, match="failed to run"):
        run_command("/no/such/binary {node}", "n1", 5)


def test_the_kubelet_stop_pod_is_a_valid_privileged_pod_pinned_to_the_node() -> None:
    manifest = kubelet_stop_pod("gpu-node-3", "fdabc123")
    pod = client.ApiClient()._ApiClient__deserialize(manifest, "V1Pod")  # type: ignore[attr-defined]
    assert pod.spec.node_name == "gpu-node-3" and pod.spec.host_pid
    assert pod.spec.containers[0].security_context.privileged
    assert pod.spec.containers[0].command[-3:] == ["systemctl", "stop", "kubelet"]
    assert manifest["metadata"]["labels"]["firedrill.dev/drill-run"] == "fdabc123"
