"""Pod sync: level-triggered reconcile of this node's pods, on a virtual clock and an in-memory API."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from refplatform.agent.clock import VirtualClock
from refplatform.agent.jobs import JobCoordinator
from refplatform.agent.logs import LogStore
from refplatform.agent.partition import GatedClient, PartitionGate
from refplatform.agent.pods import PodSync
from refplatform.agent.workload import LogLine, Workload
from refplatform.client import WatchEvent

from .fakeapi import FakeApi, status_error, unreachable

NODE = "gpu-node-0"


def deserialize(obj: dict[str, Any], klass: str) -> Any:
    return ApiClient()._ApiClient__deserialize(obj, klass)  # type: ignore[attr-defined]


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/default/pods/{name}"


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.api = FakeApi()
        self.clock = VirtualClock()
        self.store = LogStore(tmp_path / "logs" / NODE)
        self.sync = PodSync(self.api, NODE, self.store, self.clock)  # type: ignore[arg-type]

    def add_pod(
        self,
        name: str,
        annotations: dict[str, str] | None = None,
        node: str = NODE,
        labels: dict[str, str] | None = None,
        **status: Any,
    ) -> dict[str, Any]:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}, "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
            "status": status or {"phase": "Pending"},
        }
        stored = self.api.put_object(pod_path(name), pod)
        self.sync._apply("ADDED", stored)
        return stored

    def refresh(self) -> None:
        """What the watch would deliver: the server's current copies."""
        for path, obj in list(self.api.objects.items()):
            if "/pods/" in path:
                self.sync._apply("MODIFIED", obj)
        for uid, pod in list(self.sync.pods().items()):
            if pod_path(pod["metadata"]["name"]) not in self.api.objects:
                self.sync._apply("DELETED", pod)

    def step(self, seconds: float = 0.0) -> None:
        self.clock.advance(seconds)
        self.sync.sync_once()
        self.refresh()

    def pod(self, name: str) -> dict[str, Any]:
        return self.api.objects[pod_path(name)]

    def log(self, name: str) -> list[str]:
        clog = self.store.get("default", name, "main")
        assert clog is not None
        return [t for _, t in clog.snapshot()[0]]

    def allow_retry(self) -> None:
        for w in self.sync.workers.values():
            w.retry_at = 0.0


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


TRAINING = {
    "firedrill.dev/workload": "training",
    "firedrill.dev/step-seconds": "0.5",
    "firedrill.dev/steps-total": "8",
    "firedrill.dev/checkpoint-every": "3",
}


def test_a_bound_pod_is_started_and_reported_running(env: Env) -> None:
    env.add_pod("p")
    env.step()
    pod = deserialize(env.pod("p"), "V1Pod")
    assert pod.status.phase == "Running"
    assert pod.status.container_statuses[0].state.running is not None
    assert {c.type for c in pod.status.conditions if c.status == "True"} >= {"PodScheduled", "Initialized", "ContainersReady", "Ready"}
    # Nothing changes: no more writes.
    calls = len(env.api.calls)
    env.step(30)
    assert len(env.api.calls) == calls


def test_pods_of_other_nodes_are_ignored(env: Env) -> None:
    env.add_pod("elsewhere", node="gpu-node-9")
    env.step()
    assert env.api.calls == [] and env.sync.workers == {}


def test_training_runs_publishes_progress_and_succeeds(env: Env) -> None:
    env.add_pod("t", TRAINING)
    env.step()
    env.step(1.0)  # steps 1-2
    assert env.pod("t")["metadata"]["annotations"]["firedrill.dev/step"] == "2"
    env.step(0.5)  # step 3, a checkpoint, but less than a second since the last progress patch
    assert env.pod("t")["metadata"]["annotations"]["firedrill.dev/step"] == "2"
    env.step(0.5)
    ann = env.pod("t")["metadata"]["annotations"]
    assert (ann["firedrill.dev/step"], ann["firedrill.dev/checkpoint-step"]) == ("4", "3")
    env.step(10)
    pod = env.pod("t")
    assert pod["status"]["phase"] == "Succeeded"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term["finishedAt"]) == (0, "Completed", "2026-11-30T00:00:04Z")
    # The final progress goes out at once, whatever the interval.
    assert (pod["metadata"]["annotations"]["firedrill.dev/step"], pod["metadata"]["annotations"]["firedrill.dev/checkpoint-step"]) == ("8", "6")
    log = env.log("t")
    assert log[0].endswith("starting training steps_total=8 step_seconds=0.5 checkpoint_every=3")
    assert sum("loss=" in line for line in log) == 8 and log[-1].endswith("training complete step=8")
    assert "2026-11-30T00:00:01.500Z checkpoint step=3" in log
    assert env.store.get("default", "t", "main").closed  # type: ignore[union-attr]
    calls = len(env.api.calls)
    env.step(30)
    assert len(env.api.calls) == calls  # a finished pod is left alone


