"""The invariants watched in every scenario (docs/INVARIANTS.md), as a pure book: tables of what the harness saw
and the breaches it must (and must not) report."""

from __future__ import annotations

import json

import pytest

from drills.records.verdict import DrillResult, ScenarioHalted, Verdict
from drills.scenario.invariants import (Identity, Invariant, InvariantBook, PodView, identity_from_lines,
                                        node_shares_gpus, pod_view)

A, B, C = "GPU-aaaa", "GPU-bbbb", "GPU-cccc"


def running(uid: str, node: str = "n1", job: str = "") -> PodView:
    return PodView(uid, f"pod-{uid}", node, True, job, True)


def book_with(*pods: tuple[PodView, Identity], sharing: dict[str, bool] | None = None) -> tuple[InvariantBook, list]:
    book, found = InvariantBook(), []
    for node, shares in (sharing or {"n1": False, "n2": False}).items():
        found += book.node(node, shares)
    for view, ident in pods:
        found += book.pod(view)
        found += book.identity(view.uid, ident)
    return book, found


def test_two_running_pods_given_the_same_gpu_break_exclusivity_naming_gpu_node_and_pods() -> None:
    _, found = book_with((running("1"), Identity((A, B))), (running("2"), Identity((B, C))))
    assert [b.invariant for b in found] == [Invariant.GPU_EXCLUSIVE]
    assert found[0].evidence == {"gpus": [B], "nodes": ["n1"], "pods": ["pod-1", "pod-2"]}
    assert "GPU GPU-bbbb on node n1 serves 2 running pods at once: pod-1, pod-2" in found[0].message


def test_every_gpu_two_pods_share_is_named_in_one_breach() -> None:
    _, found = book_with((running("1"), Identity((A, B, C))), (running("2"), Identity((C, A))))
    assert len(found) == 1 and found[0].evidence["gpus"] == [A, C]
    assert "GPUs GPU-aaaa, GPU-cccc on node n1 each serve 2 running pods at once: pod-1, pod-2" in found[0].message


def test_distinct_gpus_a_finished_pod_and_a_deleting_pod_break_nothing() -> None:
    _, found = book_with((running("1"), Identity((A,))), (running("2"), Identity((B,))))
    assert found == []
    book, found = book_with((running("1"), Identity((A,))))
    assert book.pod(PodView("2", "pod-2", "n1", False, "", True)) == []  # Terminating on a dead node: not running
    assert book.identity("2", Identity((A,))) == []
    assert book.gone("1") == [] and book.pod(running("3")) == [] and book.identity("3", Identity((A,))) == []


def test_sharing_is_allowed_only_where_the_node_promises_it_and_judged_once_the_node_is_known() -> None:
    pods = ((running("1"), Identity((A,))), (running("2"), Identity((A,))))
    assert book_with(*pods, sharing={"n1": True})[1] == []
    book = InvariantBook()
    for view, ident in pods:
        assert book.pod(view) == [] and book.identity(view.uid, ident) == []  # node not asked yet: no verdict
    assert [b.invariant for b in book.node("n1", False)] == [Invariant.GPU_EXCLUSIVE]


def test_a_breach_is_reported_once() -> None:
    book, found = book_with((running("1"), Identity((A,))), (running("2"), Identity((A,))))
    assert len(found) == 1
    assert book.pod(running("1")) == [] and book.identity("2", Identity((A,))) == []


def test_a_duplicated_rank_names_the_rank_the_pods_and_the_missing_ranks() -> None:
    """Judged once every running rank of the job has said which it is, so the ranks missing are known."""
    job = "Job/uid-1"
    book = InvariantBook()
    book.node("n1", False), book.node("n2", False)
    views = [running("1", "n1", job), running("2", "n2", job), running("3", "n2", job)]
    assert [b for v in views for b in book.pod(v)] == []
    assert book.identity("1", Identity((A,), 0, 3, "1")) == [] and book.identity("2", Identity((B,), 0, 3, "1")) == []
    found = book.identity("3", Identity((C,), 1, 3, "1"))
    assert [b.invariant for b in found] == [Invariant.ONE_WORLD]
    assert found[0].evidence["rank"] == 0 and found[0].evidence["missing_ranks"] == [2]
    assert "rank 0 of generation 1 runs twice at once: pod-1, pod-2; rank(s) 2 missing" in found[0].message


