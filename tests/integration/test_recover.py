"""A run killed mid-drill leaves nothing nobody knows how to undo: its fault journal, the next run's refusal and
``firedrill recover``, against a real reference API server and real agents.

The "run" is a child process that injects a ``command`` fault through the harness's own code
(:class:`~drills.target.faults.ClusterFaults`, which writes the journal's intent before it acts): the command cuts a
node agent's heartbeats (SIGUSR1, the agent's partition), standing in for an IPMI power-off, and the profile's
restore command heals it (SIGUSR2).  The child is SIGKILLed once the fault is confirmed, as a CI timeout would,
so no rollback runs.  No controllers run: the node's Lease is what shows the fault standing and healed.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from drills.cli import app
from drills.kube.driver import NODE, RESOURCES, KubeDriver
from drills.kube.flavors import RUN_LABEL
from drills.target.connect import LeftBroken, cluster_target
from drills.target.faults import ClusterFaults
from drills.target.journal import FaultJournal, Undo, UndoKind, journals_for, read_journal
from drills.target.marks import cluster_marks
from drills.target.profile import FaultMethod, FaultSettings, reference_profile
from drills.target.recover import left_broken, leftovers
from drills.target.throttle import STRAGGLER_TAINT
from drills.target.xid import INJECT_ANNOTATION
from refplatform.cluster import Cluster, wait_until
from tests.integration.kube import agents_only

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LEASE = RESOURCES[("coordination.k8s.io/v1", "Lease")]

AGENT_SIGNAL = """\
import json, os, signal, sys
state = json.load(open(os.path.join(sys.argv[1], "agents", sys.argv[2] + ".json")))
os.kill(state["pid"], getattr(signal, sys.argv[3]))
"""

DRILLER = """\
import sys, time
from pathlib import Path
from drills.kube.driver import KubeDriver
from drills.target.faults import ClusterFaults
from drills.target.journal import FaultJournal
from drills.target.profile import FaultMethod, FaultSettings

kubeconfig, node, command, restore, run = sys.argv[1:6]
expire = float(sys.argv[6]) if len(sys.argv) > 6 else None
driver = KubeDriver.connect(Path(kubeconfig))
journal = FaultJournal.for_target(run, driver.host, "profile.yaml")
faults = ClusterFaults(driver, run, FaultSettings(FaultMethod.COMMAND, command_template=command,
                                                  restore_template=restore, timeout_seconds=20,
                                                  expire_seconds=expire), poll=0.2, intend=journal.intend_fault)
record = faults.inject(node, FaultMethod.COMMAND)
print("INJECTED" if record.confirmed else "UNCONFIRMED " + record.detail, flush=True)
time.sleep(600)  # the drill goes on, until the CI runner's timeout kills it
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with agents_only(tmp_path_factory.mktemp("recover") / "c") as c:
        yield c


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own state directory: the journals it finds are its own."""
    folder = tmp_path / "state"
    monkeypatch.setenv("FIREDRILL_STATE_DIR", str(folder))
    return folder


@pytest.fixture
def driver(cluster: Cluster) -> Iterator[KubeDriver]:
    d = KubeDriver.connect(Path(str(cluster.kubeconfig)))
    yield d
    d.close()


def renewed(driver: KubeDriver, node: str) -> str:
    return str((driver.get(LEASE, node, "kube-node-lease").get("spec") or {}).get("renewTime"))


def renewing(driver: KubeDriver, node: str, within: float = 3.0) -> bool:
    """Whether the node's agent renews its Lease (every second on the tuned profile) within ``within`` seconds."""
    before = renewed(driver, node)
    try:
        wait_until(lambda: renewed(driver, node) != before, within, f"{node}'s Lease to be renewed")
    except Exception:  # noqa: BLE001 - the timeout is the answer
        return False
    return True


def dead(journal: FaultJournal) -> None:
    """Make ``journal`` read as a dead run's (its writer's pid gone), as after a SIGKILL."""
    lines = journal.path.read_text().splitlines()
    journal.path.write_text("\n".join([json.dumps(json.loads(lines[0]) | {"pid": 0}), *lines[1:]]) + "\n")