class Claims(Workload):
    """A running workload whose published claims the test sets."""

    kind = "claims"

    def __init__(self) -> None:
        super().__init__()
        self.claims: dict[str, str] = {}

    def progress(self) -> dict[str, str]:
        return dict(self.claims)

    def _on_start(self, now: Any) -> list[LogLine]:
        return []

    def _advance(self, now: Any) -> list[LogLine]:
        return []


def test_a_claim_the_workload_no_longer_makes_is_removed_from_the_pod(env: Env) -> None:
    env.add_pod("t")
    env.step()
    claims = Claims()
    claims.start(env.clock.now())
    (worker,) = env.sync.workers.values()
    worker.workload = claims
    claims.claims = {"firedrill.dev/step": "5", "firedrill.dev/activity": "checkpoint"}
    env.step(1.0)
    assert env.pod("t")["metadata"]["annotations"]["firedrill.dev/activity"] == "checkpoint"
    claims.claims = {"firedrill.dev/step": "5"}  # the checkpoint completed
    env.step(1.0)
    assert env.pod("t")["metadata"]["annotations"] == {"firedrill.dev/step": "5"}


def test_a_failing_workload_fails_the_pod(env: Env) -> None:
    env.add_pod("f", {"firedrill.dev/run-seconds": "2", "firedrill.dev/exit-code": "3"})
    env.step()
    env.step(2)
    st = deserialize(env.pod("f"), "V1Pod").status
    assert st.phase == "Failed"
    assert (st.container_statuses[0].state.terminated.exit_code, st.container_statuses[0].state.terminated.reason) == (3, "Error")


def test_bad_workload_annotations_fail_the_pod_with_start_error(env: Env) -> None:
    env.add_pod("bad", {"firedrill.dev/workload": "mining"})
    env.step()
    st = deserialize(env.pod("bad"), "V1Pod").status
    assert st.phase == "Failed"
    t = st.container_statuses[0].state.terminated
    assert (t.exit_code, t.reason) == (128, "StartError") and "unknown workload 'mining'" in t.message
    assert "cannot start workload" in env.log("bad")[0]


