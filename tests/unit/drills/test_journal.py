"""The fault journal (drills.target.journal): written before the act, durable, readable after a kill."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from drills.kube.timeline import Timeline
from drills.target.journal import (ARCHIVE_NAME, FaultJournal, JournalError, Undo, UndoKind, journals_for,
                                   process_alive, process_start, read_journal, state_dir, target_key)
from drills.target.recover import left_broken, leftovers

SERVER = "https://127.0.0.1:6443"
RESTORE = Undo(UndoKind.COMMAND, argv=("ipmitool", "-H", "gpu-3-bmc", "chassis", "power", "on"))


@pytest.fixture
def journal() -> Iterator[Callable[..., FaultJournal]]:
    """Opens a run's journal under a root; ends every one opened when the test ends (a journal holds its file)."""
    opened: list[FaultJournal] = []

    def open_one(root: Path, run: str = "run-1") -> FaultJournal:
        opened.append(FaultJournal.for_target(run, SERVER, "profile.yaml", root=root))
        return opened[-1]

    yield open_one
    for j in opened:
        j.end()


def test_an_intent_is_on_disk_before_the_act_and_its_closure_after(tmp_path: Path, journal: Callable[..., FaultJournal]) -> None:
    j = journal(tmp_path)
    first = j.intend("power off node gpu-3", "gpu-3", "command", (RESTORE,))
    second = j.intend("stop the kubelet of gpu-4", "gpu-4", "kubelet-stop",
                      (Undo(UndoKind.DELETE, api_version="v1", object_kind="Pod", name="fd-stop", namespace="kube-system"),))
    state = read_journal(j.path)  # another reader, as after a SIGKILL: nothing was left in a buffer
    assert [a.id for a in state.unfinished] == [second, first]  # newest first: the order to undo them in
    assert state.unfinished[1].undo == (RESTORE,) and state.server == SERVER and state.run == "run-1"
    j.close(first, "undone by the run's rollback")
    state = read_journal(j.path)
    assert [a.id for a in state.unfinished] == [second]
    assert state.closures[first].how == "undone by the run's rollback"


def test_every_kind_of_undo_survives_the_round_trip(tmp_path: Path, journal: Callable[..., FaultJournal]) -> None:
    undos = (RESTORE,
             Undo(UndoKind.DELETE, api_version="v1", object_kind="Pod", name="p", namespace="kube-system"),
             Undo(UndoKind.RECREATE, object_kind="Node", name="n", manifest={"apiVersion": "v1", "kind": "Node",
                                                                             "metadata": {"name": "n"}}),
             Undo(UndoKind.SIGNAL, pids=((os.getpid(), process_start(os.getpid())),), signal=int(signal.SIGCONT)),
             Undo(UndoKind.BY_HAND, note="start the kubelet by hand"),
             Undo(UndoKind.PATCH, api_version="v1", object_kind="Node", name="n",
                  manifest={"metadata": {"annotations": {"firedrill.dev/inject-xid": None}}}))
    j = journal(tmp_path)
    j.intend("everything", "n", "command", undos)
    assert read_journal(j.path).unfinished[0].undo == undos
    assert [u.describe() for u in undos] == [
        "ipmitool -H gpu-3-bmc chassis power on", "kubectl delete pod p -n kube-system --ignore-not-found",
        "recreate Node n from the journal's manifest", f"kill -{int(signal.SIGCONT)} -- -{os.getpid()}",
        "start the kubelet by hand",
        """kubectl patch node n --type merge -p '{"metadata":{"annotations":{"firedrill.dev/inject-xid":null}}}'"""]


def test_a_line_torn_by_a_kill_is_skipped_and_named(tmp_path: Path, journal: Callable[..., FaultJournal]) -> None:
    j = journal(tmp_path)
    j.intend("power off node gpu-3", "gpu-3", "command", (RESTORE,))
    with open(j.path, "a") as fh:
        fh.write('{"intent":"2","what":"power off no')  # the process died in the middle of this write
    state = read_journal(j.path)
    assert [a.what for a in state.unfinished] == ["power off node gpu-3"] and state.torn == [3]