def profile(tmp_path: Path, command: str, restore: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text("\n".join([
        "apiVersion: firedrill.dev/v1alpha1", "kind: TargetProfile", "name: recover-test", "flavor: volcano",
        "namespace: default", "queue: default", "canary_image: firedrill-canary:local", "fault:", "  method: command",
        f"  command_template: {json.dumps(command)}", f"  restore_template: {json.dumps(restore)}",
        "  timeout_seconds: 20", ""]))
    return path


def killed_after_injecting(kubeconfig: str, node: str, command: str, restore: str, run: str,
                           expire: float | None = None) -> None:
    """A driller child injects the command fault through the harness's code, and is SIGKILLed once it is
    confirmed: no finalizer, no rollback."""
    extra = [] if expire is None else [f"{expire:g}"]
    child = subprocess.Popen([sys.executable, "-c", DRILLER, kubeconfig, node, command, restore, run, *extra],
                             cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "INJECTED"
    finally:
        child.kill()
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()


def test_a_run_killed_mid_fault_is_refused_until_recover_undoes_it(cluster: Cluster, driver: KubeDriver,
                                                                     state: Path, tmp_path: Path) -> None:
    script = tmp_path / "agent_signal.py"
    script.write_text(AGENT_SIGNAL)
    node = cluster.spec.node_names()[1]
    command = f"{sys.executable} {script} {cluster.data_dir} {{node}} SIGUSR1"
    restore = f"{sys.executable} {script} {cluster.data_dir} {{node}} SIGUSR2"
    kubeconfig = str(cluster.kubeconfig)
    killed_after_injecting(kubeconfig, node, command, restore, "fdkilled")
    try:
        assert not renewing(driver, node), "the fault was to outlive the run that injected it"
        journals = list(journals_for(driver.host))
        assert [j.run for j in journals] == ["fdkilled"] and not journals[0].running
        [action] = journals[0].unfinished
        assert action.subject == node and action.undo == (Undo(UndoKind.COMMAND, argv=tuple(restore.replace(
            "{node}", node).split())),)

        runner = CliRunner()
        features = str(REPO / "features")
        prof = str(profile(tmp_path, command, restore))
        refused = runner.invoke(app, ["run", "--dry-run", "--kubeconfig", kubeconfig, "--profile", prof,
                                      "--features", features])
        assert refused.exit_code == 4, refused.output
        assert "run fdkilled (its process is gone)" in refused.stderr and "SIGUSR1" in refused.stderr
        assert f"firedrill recover --kubeconfig {kubeconfig} --profile {prof}" in refused.stderr

        looked = runner.invoke(app, ["recover", "--kubeconfig", kubeconfig, "--dry-run"])
        assert looked.exit_code == 0 and "would undo" in looked.stdout and "SIGUSR2" in looked.stdout
        assert not renewing(driver, node)  # a dry run runs nothing

        done = runner.invoke(app, ["recover", "--kubeconfig", kubeconfig, "--profile", prof])
        assert done.exit_code == 0, done.output
        assert f"undone: command on node {node}" in done.stdout
        assert f"ran '{restore.replace('{node}', node)}'" in done.stdout
        assert renewing(driver, node), "recover ran the restore command: the agent heartbeats again"
        assert list(journals_for(driver.host)) == []  # settled: kept under done/ as a record
        kept = read_journal(state / "journals" / next((state / "journals").iterdir()).name / "done" /
                            "fdkilled.jsonl")
        assert not kept.unfinished and "recovered by firedrill recover" in kept.closures[action.id].how

        again = runner.invoke(app, ["recover", "--kubeconfig", kubeconfig])
        assert again.exit_code == 0 and "Nothing to recover" in again.stdout
        planned = runner.invoke(app, ["run", "--dry-run", "--kubeconfig", kubeconfig, "--profile", prof,
                                      "--features", features])
        assert planned.exit_code in (0, 3), planned.output  # the plan, no refusal
    finally:
        cluster.agents[node].signal(signal.SIGUSR2)  # heal the partition whatever happened


def test_a_fault_only_a_person_could_undo_closes_once_its_node_serves_again(cluster: Cluster, driver: KubeDriver,
                                                                            state: Path) -> None:
    node = cluster.spec.node_names()[0]
    journal = FaultJournal.for_target("fdbyhand", driver.host)
    try:
        journal.intend(f"power off node {node}", node, "command",
                       (Undo(UndoKind.BY_HAND, note="power it on from the BMC's web page"),))
        ghost = journal.intend("power off node gone-node", "gone-node", "command",
                               (Undo(UndoKind.BY_HAND, note="power it on from the BMC's web page"),))
    finally:
        journal.end()
    dead(journal)
    found = leftovers(driver.host, driver)  # a connected run looks at the nodes: the first is Ready again
    assert [[a.id for a in f.state.unfinished] for f in found] == [[ghost]]
    stuck = CliRunner().invoke(app, ["recover", "--kubeconfig", str(cluster.kubeconfig)])
    assert stuck.exit_code == 1 and "needs a person: power off node gone-node" in stuck.stdout
    assert "power it on from the BMC's web page" in stuck.stdout and "1 fault(s) still need undoing" in stuck.stderr
    assert driver.find(NODE, "gone-node") is None


def test_the_intent_is_on_disk_before_the_fault_command_runs(cluster: Cluster, driver: KubeDriver, state: Path,
                                                            tmp_path: Path) -> None:
    node = cluster.spec.node_names()[0]
    journal = FaultJournal.for_target("fdbefore", driver.host)
    check = tmp_path / "check.py"  # the "fault": exits 0 only if the journal already holds its intent
    check.write_text("import sys\nsys.exit(0 if '\"intent\"' in open(sys.argv[1]).read() else 3)\n")
    faults = ClusterFaults(driver, "fdbefore", FaultSettings(
        FaultMethod.COMMAND, command_template=f"{sys.executable} {check} {journal.path} {{node}}",
        timeout_seconds=2), poll=0.2, intend=journal.intend_fault)
    try:
        record = faults.inject(node, FaultMethod.COMMAND)
    finally:
        journal.end()
    assert "rc 0" in record.detail, record.detail
    assert not record.confirmed  # the node never went down: nothing but the journal was checked



def test_recover_deletes_what_the_run_made_and_recreates_the_node_it_deleted(cluster: Cluster, driver: KubeDriver,
                                                                              state: Path) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "firedrill-kubelet-stop-ghost",
                                                           "namespace": "default"},
           "spec": {"containers": [{"name": "stop", "image": "busybox:1.36"}]}}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "deleted-node",
                                                             "labels": {"firedrill.dev/chaos": "allowed"}}}
    driver.create(pod)
    journal = FaultJournal.for_target("fdmade", driver.host)
    try:
        journal.intend("stop the kubelet of node ghost", "ghost", "kubelet-stop", (Undo(
            UndoKind.DELETE, api_version="v1", object_kind="Pod", name="firedrill-kubelet-stop-ghost",
            namespace="default"),))
        journal.intend("delete Node deleted-node", "deleted-node", "delete-node",
                       (Undo(UndoKind.RECREATE, object_kind="Node", name="deleted-node", manifest=node),))
    finally:
        journal.end()
    dead(journal)
    try:
        runner = CliRunner()
        first = runner.invoke(app, ["recover", "--kubeconfig", str(cluster.kubeconfig)])
        assert first.exit_code == 0, first.output
        lines = first.stdout.splitlines()  # newest first: the Node, then the pod
        assert "recreated Node deleted-node" in lines[0] and "deleted Pod firedrill-kubelet-stop-ghost" in lines[1]
        assert driver.find(RESOURCES[("v1", "Pod")], "firedrill-kubelet-stop-ghost", "default") is None
        assert driver.get(NODE, "deleted-node")["metadata"]["labels"] == {"firedrill.dev/chaos": "allowed"}
        second = runner.invoke(app, ["recover", "--kubeconfig", str(cluster.kubeconfig)])
        assert second.exit_code == 0 and "Nothing to recover" in second.stdout  # settled; twice is harmless
    finally:
        driver.delete(NODE, "deleted-node")


