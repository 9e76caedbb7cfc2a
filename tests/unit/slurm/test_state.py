"""Slurm's own answers, typed: ``squeue --json`` and ``sinfo --json`` as a real Slurm 22.05 gave them
(``slurm-22.05.json``, captured from tests/realslurm's cluster: a running requeueable job and a pending one, then
the same after one of the nodes was killed), and the shapes later releases use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drills.slurm.state import (JobState, NodeFlag, SlurmError, by_name, expand_nodes, gres_count, parse_jobs,
                                parse_nodes, tres_gpus)

CAPTURED = json.loads(Path(__file__).with_name("slurm-22.05.json").read_text())


def test_a_running_job_and_a_pending_one() -> None:
    running, pending = parse_jobs(CAPTURED["squeue"])
    assert (running.job_id, running.state, running.nodes, running.gres_per_node) == (
        1, JobState.RUNNING, ("slurm-node-0", "slurm-node-1"), 2)
    assert running.requeue and running.restarts == 0 and running.batch_host == "slurm-node-0"
    assert (pending.state, pending.reason, pending.nodes, pending.gres_per_node) == (
        JobState.PENDING, "Resources", (), 4)
    assert not running.state.ended and JobState.NODE_FAIL.ended


def test_after_a_node_died_the_job_is_requeued_and_waits_for_its_begin_time() -> None:
    requeued = parse_jobs(CAPTURED["squeue_after_kill"])[0]
    assert (requeued.state, requeued.reason, requeued.restarts, requeued.nodes) == (
        JobState.PENDING, "BeginTime", 1, ())
    assert requeued.eligible_at > parse_jobs(CAPTURED["squeue"])[0].eligible_at


def test_nodes_before_and_after_one_was_killed() -> None:
    before = by_name(parse_nodes(CAPTURED["sinfo"]))
    assert {n: (v.flags, v.gpus, v.gpus_used, v.serving) for n, v in before.items()} == {
        "slurm-node-0": (frozenset({NodeFlag.MIXED}), 4, 2, True),
        "slurm-node-1": (frozenset({NodeFlag.MIXED}), 4, 2, True)}
    after = by_name(parse_nodes(CAPTURED["sinfo_after_kill"]))
    assert after["slurm-node-1"].down and not after["slurm-node-1"].serving
    assert not after["slurm-node-0"].down


def test_later_releases_shapes_read_the_same() -> None:
    """23.02 and later: a job's state and a node's state are lists, numbers may be {"set", "number"} objects."""
    (job,) = parse_jobs({"jobs": [{"job_id": {"set": True, "number": 7}, "job_state": ["RUNNING"],
                                   "nodes": "gpu-[0-1]", "restart_cnt": {"set": True, "number": 2},
                                   "tres_per_node": "gres/gpu:8"}]})
    assert (job.job_id, job.state, job.nodes, job.restarts, job.gres_per_node) == (
        7, JobState.RUNNING, ("gpu-0", "gpu-1"), 2, 8)
    (node,) = parse_nodes({"nodes": [{"name": "gpu-0", "state": ["IDLE", "DRAIN"], "gres": "gpu:h100:8(S:0-1)"}]})
    assert node.flags == {NodeFlag.IDLE, NodeFlag.DRAIN} and node.gpus == 8 and not node.serving
    (odd,) = parse_jobs({"jobs": [{"job_id": 1, "job_state": "SOMETHING_NEW"}]})
    assert odd.state is JobState.UNKNOWN


@pytest.mark.parametrize(("text", "nodes"), [
    ("gpu-[0-1,3]", ("gpu-0", "gpu-1", "gpu-3")), ("a,b", ("a", "b")), ("", ()), (None, ()), ("(null)", ())])
def test_node_lists_expand(text: str | None, nodes: tuple[str, ...]) -> None:
    assert expand_nodes(text) == nodes


@pytest.mark.parametrize(("text", "count"), [
    ("gpu:4", 4), ("gpu:h100:8(S:0-1)", 8), ("gres:gpu:2", 2), ("gres/gpu:2", 2), ("gpu:2(IDX:0-1)", 2),
    ("cpu=2,node=1", 0), ("", 0), (None, 0)])
def test_gpus_in_gres_and_tres_text(text: str | None, count: int) -> None:
    assert gres_count(text) == count


@pytest.mark.parametrize(("text", "count"), [
    ("cpu=2,mem=1G,node=1,billing=2,gres/gpu=4", 4), ("gres/gpu=2,gres/gpu:h100=2", 2), ("cpu=2,node=1", 0),
    ("", 0), (None, 0)])
def test_gpus_allocated_in_a_tres_count(text: str | None, count: int) -> None:
    assert tres_gpus(text) == count


def test_who_a_job_is_and_what_it_holds() -> None:
    (job,) = parse_jobs({"jobs": [{"job_id": 7, "job_state": "RUNNING", "user_name": "alice", "account": "tenant-a",
                                   "qos": "tenant-gpu", "tres_alloc_str": "cpu=2,node=1,gres/gpu=2"}]})
    assert (job.user, job.account, job.qos, job.gpus_held) == ("alice", "tenant-a", "tenant-gpu", 2)


def test_what_is_not_slurm_s_answer_is_refused_naming_it() -> None:
    with pytest.raises(SlurmError, match="squeue --json gave no 'jobs' list"):
        parse_jobs({"meta": {}})
    with pytest.raises(SlurmError, match="sinfo --json gave no 'nodes' list"):
        parse_nodes({"jobs": []})
    with pytest.raises(SlurmError, match="cannot be read"):
        expand_nodes("gpu-[0-")
