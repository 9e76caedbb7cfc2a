"""The job coordinator: one poll per job, gang views with a staleness bound, fenced checkpoint records."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from refplatform.agent.clock import VirtualClock
from refplatform.agent.gang import RankSpec
from refplatform.agent.jobs import JobCoordinator
from refplatform.agent.workload import Fence, StallKind

from .fakeapi import FakeApi, unreachable

JOB = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/j"
PODS = "/api/v1/namespaces/default/pods"


class Env:
    def __init__(self) -> None:
        self.api = FakeApi()
        self.clock = VirtualClock()
        self.jobs = JobCoordinator(self.api, self.clock, poll_interval=0.5)

    def add_job(self, epoch: str | None = "0", **annotations: str) -> None:
        ann = dict(annotations)
        if epoch is not None:
            ann["firedrill.dev/epoch"] = epoch
        self.api.put_object(JOB, {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                  "metadata": {"name": "j", "namespace": "default", "annotations": ann},
                                  "spec": {"minAvailable": 2}})

    def add_pod(self, rank: int, epoch: int = 0, phase: str = "Running", job: str = "j", saved: int | None = None,
                **meta: Any) -> str:
        name = f"{job}-worker-{rank}-e{epoch}"
        annotations = {"firedrill.dev/rank": str(rank), "firedrill.dev/world-size": "2", "firedrill.dev/epoch": str(epoch)}
        if saved is not None:
            annotations["firedrill.dev/checkpoint-step"] = str(saved)  # what the rank's agent publishes
        self.api.put_object(f"{PODS}/{name}", {
            "metadata": {"name": name, "namespace": "default", "labels": {"volcano.sh/job-name": job},
                         "annotations": annotations, **meta},
            "status": {"phase": phase},
        })
        return f"{PODS}/{name}"

    def poll(self, seconds: float = 0.0) -> None:
        self.clock.advance(seconds)
        self.jobs.poll_now()
        self.jobs.run_once()


@pytest.fixture
def env() -> Env:
    e = Env()
    e.add_job("0", **{"firedrill.dev/checkpoint-step": "30"})
    return e


def spec(rank: int, epoch: int = 0) -> RankSpec:
    return RankSpec("default", "j", rank, 2, epoch)


def test_one_poll_per_job_however_many_ranks_run_here(env: Env) -> None:
    env.add_pod(0)
    env.add_pod(1)
    env.add_pod(0, job="other")
    a, b = env.jobs.attach("u0", spec(0)), env.jobs.attach("u1", spec(1))
    env.poll()
    assert [(c[0], c[1]) for c in env.api.calls] == [("LIST", PODS), ("GET", JOB)]
    assert env.api.calls[0][2] == {"labelSelector": "volcano.sh/job-name=j"}
    for link in (a, b):
        status = link.status(env.clock.now())
        assert status.window is not None and status.window[0] == env.clock.now()
        assert link.resume_step() == 30 and link.fence() is None
    env.jobs.detach("u0")
    env.jobs.detach("u1")
    env.api.calls.clear()
    env.poll()
    assert env.api.calls == [] and env.jobs.jobs() == []


def test_resume_comes_only_from_a_read_sent_after_the_rank_attached(env: Env) -> None:
    env.add_pod(0)
    env.jobs.attach("u0", spec(0))
    env.poll()
    # The record moves on; a new rank of the same job attaches: it must not use the older read.
    env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] = "40"
    late = env.jobs.attach("u1", spec(1))
    assert late.resume_step() is None
    env.poll()
    assert late.resume_step() == 40


def test_a_broken_gang_and_a_stale_view_close_the_window(env: Env) -> None:
    env.add_pod(0)
    second = env.add_pod(1)
    link = env.jobs.attach("u0", spec(0))
    assert link.status(env.clock.now()).kind is StallKind.STALE  # nothing seen yet
    t0 = env.clock.now()
    env.poll()
    env.poll(0.5)
    assert link.status(env.clock.now()).window == (t0, t0 + timedelta(seconds=2.0))  # last view + 1.5 s
    env.api.objects[second]["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:01Z"
    env.poll(0.5)
    status = link.status(env.clock.now())
    assert status.window == (t0, t0 + timedelta(seconds=1.0))  # cut at the view that saw it broken
    assert (status.kind, status.reason) == (StallKind.PEERS, "waiting for peers (1/2 ranks of epoch 0 running)")
    # No view for longer than the bound: stale, whatever the last one said.
    env.clock.advance(1.6)
    status = link.status(env.clock.now())
    assert status.kind is StallKind.STALE and status.reason == "peer view stale (last poll 1.6s ago)"


def test_polls_that_fail_leave_the_view_to_go_stale_and_a_gap_starts_a_new_run(env: Env) -> None:
    env.add_pod(0)
    env.add_pod(1)
    link = env.jobs.attach("u0", spec(0))
    t0 = env.clock.now()
    env.poll()
    env.api.fail = unreachable  # a partition
    env.poll(1.0)
    env.poll(1.0)
    assert link.status(env.clock.now()).kind is StallKind.STALE
    assert link.status(env.clock.now()).window == (t0, t0 + timedelta(seconds=1.5))
    env.api.fail = lambda verb, path: None
    env.poll(1.0)
    # Nothing vouches for the 3 s without a view: the complete run starts again now.
    assert link.status(env.clock.now()).window == (env.clock.now(), env.clock.now() + timedelta(seconds=1.5))


def test_rank_zero_writes_the_fenced_record(env: Env) -> None:
    env.add_pod(0)
    env.add_pod(1, saved=40)
    link = env.jobs.attach("u0", spec(0))
    env.poll()
    at = env.clock.now() + timedelta(seconds=0.25)
    link.record(40, at)
    env.jobs.run_once()
    (patch,) = env.api.verbs("PATCH")
    assert patch[1] == JOB and patch[2][0] == {"op": "test", "path": "/metadata/annotations/firedrill.dev~1epoch", "value": "0"}
    ann = env.api.objects[JOB]["metadata"]["annotations"]
    assert (ann["firedrill.dev/checkpoint-step"], ann["firedrill.dev/checkpoint-time"]) == ("40", "2026-11-30T00:00:00.250000Z")
    (outcome,) = link.outcomes()
    assert (outcome.step, outcome.error) == (40, None) and link.pending is None


def test_only_rank_zero_records(env: Env) -> None:
    link = env.jobs.attach("u1", spec(1))
    link.record(40, env.clock.now())
    env.jobs.run_once()
    assert env.api.verbs("PATCH") == [] and link.pending is None


def test_a_replaced_rank_zero_is_fenced_by_the_422_and_its_record_is_never_written(env: Env) -> None:
    env.add_pod(0)
    env.add_pod(1, saved=40)
    link = env.jobs.attach("u0", spec(0))
    env.poll()
    env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/epoch"] = "1"  # RestartJob, not yet polled
    link.record(40, env.clock.now())
    env.jobs.run_once()
    assert [c[0] for c in env.api.calls[-2:]] == ["PATCH", "GET"]
    assert link.fence() == Fence(1, "checkpoint record refused (422)")
    assert env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] == "30"
    assert link.pending is None and link.outcomes() == []
    link.record(42, env.clock.now())  # a fenced rank records nothing more
    env.jobs.run_once()
    assert len(env.api.verbs("PATCH")) == 1


@pytest.mark.parametrize("how", ["job", "pods"])
def test_a_newer_epoch_seen_by_the_poll_fences_every_rank(env: Env, how: str) -> None:
    env.add_pod(0)
    env.add_pod(1)
    ranks = [env.jobs.attach("u0", spec(0)), env.jobs.attach("u1", spec(1))]
    env.poll()
    if how == "job":
        env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/epoch"] = "2"
    else:
        env.add_pod(0, epoch=2)
    env.poll(0.5)
    for link in ranks:
        fence = link.fence()
        assert fence is not None and fence.job_epoch == 2


def test_an_unreachable_write_is_reported_once_and_retried(env: Env) -> None:
    env.add_pod(1, saved=40)
    link = env.jobs.attach("u0", spec(0))
    env.poll()
    env.api.fail = unreachable
    link.record(38, env.clock.now())
    link.record(40, env.clock.now())
    env.jobs.run_once()
    env.jobs.run_once()
    (outcome,) = link.outcomes()
    assert outcome.step == 40 and outcome.error is not None and "unreachable" in outcome.error
    assert link.pending == 40
    env.api.fail = lambda verb, path: None
    env.jobs.run_once()
    assert env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] == "40"
    assert [o.error for o in link.outcomes()] == [None] and link.pending is None  # 38 is superseded


def test_the_record_waits_until_every_rank_has_saved_its_shard(env: Env) -> None:
    peer = env.add_pod(1, saved=10)
    link = env.jobs.attach("u0", spec(0))
    env.poll()
    for step in (10, 20, 30):
        link.record(step, env.clock.now() + timedelta(seconds=step / 10))
    env.jobs.run_once()
    assert env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] == "10"
    # Rank 1 is cut off after saving 20: rank 0 may step on (its pod still shows Running), but records only 20.
    env.api.objects[peer]["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] = "20"
    env.poll(0.5)
    ann = env.api.objects[JOB]["metadata"]["annotations"]
    assert (ann["firedrill.dev/checkpoint-step"], ann["firedrill.dev/checkpoint-time"]) == ("20", "2026-11-30T00:00:02.000000Z")
    assert link.pending == 30
    calls = len(env.api.verbs("PATCH"))
    env.poll(0.5)
    assert len(env.api.verbs("PATCH")) == calls  # nothing new to write: no request


def test_a_job_without_an_epoch_annotation_gets_records_fenced_on_its_resource_version() -> None:
    env = Env()
    env.add_pod(1, saved=10)
    env.add_job(epoch=None)
    del env.api.objects[JOB]["metadata"]["annotations"]
    link = env.jobs.attach("u0", spec(0))
    env.poll()
    assert link.resume_step() == 0 and link.fence() is None
    link.record(10, env.clock.now())
    env.jobs.run_once()
    assert env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] == "10"
    assert [c[0] for c in env.api.calls[-3:]] == ["PATCH", "GET", "PATCH"]


def test_a_missing_job_resumes_from_zero_and_records_nothing() -> None:
    env = Env()
    env.add_pod(1, saved=10)
    link = env.jobs.attach("u0", spec(0))
    env.poll()
    assert link.resume_step() == 0
    link.record(10, env.clock.now())
    env.jobs.run_once()
    (outcome,) = link.outcomes()
    assert outcome.error == "the Job does not exist" and link.pending is None