def test_what_a_run_leaves_on_the_cluster_itself_refuses_the_next_run_and_recover_removes_it(
        cluster: Cluster, driver: KubeDriver, state: Path, tmp_path: Path) -> None:
    """A lost CI runner took its journal with it: the cluster's own marks (a drill-labelled pod, the reference
    platform's Xid annotation, the straggler taint) refuse the next run and `recover` removes exactly them; the
    customer's own taint and annotation stay."""
    node = cluster.spec.node_names()[0]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "fdlost-other-0", "namespace": "default", "labels": {RUN_LABEL: "fdlost"}},
           "spec": {"containers": [{"name": "hold", "image": "firedrill-canary:local"}]}}
    xid = json.dumps([{"id": "fdlost-gpu-1", "gpu": 3, "instance": None, "xid": 79}])
    customer_taint = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
    driver.create(pod)
    driver.patch(NODE, node, {"metadata": {"annotations": {INJECT_ANNOTATION: xid, "example.com/owner": "ops"}},
                              "spec": {"taints": [customer_taint, {"key": STRAGGLER_TAINT, "effect": "NoSchedule"}]}})
    try:
        marks = cluster_marks(driver)
        assert [m.what.split(" (")[0] for m in marks] == [
            "pod default/fdlost-other-0 of drill run fdlost", f"node {node} carries {INJECT_ANNOTATION}",
            f"node {node} is tainted {STRAGGLER_TAINT}:NoSchedule"]
        with pytest.raises(LeftBroken) as refused:
            cluster_target(Path(str(cluster.kubeconfig)), None, reference_profile(),
                           recover_command="firedrill recover --kubeconfig K")
        text = str(refused.value)
        assert "pod default/fdlost-other-0 of drill run fdlost" in text and INJECT_ANNOTATION in text, text
        assert "undo them with: firedrill recover --kubeconfig K" in text, text

        runner = CliRunner()
        looked = runner.invoke(app, ["recover", "--kubeconfig", str(cluster.kubeconfig), "--dry-run"])
        assert looked.exit_code == 0 and looked.stdout.count("would undo:") == 3, looked.output
        assert len(cluster_marks(driver)) == 3  # a dry run touches nothing
        done = runner.invoke(app, ["recover", "--kubeconfig", str(cluster.kubeconfig)])
        assert done.exit_code == 0, done.output
        assert "deleted Pod fdlost-other-0" in done.stdout and done.stdout.count("patched Node") == 2, done.stdout
        assert cluster_marks(driver) == []
        after = driver.get(NODE, node)
        assert after["metadata"]["annotations"].get("example.com/owner") == "ops"
        assert INJECT_ANNOTATION not in after["metadata"]["annotations"]
        assert after["spec"]["taints"] == [customer_taint]
        again = runner.invoke(app, ["recover", "--kubeconfig", str(cluster.kubeconfig)])
        assert again.exit_code == 0 and "Nothing to recover" in again.stdout, again.output
    finally:
        driver.delete(RESOURCES[("v1", "Pod")], "fdlost-other-0", "default", grace_seconds=0)
        driver.patch(NODE, node, {"metadata": {"annotations": {INJECT_ANNOTATION: None, "example.com/owner": None}},
                                  "spec": {"taints": None}})


