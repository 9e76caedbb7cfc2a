"""The batch/v1 Job controller's pure decisions: pods per index, failures counted once, upstream's back-off,
limits, the end conditions."""

from __future__ import annotations

from refplatform.core.batchjob import Clock, NewPod, PodView, backoff_remaining, intervals, parse_intervals, plan

T0 = 1_000_000.0


def _clock(at: float, started: float | None = None) -> Clock:
    return Clock(at, f"t+{at - T0:g}", started)


def _job(**spec) -> dict:
    return {"metadata": {"name": "train", "uid": "u"}, "spec": {"completionMode": "Indexed", "completions": 3,
                                                                "parallelism": 3, **spec}}


def _pod(name: str, index: int | None, phase: str = "Running", deleting: bool = False, tracked: bool = True,
         finished: float | None = None, failures: int = 0, uid: str | None = None, **kw) -> PodView:
    return PodView(name, uid or name, phase, index, deleting, tracked, finished, failures, **kw)


def test_an_indexed_job_starts_one_pod_per_index() -> None:
    p = plan(_job(), [], _clock(T0))
    assert p.create == [NewPod(0), NewPod(1), NewPod(2)] and p.status["startTime"] == "t+0"
    running = [_pod(f"train-{i}", i) for i in range(3)]
    again = plan({**_job(), "status": p.status}, running, _clock(T0 + 1))
    assert again.create == [] and again.status["active"] == 3


def test_a_pod_being_deleted_counts_once_and_its_index_waits_out_the_back_off() -> None:
    job = _job(backoffLimitPerIndex=3)
    pods = [_pod("train-0", 0), _pod("train-1", 1, deleting=True, finished=T0), _pod("train-2", 2)]
    first = plan(job, pods, _clock(T0 + 4))
    assert first.status["failed"] == 1 and first.create == []
    assert first.untrack == [], "the failed pod keeps its finalizer (and its count) until it is replaced"
    assert 5.9 < (first.retry_in or 0) <= 6.0
    recorded = {**job, "status": first.status}
    # the same pod seen again before its finalizer is gone: recorded, not counted twice
    second = plan(recorded, pods, _clock(T0 + 10.5))
    assert second.status["failed"] == 1 and second.untrack == ["train-1"]
    assert second.create == [NewPod(1, index_failures=1)]


def test_back_off_doubles_per_failure_up_to_ten_minutes() -> None:
    assert backoff_remaining(1, T0, T0) == 10 and backoff_remaining(3, T0, T0 + 5) == 35
    assert backoff_remaining(12, T0, T0) == 600 and backoff_remaining(1, T0, T0 + 11) == 0


def test_an_index_past_its_limit_fails_and_then_the_job() -> None:
    job = {**_job(backoffLimitPerIndex=1), "status": {"completedIndexes": "0,2"}}
    pods = [_pod("train-1", 1, phase="Failed", finished=T0, failures=1)]
    p = plan(job, pods, _clock(T0 + 1))
    assert p.status["failedIndexes"] == "1" and p.create == []
    kinds = [c["type"] for c in p.status["conditions"]]
    assert kinds == ["FailureTarget", "Failed"] and p.status["conditions"][0]["reason"] == "FailedIndexes"


def test_every_index_done_completes_the_job() -> None:
    pods = [_pod(f"train-{i}", i, phase="Succeeded", finished=T0) for i in range(3)]
    p = plan(_job(), pods, _clock(T0 + 1))
    assert p.status["succeeded"] == 3 and p.status["completedIndexes"] == "0-2"
    assert [c["type"] for c in p.status["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert p.status["completionTime"] == "t+1" and sorted(p.untrack) == ["train-0", "train-1", "train-2"]


def test_backoff_limit_fails_a_non_indexed_job_and_stops_its_pods() -> None:
    job = {"metadata": {"name": "j", "uid": "u"}, "spec": {"completions": 2, "parallelism": 2, "backoffLimit": 0}}
    pods = [_pod("j-a", None, phase="Failed", finished=T0), _pod("j-b", None)]
    p = plan(job, pods, _clock(T0 + 1))
    assert p.delete == ["j-b"] and p.create == []
    assert [c["type"] for c in p.status["conditions"]] == ["FailureTarget"]
    assert p.status["conditions"][0]["reason"] == "BackoffLimitExceeded"
    done = plan({**job, "status": p.status}, [_pod("j-a", None, phase="Failed", finished=T0, tracked=False)],
                _clock(T0 + 2))
    assert [c["type"] for c in done.status["conditions"]] == ["FailureTarget", "Failed"]


def test_a_pod_failure_policy_can_ignore_a_disruption() -> None:
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    job = _job(podFailurePolicy=policy, backoffLimitPerIndex=0, podReplacementPolicy="Failed")
    evicted = _pod("train-0", 0, phase="Failed", finished=T0, conditions=(("DisruptionTarget", "True"),))
    p = plan(job, [evicted, _pod("train-1", 1), _pod("train-2", 2)], _clock(T0 + 11))
    assert p.status.get("failed", 0) == 0 and p.status["failedIndexes"] == ""
    assert p.create == [NewPod(0, index_failures=0, index_ignored=1)]


def test_a_suspended_job_runs_nothing() -> None:
    p = plan(_job(suspend=True), [_pod("train-0", 0)], _clock(T0))
    assert p.delete == ["train-0"] and p.create == []
    assert [c["type"] for c in p.status["conditions"]] == ["Suspended"]


def test_intervals_round_trip() -> None:
    assert intervals([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8" and parse_intervals("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