def test_a_file_that_is_no_journal_is_refused_naming_it(tmp_path: Path, journal: Callable[..., FaultJournal]) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"intent": "1"}\n')
    with pytest.raises(JournalError, match="x.jsonl: not a Firedrill fault journal"):
        read_journal(path)


def test_each_run_writes_its_own_journal(tmp_path: Path, journal: Callable[..., FaultJournal]) -> None:
    journal(tmp_path)
    with pytest.raises(JournalError, match="a journal of run run-1 exists already"):
        journal(tmp_path)


def test_a_run_that_undid_everything_leaves_no_journal_behind_but_its_archive_copy(tmp_path: Path, journal: Callable[..., FaultJournal]) -> None:
    j = journal(tmp_path / "state")
    action = j.intend("power off node gpu-3", "gpu-3", "command", (RESTORE,))
    j.close(action, "undone by the run's rollback")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    copy = j.archive(run_dir)
    j.end()
    assert copy == run_dir / ARCHIVE_NAME and not j.path.exists()
    assert [json.loads(line).get("closed") for line in copy.read_text().splitlines()][-1] == action


def test_a_run_that_left_a_fault_keeps_its_journal_for_the_next(tmp_path: Path, journal: Callable[..., FaultJournal]) -> None:
    j = journal(tmp_path)
    j.intend("power off node gpu-3", "gpu-3", "command", (RESTORE,))
    j.end()
    assert j.path.exists()
    assert [s.run for s in journals_for(SERVER, tmp_path)] == ["run-1"]
    assert list(journals_for("https://10.0.0.1:6443", tmp_path)) == []  # another cluster's journals are apart


def test_a_live_run_is_told_from_a_dead_one(tmp_path: Path, journal: Callable[..., FaultJournal]) -> None:
    j = journal(tmp_path)
    j.intend("power off node gpu-3", "gpu-3", "command", (RESTORE,))
    assert read_journal(j.path).running  # this process wrote it and lives
    assert not process_alive(os.getpid(), process_start(os.getpid()) + 1)  # a recycled pid is another process
    lines = j.path.read_text().splitlines()
    header = json.loads(lines[0]) | {"pid": 2 ** 22 + 1}
    j.path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    assert not read_journal(j.path).running


def test_the_refusal_names_each_leftover_and_the_command_that_undoes_it(tmp_path: Path, journal: Callable[..., FaultJournal]) -> None:
    j = journal(tmp_path)
    j.intend("power off node gpu-3", "gpu-3", "command", (RESTORE,))
    found = leftovers(SERVER, root=tmp_path)
    text = left_broken(found, "firedrill recover --kubeconfig k")
    assert "power off node gpu-3" in text and "ipmitool -H gpu-3-bmc chassis power on" in text
    assert "still running" in text and "wait for it" in text  # this test's own process wrote it
    assert "firedrill recover" not in text  # nothing of a dead run to recover yet


def test_the_state_directory_is_the_users(tmp_path: Path) -> None:
    assert state_dir({"FIREDRILL_STATE_DIR": str(tmp_path)}) == tmp_path
    assert state_dir({"XDG_STATE_HOME": "/x/state", "HOME": "/home/u"}) == Path("/x/state/firedrill")
    assert state_dir({"HOME": "/home/u"}) == Path("/home/u/.local/state/firedrill")
    assert target_key("https://127.0.0.1:6443/") == target_key("HTTPS://127.0.0.1:6443")


class ListingDriver:
    """Answers list calls from fixed objects (the marks' reading is pure over them)."""

    def __init__(self, pods: list[dict], nodes: list[dict]) -> None:
        self.pods, self.nodes = pods, nodes

    def list(self, res: object, namespace: str | None = None, label_selector: str | None = None) -> list[dict]:
        return self.pods if getattr(res, "kind", "") == "Pod" else self.nodes