def test_a_fault_that_undoes_itself_heals_without_recover_and_its_journal_says_when(
        cluster: Cluster, driver: KubeDriver, state: Path, tmp_path: Path) -> None:
    """fault.expire_seconds: the command schedules its own undo (as `systemd-run --on-active={expire_seconds}`
    would); the run that injected it is SIGKILLed, nobody runs recover, and the node heals by itself. The journal
    said when; the next connected run closes the entry once that instant passed and the node serves."""
    script = tmp_path / "agent_signal.py"
    script.write_text(AGENT_SIGNAL)
    node = cluster.spec.node_names()[1]
    signal_to = f"{sys.executable} {script} {cluster.data_dir} {{node}}"
    scheduled = f"{signal_to} SIGUSR1 && (sleep {{expire_seconds}}; {signal_to} SIGUSR2) >/dev/null 2>&1 &"
    command = f"sh -c {shlex.quote(scheduled)}"
    restore = f"{signal_to} SIGUSR2"
    expire = 6.0
    killed_after_injecting(str(cluster.kubeconfig), node, command, restore, "fdexpiring", expire)
    try:
        [journal] = list(journals_for(driver.host))
        [action] = journal.unfinished
        assert action.expires_by_itself and action.undo_by is not None
        assert (action.undo_by - action.at).total_seconds() == pytest.approx(expire, abs=0.01)
        assert "sleep 6;" in action.what  # the rendered command, as it ran
        text = left_broken(leftovers(driver.host), "firedrill recover")
        assert f"it undoes itself by {action.undo_by:%Y-%m-%d %H:%M:%S} UTC" in text, text
        wait_until(lambda: renewing(driver, node, within=1.5), expire + 10, f"{node} to heal by itself")
        assert leftovers(driver.host, driver) == []  # its instant passed and the node serves: closed, saying so
        [closed] = read_journal(journal.path).closures.values()
        assert "after the fault's own expiry" in closed.how
    finally:
        cluster.agents[node].signal(signal.SIGUSR2)
