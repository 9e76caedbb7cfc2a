"""Ray's state and Job API answers parsed into records (drills.ray.state).

The answers are written in the shapes Ray 2.60's dashboard gives (the state API's ``data.result.result`` envelope,
its node, actor and placement group columns; docs/RAY.md); ``tests/realray/test_driver.py`` reads the same from a
real cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from drills.ray.state import (ActorState, JobStatus, PlacementState, RayError, parse_actors, parse_job, parse_nodes,
                              parse_placement_groups, state_rows)


def envelope(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"result": True, "msg": "", "data": {"result": {"total": len(rows), "num_after_truncation": len(rows),
                                                          "result": rows, "partial_failure_warning": None}}}


def test_nodes_keep_liveness_gpus_and_why_a_dead_one_died() -> None:
    nodes = parse_nodes(envelope([
        {"node_id": "aa", "node_ip": "127.0.0.1", "is_head_node": True, "state": "ALIVE", "node_name": "head",
         "resources_total": {"CPU": 1.0, "memory": 1e9}, "labels": {"ray.io/node_id": "aa"}},
        {"node_id": "bb", "node_ip": "127.0.0.1", "is_head_node": False, "state": "DEAD", "node_name": "w1",
         "state_message": "Unexpected termination: health check failed due to missing too many heartbeats",
         "resources_total": {"CPU": 1.0, "GPU": 8.0, "fd_node_w1": 1.0}, "end_time_ms": 1764964800123}]))
    head, dead = nodes
    assert head.head and head.alive and head.gpus == 0 and head.end_time_ms is None
    assert (dead.name, dead.alive, dead.gpus, dead.end_time_ms) == ("w1", False, 8, 1764964800123)
    assert "missing too many heartbeats" in dead.state_message and dead.resources["fd_node_w1"] == 1.0


def test_actors_and_placement_groups_say_where_they_are_and_an_unplaced_bundle_has_no_node() -> None:
    (actor,) = parse_actors(envelope([{"actor_id": "a1", "class_name": "RayTrainWorker", "state": "DEAD",
                                       "name": "", "node_id": "bb", "pid": 4242,
                                       "death_cause": {"actor_died_error_context": {
                                           "error_message": "The actor died because its node has died."}}}]))
    assert (actor.state, actor.node_id, actor.pid) == (ActorState.DEAD, "bb", 4242)
    assert actor.death_cause == "The actor died because its node has died."
    (pending,) = parse_placement_groups(envelope([{
        "placement_group_id": "pg1", "name": "gang-a", "state": "PENDING", "strategy": "STRICT_SPREAD",
        "bundles": [{"bundle_id": "b0", "node_id": None, "unit_resources": {"GPU": 8.0}},
                    {"bundle_id": "b1", "node_id": "", "unit_resources": {"GPU": 8.0}}]}]))
    assert pending.state is PlacementState.PENDING and pending.placed == () and len(pending.bundles) == 2
    assert pending.bundles[0].resources == {"GPU": 8.0}


def test_a_state_a_newer_ray_invents_is_unknown_not_an_error() -> None:
    (actor,) = parse_actors(envelope([{"actor_id": "a", "state": "HIBERNATING"}]))
    assert actor.state is ActorState.UNKNOWN
    assert parse_job({"submission_id": "s", "status": "PAUSED"}).status is JobStatus.UNKNOWN


def test_a_job_and_its_end() -> None:
    job = parse_job({"submission_id": "raysubmit_1", "status": "FAILED", "entrypoint": "python canary.py",
                     "message": "Job entrypoint command failed with exit code 1", "error_type": "JOB_ENTRYPOINT"})
    assert job.status.finished and job.status is JobStatus.FAILED and "exit code 1" in job.message
    assert not JobStatus.RUNNING.finished


@pytest.mark.parametrize(("doc", "said"), [
    ([], "answer is a list, not an object"),
    ({"result": False, "msg": "Failed to query: timeout"}, "refused to list nodes: Failed to query: timeout"),
    ({"result": True, "data": {}}, "no data.result.result list (keys: data, result)"),
    ({"result": True, "data": {"result": {"result": ["x"]}}}, "are not a list of objects"),
])
def test_an_answer_of_another_shape_is_refused_naming_what_was_wrong(doc: Any, said: str) -> None:
    with pytest.raises(RayError, match=said.replace("(", r"\(").replace(")", r"\)")):
        state_rows(doc, "nodes")
    with pytest.raises(RayError, match="names no job"):
        parse_job({"status": "RUNNING"})