def test_the_cluster_s_own_marks_are_read_and_nothing_else() -> None:
    from drills.target.marks import cluster_marks

    job_pod = {"metadata": {"name": "fdx-0", "namespace": "ns", "labels": {"firedrill.dev/drill-run": "fdx"},
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "fdx",
                                                 "controller": True}]}, "status": {"phase": "Running"},
               "spec": {"nodeName": "n0"}}
    going = {"metadata": {"name": "fdy-0", "namespace": "ns", "labels": {"firedrill.dev/drill-run": "fdy"},
                          "deletionTimestamp": "2026-12-04T00:00:00Z"}}
    nodes = [{"metadata": {"name": "n1", "annotations": {"firedrill.dev/inject-throttle": "[]",
                                                         "firedrill.dev/inject-xid": "not json"}},
              "spec": {"taints": [{"key": "firedrill.dev/spare", "effect": "NoSchedule"}]}}]
    marks = cluster_marks(ListingDriver([job_pod, going], nodes))  # type: ignore[arg-type]
    assert [m.what for m in marks] == [
        "pod ns/fdx-0 of drill run fdx (Running on n0; made by Job fdx)",
        "node n1 carries firedrill.dev/inject-xid (not json)"]  # an empty throttle list is none; the spare taint
    assert marks[0].undo.describe() == "kubectl delete job fdx -n ns --ignore-not-found"  # is the platform's


class AnnotatingDriver:
    """One Node's annotations, as a merge patch changes them."""

    def __init__(self) -> None:
        self.annotations: dict[str, str] = {}
        self.timeline = Timeline()  # the target stamps a repair (an Xid removed) on its driver's clock

    def get(self, res: object, name: str) -> dict:
        return {"metadata": {"name": name, "annotations": dict(self.annotations)}}

    def patch(self, res: object, name: str, body: dict, *args: object) -> dict:
        for key, value in body["metadata"]["annotations"].items():
            if value is None:
                self.annotations.pop(key, None)
            else:
                self.annotations[key] = value
        return self.get(res, name)


def test_the_reference_platform_s_annotation_faults_are_written_down_first_and_closed_when_cleared(
        tmp_path: Path, journal: Callable[..., FaultJournal]) -> None:
    from drills.target.connect import Target
    from drills.target.profile import reference_profile

    driver = AnnotatingDriver()
    target = Target(driver, reference_profile())  # type: ignore[arg-type]
    target.journal = journal(tmp_path)
    target.inject_xid("n0", {"id": "r-1", "gpu": 3, "instance": None, "xid": 79})
    target.inject_throttle("n0", {"id": "r-2", "gpu": 1, "speed": 0.5})
    [xid, slow] = sorted(read_journal(target.journal.path).unfinished, key=lambda a: int(a.id))
    assert xid.what == "Xid 79 on GPU 3 of node n0 (Node annotation firedrill.dev/inject-xid)"
    assert slow.what == "GPU 1 of node n0 slowed to 0.5 (Node annotation firedrill.dev/inject-throttle)"
    assert xid.undo[0].describe() == ("kubectl patch node n0 --type merge -p "
                                      """'{"metadata":{"annotations":{"firedrill.dev/inject-xid":null}}}'""")
    target.clear_xids("n0")
    assert [a.id for a in read_journal(target.journal.path).unfinished] == [slow.id]
    target.clear_throttle("n0")
    assert read_journal(target.journal.path).unfinished == [] and driver.annotations == {}


def test_a_dead_runs_diagnostic_fleet_fault_and_held_gpu_are_marks_with_their_undo() -> None:
    from drills.target.marks import cluster_marks

    health = json.dumps({"gpus": {"0": {"state": "held", "since": 1.0, "reason": "burn-in failed: diagnostic"},
                                  "3": {"state": "burn-in", "since": 2.0, "reason": "its Xid 79 cleared"}}})
    nodes = [{"metadata": {"name": "n2", "annotations": {
        "firedrill.dev/inject-diag": '[{"id":"d","gpu":0,"result":"fail"}]',
        "firedrill.dev/inject-health": '[{"id":"h","reason":"XidStorm","until":9}]',
        "firedrill.dev/gpu-health": health}}}]
    marks = cluster_marks(ListingDriver([], nodes))  # type: ignore[arg-type]
    assert [m.what.split(" (")[0] for m in marks] == [
        "node n2 carries firedrill.dev/inject-diag", "node n2 carries firedrill.dev/inject-health",
        "node n2 holds GPU(s) 0 out of service until a person clears them"]  # a burn-in ends by itself
    assert marks[2].undo.describe() == ("kubectl patch node n2 --type merge -p "
                                        "'{\"metadata\":{\"annotations\":{\"firedrill.dev/clear-gpus\":\"0\"}}}'")
