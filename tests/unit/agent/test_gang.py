"""The job contract as pure functions: rank specs, gang counts, the fenced checkpoint patch."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import pytest

from refplatform.agent.errors import WorkloadConfigError
from refplatform.agent.gang import (
    RankSpec,
    checkpoint_patch,
    count_gang,
    job_checkpoint_step,
    job_epoch,
    saved_by_all,
    unfenced_checkpoint_patch,
)

AT = datetime(2026, 11, 30, 0, 0, 1, 250_000, tzinfo=UTC)


def pod(rank: int, epoch: int = 0, world: int = 2, phase: str = "Running", **meta: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if "ready" in meta:
        status["conditions"] = [{"type": "Ready", "status": meta.pop("ready")}]
    return {
        "metadata": {
            "name": f"j-worker-{rank}",
            "namespace": "team-a",
            "labels": {"volcano.sh/job-name": "j", "volcano.sh/task-spec": "worker"},
            "annotations": {"firedrill.dev/rank": str(rank), "firedrill.dev/world-size": str(world),
                            "firedrill.dev/epoch": str(epoch), "volcano.sh/task-index": str(rank)},
            **meta,
        },
        "status": status,
    }


def test_rank_spec_from_the_contracts_labels_and_annotations() -> None:
    spec = RankSpec.from_pod(pod(1, epoch=3))
    assert spec == RankSpec("team-a", "j", 1, 2, 3)
    assert spec.job_path == "/apis/batch.volcano.sh/v1alpha1/namespaces/team-a/jobs/j"
    assert spec.selector == "volcano.sh/job-name=j"
    lone = pod(0)
    del lone["metadata"]["labels"]["volcano.sh/job-name"]
    assert RankSpec.from_pod(lone) is None  # trains alone
    bad = pod(5)
    with pytest.raises(WorkloadConfigError, match="not below"):
        RankSpec.from_pod(bad)


@pytest.mark.parametrize(
    "pods, complete, ready, newest",
    [
        ([pod(0), pod(1)], True, {0, 1}, 0),
        ([pod(0)], False, {0}, 0),
        ([pod(0), pod(1, phase="Pending")], False, {0}, 0),
        ([pod(0), pod(1, deletionTimestamp="2026-11-30T00:00:00Z")], False, {0}, 0),  # terminating
        ([pod(0), pod(1, ready="False")], False, {0}, 0),  # marked not ready (unreachable node)
        ([pod(0), pod(1, epoch=1)], False, {0}, 1),  # a rank of the next epoch is no peer
        ([pod(0, epoch=1), pod(1, epoch=1)], False, set(), 1),
        ([pod(0), pod(0), pod(1, phase="Succeeded")], False, {0}, 0),  # duplicates count once
    ],
)
def test_count_gang(pods: list[dict[str, Any]], complete: bool, ready: set[int], newest: int) -> None:
    count = count_gang(pods, epoch=0, world_size=2)
    assert (count.complete, set(count.ready_ranks), count.newest_epoch) == (complete, ready, newest)
    assert count.describe() == f"{len(ready)}/2 ranks of epoch 0 running"


def job(epoch: str | None = "0", **annotations: str) -> dict[str, Any]:
    ann = dict(annotations)
    if epoch is not None:
        ann["firedrill.dev/epoch"] = epoch
    return {"metadata": {"name": "j", "resourceVersion": "41", "annotations": ann}, "spec": {"minAvailable": 2}}


def test_the_checkpoint_patch_is_fenced_on_the_epoch() -> None:
    ops = checkpoint_patch(2, 40, AT)
    assert ops == [
        {"op": "test", "path": "/metadata/annotations/firedrill.dev~1epoch", "value": "2"},
        {"op": "add", "path": "/metadata/annotations/firedrill.dev~1checkpoint-step", "value": "40"},
        {"op": "add", "path": "/metadata/annotations/firedrill.dev~1checkpoint-time", "value": "2026-11-30T00:00:01.250000Z"},
    ]
    written = jsonpatch.apply_patch(job("2", **{"firedrill.dev/checkpoint-step": "30"}), ops)
    assert (job_checkpoint_step(written), job_epoch(written)) == (40, 2)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):  # the server answers 422
        jsonpatch.apply_patch(job("3"), ops)


def test_a_job_without_an_epoch_is_fenced_on_its_resource_version() -> None:
    bare = job(None)
    del bare["metadata"]["annotations"]
    ops = unfenced_checkpoint_patch(bare, 10, AT)
    assert ops[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}
    written = jsonpatch.apply_patch(copy.deepcopy(bare), ops)
    assert job_checkpoint_step(written) == 10 and job_epoch(written) is None
    moved = dict(bare, metadata=dict(bare["metadata"], resourceVersion="42"))
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, ops)


def test_job_reads_tolerate_missing_and_bad_values() -> None:
    assert (job_epoch(job(None)), job_checkpoint_step(job())) == (None, 0)
    assert (job_epoch(job("x")), job_checkpoint_step(job(**{"firedrill.dev/checkpoint-step": "-3"}))) == (None, 0)


def saved(rank: int, step: int | None, epoch: int = 0, world: int = 3) -> dict[str, Any]:
    p = pod(rank, epoch=epoch, world=world)
    if step is not None:
        p["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] = str(step)
    return p


@pytest.mark.parametrize(
    "pods, expected",
    [
        ([saved(0, 0), saved(1, 20), saved(2, 10)], 10),
        ([saved(0, 50), saved(1, 20)], None),  # rank 2 has no pod
        ([saved(1, 20), saved(2, None)], None),  # rank 2 published nothing yet
        ([saved(1, 20), saved(2, 10), saved(2, 30, epoch=1)], 10),  # the next epoch's pods do not count
        ([saved(1, 20), saved(2, 10), saved(2, 30)], 20),  # duplicates: the newest
    ],
)
def test_saved_by_all_is_the_newest_checkpoint_every_other_rank_published(pods: list[dict[str, Any]], expected: int | None) -> None:
    assert saved_by_all(pods, epoch=0, world_size=3, me=0) == expected


def test_a_gang_of_one_waits_for_no_one() -> None:
    assert saved_by_all([], epoch=0, world_size=1, me=0) == 2**62