@pytest.mark.parametrize("second", [
    Identity((B,), 0, 2, "2"),           # the same rank in the next generation (a restart under way)
    Identity((B,), 1, 2, "1"),           # another rank
])
def test_ranks_of_one_world_or_of_two_generations_are_no_breach(second: Identity) -> None:
    job = "Job/uid-1"
    assert book_with((running("1", "n1", job), Identity((A,), 0, 2, "1")), (running("2", "n2", job), second))[1] == []


def test_the_same_rank_in_two_jobs_is_no_breach() -> None:
    assert book_with((running("1", "n1", "Job/a"), Identity((A,), 0, 1, "0")),
                     (running("2", "n2", "Job/b"), Identity((B,), 0, 1, "0")))[1] == []


def test_pods_still_waiting_for_their_identity() -> None:
    book = InvariantBook()
    book.pod(running("1"))
    book.pod(PodView("2", "pod-2", "n1", True, "", False))  # asks for no GPU
    book.pod(PodView("3", "pod-3", "", False, "", True))  # not running yet
    assert [p.uid for p in book.needs_identity()] == ["1"]
    book.identity("1", Identity(None))
    assert book.needs_identity() == []


def test_identity_from_the_workloads_first_lines() -> None:
    canary = json.dumps({"seq": 1, "event": "start", "rank": 1, "world_size": 2, "generation": "3",
                         "pid": 7, "config": {}, "gpus": [A, B]})
    assert identity_from_lines(["not json", canary]) == Identity((A, B), 1, 2, "3")
    inference = json.dumps({"seq": 1, "event": "start", "pid": 7, "config": {}, "gpus": None})
    assert identity_from_lines([inference]) == Identity(None)
    probe = "FIREDRILL-PROBE " + json.dumps({"event": "report", "ok": True,
                                             "devices": [{"index": 0, "uuid": "MIG-1111"}]})
    assert identity_from_lines([probe]) == Identity(("MIG-1111",))
    assert identity_from_lines([json.dumps({"event": "step", "step": 1})]) is None
    assert identity_from_lines(['{"event": "start", "gpus": [1', ""]) is None  # torn at the read limit


def test_pod_view_counts_a_pod_while_it_runs() -> None:
    pod = {"metadata": {"uid": "u", "name": "p", "labels": {"firedrill.dev/gang": "g"},
                        "ownerReferences": [{"kind": "Job", "uid": "j", "controller": True}]},
           "spec": {"nodeName": "n1", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
           "status": {"phase": "Running"}}
    assert pod_view(pod) == PodView("u", "p", "n1", True, "Job/j", True)
    pod["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    assert not pod_view(pod).running
    del pod["metadata"]["ownerReferences"]
    assert pod_view(pod).job == "gang/g"
    pod["spec"]["containers"] = [{"resources": {"limits": {"cpu": "1"}}}]
    assert not pod_view(pod).gpus_requested


@pytest.mark.parametrize("labels,shares", [
    ({}, False),
    ({"firedrill.dev/partition-mode": "mig-single"}, False),
    ({"firedrill.dev/partition-mode": "time-slicing"}, True),
    ({"firedrill.dev/partition-mode": "hami"}, True),
    ({"nvidia.com/gpu.sharing-strategy": "mps"}, True),
    ({"nvidia.com/gpu.replicas": "4"}, True),
    ({"nvidia.com/gpu.replicas": "many"}, False),
])
def test_which_nodes_promise_sharing(labels: dict[str, str], shares: bool) -> None:
    assert node_shares_gpus({"metadata": {"labels": labels}}) is shares


def test_a_halted_result_fails_and_ends_the_next_wait() -> None:
    result = DrillResult("gang-submission")
    result.raise_if_halted()
    result.halt("GPU exclusivity broken: ...")
    result.halt("a second breach")
    assert result.verdict is Verdict.FAIL and result.halted == "GPU exclusivity broken: ..."
    assert result.findings == ["GPU exclusivity broken: ...", "a second breach"]
    with pytest.raises(ScenarioHalted, match="GPU exclusivity broken"):
        result.raise_if_halted()


def test_a_silent_rank_lets_the_rest_of_its_job_be_judged() -> None:
    """A rank whose workload never names itself is given up on; the job's other ranks are then judged (the
    answer to that identity carries the breach the job was waiting for)."""
    job = "Job/uid-1"
    book = InvariantBook()
    book.node("n1", False)
    for uid in ("1", "2", "3"):
        book.pod(running(uid, "n1", job))
    assert book.identity("1", Identity((A,), 0, 3, "1")) == [] and book.identity("2", Identity((B,), 0, 3, "1")) == []
    found = book.identity("3", Identity(None))
    assert [b.invariant for b in found] == [Invariant.ONE_WORLD]