def test_graceful_deletion_stops_the_workload_then_deletes_with_grace_zero_and_uid(env: Env) -> None:
    env.add_pod("d", TRAINING | {"firedrill.dev/steps-total": "0"})
    env.step()
    env.step(1)
    uid = env.pod("d")["metadata"]["uid"]
    env.api.objects[pod_path("d")]["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:31Z"
    env.refresh()
    env.step(0.2)
    (delete,) = env.api.verbs("DELETE")
    assert delete[2] == {
        "body": {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
        "params": {"gracePeriodSeconds": 0},
    }
    assert pod_path("d") not in env.api.objects
    assert env.log("d")[-1].endswith("received SIGTERM, exiting")
    env.step()
    assert env.sync.workers == {}  # the watch's DELETED event retires the worker


def test_a_pod_deleted_while_we_were_away_is_still_finalised(env: Env) -> None:
    env.add_pod("gone", {}, phase="Running", containerStatuses=[{"name": "main", "restartCount": 0, "state": {"running": {}}}])
    env.api.objects[pod_path("gone")]["metadata"]["deletionTimestamp"] = "2026-11-30T00:00:31Z"
    env.refresh()
    env.step()
    assert len(env.api.verbs("DELETE")) == 1 and pod_path("gone") not in env.api.objects
    assert not env.api.verbs("PATCH")  # never started


def test_delete_precondition_conflict_means_a_new_pod_took_the_name(env: Env) -> None:
    env.add_pod("d")
    env.step()
    old = dict(env.pod("d"))
    old["metadata"] = dict(old["metadata"], deletionTimestamp="2026-11-30T00:00:31Z", uid="stale-uid")
    env.sync._apply("MODIFIED", old)
    env.step()
    assert env.api.verbs("DELETE") and pod_path("d") in env.api.objects  # 409: nothing deleted, no retry storm
    env.step(0.1)
    assert len(env.api.verbs("DELETE")) == 1


def test_a_pod_that_vanishes_stops_its_workload(env: Env) -> None:
    env.add_pod("v", TRAINING | {"firedrill.dev/steps-total": "0"})
    env.step()
    del env.api.objects[pod_path("v")]
    env.refresh()
    env.step(1)
    assert env.sync.workers == {}
    assert env.store.get("default", "v", "main").closed  # type: ignore[union-attr]


def test_failed_status_updates_are_retried_on_a_later_pass(env: Env) -> None:
    env.api.fail = unreachable
    env.add_pod("r")
    env.step()
    assert env.pod("r")["status"]["phase"] == "Pending"
    env.api.fail = lambda verb, path: None
    env.step()  # still backing off
    assert env.pod("r")["status"]["phase"] == "Pending"
    env.allow_retry()
    env.step()
    assert env.pod("r")["status"]["phase"] == "Running"


def test_a_server_error_on_progress_does_not_stop_the_pod(env: Env) -> None:
    env.add_pod("t", TRAINING | {"firedrill.dev/steps-total": "0"})
    env.step()
    env.api.fail = lambda verb, path: status_error(500, "InternalError") if verb == "PATCH" else None
    env.step(2)
    assert env.sync.workers[env.pod("t")["metadata"]["uid"]].workload.running  # type: ignore[union-attr]
    env.api.fail = lambda verb, path: None
    env.allow_retry()
    env.step(1)
    assert env.pod("t")["metadata"]["annotations"]["firedrill.dev/step"] == "6"


def test_after_an_agent_restart_a_running_pod_restarts_and_resumes_from_its_checkpoint(env: Env, tmp_path: Path) -> None:
    env.add_pod("t", TRAINING | {"firedrill.dev/steps-total": "0"})
    env.step()
    env.step(2.0)  # steps 1-4, checkpoint 3
    assert env.pod("t")["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] == "3"
    # A new agent process: fresh state, same API and data directory.
    fresh = Env(tmp_path)
    fresh.api, fresh.clock = env.api, env.clock
    fresh.sync = PodSync(env.api, NODE, fresh.store, env.clock)  # type: ignore[arg-type]
    fresh.refresh()
    fresh.step(5)
    st = deserialize(env.pod("t"), "V1Pod").status
    cs = st.container_statuses[0]
    assert st.phase == "Running" and cs.restart_count == 1
    assert (cs.last_state.terminated.exit_code, cs.last_state.terminated.reason) == (255, "Unknown")
    assert st.start_time.isoformat().startswith("2026-11-30T00:00:00")  # the pod's start, not the container's
    log = fresh.log("t")
    assert log[0].endswith("checkpoint_every=3")  # the old lines are still there
    assert any(line.endswith("resumed from checkpoint step=3") for line in log)


def test_a_finished_pod_is_not_rerun_after_a_restart(env: Env) -> None:
    env.add_pod("done", {}, phase="Succeeded")
    env.step(5)
    assert env.sync.workers == {} and env.api.calls == []


def test_a_pod_ended_by_someone_else_has_its_workload_killed(env: Env) -> None:
    env.add_pod("k", TRAINING | {"firedrill.dev/steps-total": "0"})
    env.step()
    env.api.objects[pod_path("k")]["status"]["phase"] = "Failed"
    env.refresh()
    env.step(1)
    assert env.log("k")[-1].endswith("received SIGTERM, exiting")


def test_watch_loop_lists_watches_resumes_and_relists_on_410(env: Env) -> None:
    api = env.api
    env.add_pod("a")
    moved = dict(env.pod("a"), metadata=dict(env.pod("a")["metadata"], resourceVersion="50"))
    api.watch_script = [
        [WatchEvent("MODIFIED", moved), WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "60"}})],
        [WatchEvent("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})],
    ]
    env.sync.watch_timeout = 1
    sync = env.sync
    sync.start()
    try:
        deadline = time.monotonic() + 10
        while len(api.verbs("LIST")) < 2 and time.monotonic() < deadline:
            threading.Event().wait(0.01)
            # Let quiet streams end so the loop resumes.
            for _, stream in api.watches:
                stream.stop()
        assert sync.wait_synced(1)
    finally:
        sync.stop()
    rvs = [rv for rv, _ in api.watches]
    # Watch from the list; resume from the bookmark; 410 there: relist and watch from the new list.
    assert rvs[:3] == [api.list_rvs[0], "60", api.list_rvs[1]]
    assert sync.pods()[env.pod("a")["metadata"]["uid"]]["metadata"]["name"] == "a"


def test_a_pod_recreated_under_the_same_name_gets_a_fresh_log_that_stays_open(env: Env) -> None:
    env.add_pod("w", TRAINING | {"firedrill.dev/steps-total": "0"})
    env.step()
    env.step(1)
    old = env.pod("w")
    # Deleted and recreated (a gang restart) between two passes of the agent.
    del env.api.objects[pod_path("w")]
    env.sync._apply("DELETED", old)
    env.add_pod("w", TRAINING | {"firedrill.dev/steps-total": "0"})
    env.step()
    env.step(1)
    log = env.log("w")
    assert log[0].endswith("checkpoint_every=3") and sum("loss=" in line for line in log) == 2
    assert not any("SIGTERM" in line for line in log)
    clog = env.store.get("default", "w", "main")
    assert clog is not None and not clog.closed
    assert [w.uid for w in env.sync.workers.values()] == [env.pod("w")["metadata"]["uid"]]


# -- ranks of a job, resync after a partition, thaw after a freeze -----------------------------

JOB = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/j"


def rank_annotations(rank: int, epoch: int = 0) -> dict[str, str]:
    return TRAINING | {
        "firedrill.dev/steps-total": "0",
        "firedrill.dev/step-seconds": "1",
        "firedrill.dev/checkpoint-every": "2",
        "firedrill.dev/rank": str(rank),
        "firedrill.dev/world-size": "2",
        "firedrill.dev/epoch": str(epoch),
    }


@pytest.fixture
def gang_env(env: Env) -> Env:
    env.sync.jobs = JobCoordinator(env.api, env.clock)  # type: ignore[arg-type]
    env.api.put_object(JOB, {"metadata": {"name": "j", "namespace": "default",
                                          "annotations": {"firedrill.dev/epoch": "0", "firedrill.dev/checkpoint-step": "4"}}})
    return env


def poll(env: Env) -> None:
    assert env.sync.jobs is not None
    env.sync.jobs.poll_now()
    env.sync.jobs.run_once()


def run(env: Env, seconds: float, every: float = 0.5) -> None:
    """Poll the jobs and sync the pods every ``every`` seconds, as the agent's threads do."""
    for _ in range(round(seconds / every)):
        poll(env)
        env.step(every)
    poll(env)


def test_a_rank_steps_with_its_gang_records_and_is_fenced_when_the_job_restarts(gang_env: Env) -> None:
    env = gang_env
    labels = {"volcano.sh/job-name": "j"}
    env.add_pod("j-w-0", rank_annotations(0), labels=labels)
    env.add_pod("j-w-1", rank_annotations(1), node="gpu-node-1", labels=labels, phase="Pending")
    env.step()
    assert env.sync.jobs is not None and env.sync.jobs.jobs() == [("default", "j")]
    poll(env)
    env.step()
    assert env.log("j-w-0")[-2:] == [
        "2026-11-30T00:00:00.000Z resumed from checkpoint step=4",
        "2026-11-30T00:00:00.000Z stalled: waiting for peers (1/2 ranks of epoch 0 running)",
    ]
    run(env, 1.0)
    assert env.pod("j-w-0")["metadata"]["annotations"]["firedrill.dev/step"] == "4"
    peer = env.api.objects[pod_path("j-w-1")]
    peer["status"]["phase"] = "Running"  # what the peer's agent reports
    run(env, 2.0)  # steps 5, 6: a checkpoint, but rank 1 has not said it saved its shard
    assert env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] == "4"
    peer["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] = "6"  # now it has
    poll(env)
    assert env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/checkpoint-step"] == "6"
    assert env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/checkpoint-time"] == "2026-11-30T00:00:03.000000Z"
    env.step()  # the workload hears how the write went
    log = env.log("j-w-0")
    assert "2026-11-30T00:00:01.000Z stepping resumed after 1.0s stalled" in log
    assert log[-1] == "2026-11-30T00:00:03.000Z checkpoint record step=6 written"
    # RestartJob: the epoch moves on; the next poll fences this rank, which stops at once.
    env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/epoch"] = "1"
    poll(env)
    env.step(5)
    pod = deserialize(env.pod("j-w-0"), "V1Pod")
    term = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, pod.status.reason, term.reason, term.exit_code) == ("Failed", "Fenced", "Fenced", 75)
    assert "rank 0 of epoch 0 stops" in pod.status.message
    assert env.log("j-w-0")[-1].endswith("fenced: job restarted at epoch 1; rank 0 of epoch 0 stops")
    assert env.pod("j-w-0")["metadata"]["annotations"]["firedrill.dev/step"] == "6"
    assert env.sync.jobs.jobs() == []  # detached: no more polls for it


def test_a_pod_without_the_job_label_trains_alone(gang_env: Env) -> None:
    env = gang_env
    env.add_pod("solo", rank_annotations(1))
    env.step()
    env.step(2)
    assert env.pod("solo")["metadata"]["annotations"]["firedrill.dev/step"] == "2"
    assert env.sync.jobs is not None and env.sync.jobs.jobs() == []


def test_bad_rank_annotations_fail_the_pod_with_start_error(gang_env: Env) -> None:
    env = gang_env
    env.add_pod("bad", rank_annotations(0) | {"firedrill.dev/world-size": "zero"}, labels={"volcano.sh/job-name": "j"})
    env.step()
    st = deserialize(env.pod("bad"), "V1Pod").status
    assert st.phase == "Failed" and st.container_statuses[0].state.terminated.reason == "StartError"


def test_after_a_freeze_no_work_is_credited_for_the_frozen_time(env: Env) -> None:
    env.add_pod("t", TRAINING | {"firedrill.dev/steps-total": "0", "firedrill.dev/step-seconds": "1"})
    env.step()
    env.step(1.5)
    env.clock.advance(60)  # SIGSTOP ... SIGCONT
    env.sync.note_freeze(60)
    env.step()
    env.allow_retry()
    env.step(0.6)
    assert env.pod("t")["metadata"]["annotations"]["firedrill.dev/step"] == "2"


def test_resync_retries_pending_writes_at_once(env: Env) -> None:
    env.api.fail = unreachable  # partitioned
    env.add_pod("r")
    env.step()
    env.api.fail = lambda verb, path: None  # healed
    env.step()
    assert env.pod("r")["status"]["phase"] == "Pending"  # still backing off
    env.sync.resync()
    env.step()
    assert env.pod("r")["status"]["phase"] == "Running"


def test_resync_relists_and_stops_pods_deleted_meanwhile(env: Env) -> None:
    api = env.api
    env.add_pod("kept", TRAINING | {"firedrill.dev/steps-total": "0"})
    env.add_pod("gone", TRAINING | {"firedrill.dev/steps-total": "0"})
    env.sync.tick = 0.01
    env.sync.start()
    try:
        deadline = time.monotonic() + 10
        while len(env.sync.workers) < 2 and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        assert len(env.sync.workers) == 2
        del api.objects[pod_path("gone")]  # deleted while we could not hear about it
        env.sync.resync()
        while len(api.verbs("LIST")) < 2 and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        while len(env.sync.workers) > 1 and time.monotonic() < deadline:
            threading.Event().wait(0.01)
    finally:
        env.sync.stop()
    assert [w.name for w in env.sync.workers.values()] == ["kept"]
    assert env.log("gone")[-1].endswith("received SIGTERM, exiting")


def _wait_for(condition: Any, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        threading.Event().wait(0.01)


def test_a_pass_waiting_on_a_hung_api_server_is_not_a_stalled_node_but_a_pass_stuck_here_is(tmp_path: Path) -> None:
    # The blip drill's false FAIL (docs/BENCHMARKS.md, issue 30): the pass that was writing a pod's status when
    # the API server was SIGSTOPped reported the node NotReady ("pod sync loop stalled") the moment it resumed.
    api = FakeApi()
    hung, release = threading.Event(), threading.Event()

    def hang_status_writes(verb: str, path: str) -> Exception | None:
        if verb == "PATCH" and "/pods/" in path and not release.is_set():
            hung.set()
            release.wait(10)
        return None

    client = GatedClient(api, PartitionGate())  # type: ignore[arg-type]
    sync = PodSync(client, NODE, LogStore(tmp_path / "logs"), VirtualClock(), api_seconds=client.api_seconds)  # type: ignore[arg-type]
    assert sync.stalled_for() is None  # no pass yet
    api.put_object(pod_path("a"), {"apiVersion": "v1", "kind": "Pod",
                                   "metadata": {"name": "a", "namespace": "default"},
                                   "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "busybox"}]},
                                   "status": {"phase": "Pending"}})
    api.fail = hang_status_writes
    sync.start()
    try:
        assert hung.wait(10), "the pass never wrote the pod's status"
        started = sync.last_pass
        assert started is not None
        _wait_for(lambda: time.monotonic() - started > 0.5, "the hung write to last half a second")
        stalled = sync.stalled_for()
        assert stalled is not None and stalled < 0.25, stalled  # the wait for the API server is left out
        release.set()
        # A pass held up here on the node (the pod table's lock, as a deadlocked thread would) is a stall.
        with sync._lock:
            _wait_for(lambda: (sync.stalled_for() or 0.0) > 0.5, "a pass stuck on the node to count as stalled")
    finally:
        release.set()
        sync.stop()
