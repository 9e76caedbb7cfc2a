"""The Events the agent records on its pods (Started, Resumed, Fenced, Killing), on a virtual clock and an in-memory API.

Each is checked against the official client's strict ``CoreV1Event`` model, and its
``eventTime`` against the instant of the transition (never the time of the write).
"""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from refplatform.agent.clock import VirtualClock, micro_time, rfc3339, rfc3339_millis
from refplatform.agent.events import PodEventRecorder, event_body, pod_reference
from refplatform.agent.jobs import JobCoordinator
from refplatform.agent.logs import LogStore
from refplatform.agent.partition import GatedClient, PartitionGate
from refplatform.agent.pods import PodSync
from refplatform.agent.workload import TrainingWorkload

from .fakeapi import FakeApi, status_error, unreachable

NODE = "gpu-node-0"
START = datetime(2026, 11, 30, 1, 2, 3, 123456, tzinfo=UTC)
JOB = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs/j"
MICRO = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$"

Obj = dict[str, Any]


def deserialize(obj: Obj, klass: str) -> Any:
    return ApiClient()._ApiClient__deserialize(obj, klass)  # type: ignore[attr-defined]


def pod_path(name: str) -> str:
    return f"/api/v1/namespaces/default/pods/{name}"


class Env:
    """Pod sync with an event recorder in front of a fake API; ``step`` syncs, then writes the queued Events."""

    def __init__(self, tmp_path: Path, *, gated: bool = False, retry_delays: tuple[float, ...] = ()) -> None:
        self.api = FakeApi()
        self.gate = PartitionGate()
        client: Any = GatedClient(self.api, self.gate) if gated else self.api  # type: ignore[arg-type]
        self.clock = VirtualClock(START)
        self.store = LogStore(tmp_path / "logs" / NODE)
        self.recorder = PodEventRecorder(client, NODE, retry_delays=retry_delays)
        self.sync = PodSync(client, NODE, self.store, self.clock, events=self.recorder)

    def add_pod(self, name: str, annotations: dict[str, str] | None = None, *, node: str = NODE,
                labels: dict[str, str] | None = None, containers: tuple[str, ...] = ("main",), **status: Any) -> Obj:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}, "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": c, "image": "busybox"} for c in containers]},
            "status": status or {"phase": "Pending"},
        }
        stored = self.api.put_object(pod_path(name), pod)
        self.sync._apply("ADDED", stored)
        return stored

    def refresh(self) -> None:
        for path, obj in list(self.api.objects.items()):
            if "/pods/" in path:
                self.sync._apply("MODIFIED", obj)
        for pod in list(self.sync.pods().values()):
            if pod_path(pod["metadata"]["name"]) not in self.api.objects:
                self.sync._apply("DELETED", pod)

    def step(self, seconds: float = 0.0) -> None:
        self.clock.advance(seconds)
        self.sync.sync_once()
        self.recorder.drain()
        self.refresh()

    def pod(self, name: str) -> Obj:
        return self.api.objects[pod_path(name)]

    def workload(self, name: str) -> Any:
        uid = self.pod(name)["metadata"]["uid"]
        return self.sync.workers[uid].workload

    def events(self, reason: str | None = None, name: str | None = None) -> list[Obj]:
        """The Events on the server, in the order they were created; each checked by the strict model."""
        out = []
        for path, ev in self.api.objects.items():
            if "/events/" not in path:
                continue
            if (reason and ev["reason"] != reason) or (name and ev["involvedObject"]["name"] != name):
                continue
            check_shape(ev)
            out.append(ev)
        return out


def check_shape(ev: Obj) -> None:
    """What every Event of the agent looks like, through the official client's CoreV1Event."""
    model = deserialize(ev, "CoreV1Event")
    assert model.kind == "Event" and model.api_version == "v1"
    assert model.metadata.name.startswith(model.involved_object.name + ".")
    assert model.metadata.namespace == model.involved_object.namespace == "default"
    assert model.involved_object.kind == "Pod" and model.involved_object.api_version == "v1"
    assert model.involved_object.uid and model.involved_object.field_path.startswith("spec.containers{")
    assert (model.source.component, model.source.host) == ("kubelet", NODE)
    assert (model.reporting_component, model.reporting_instance) == ("kubelet", NODE)
    assert model.type in ("Normal", "Warning") and model.reason and model.message
    assert model.action == model.reason and model.count >= 1
    assert isinstance(model.event_time, datetime) and model.event_time.tzinfo is not None
    assert re.match(MICRO, ev["eventTime"]), ev["eventTime"]
    # firstTimestamp/lastTimestamp: the same instant, to the second.
    assert model.first_timestamp == model.event_time.replace(microsecond=0)


def event_time(ev: Obj) -> datetime:
    return deserialize(ev, "CoreV1Event").event_time  # type: ignore[no-any-return]


TRAINING = {
    "firedrill.dev/workload": "training",
    "firedrill.dev/step-seconds": "0.25",
    "firedrill.dev/steps-total": "0",
    "firedrill.dev/checkpoint-every": "4",
}


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


# -- the shape --------------------------------------------------------------------------------


def test_the_event_body_is_a_strict_core_v1_event_with_a_microsecond_event_time() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "42"}}
    body = event_body(pod_reference(pod), NODE, "Normal", "Started", "Started container main", START,
                      field_path="spec.containers{main}")
    assert body == {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": "p.", "namespace": "ns"},
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "p", "uid": "u-1", "apiVersion": "v1",
                           "resourceVersion": "42", "fieldPath": "spec.containers{main}"},
        "reason": "Started", "message": "Started container main", "type": "Normal", "count": 1,
        "firstTimestamp": "2026-11-30T01:02:03Z", "lastTimestamp": "2026-11-30T01:02:03Z",
        "eventTime": "2026-11-30T01:02:03.123456Z", "action": "Started",
        "source": {"component": "kubelet", "host": NODE}, "reportingComponent": "kubelet", "reportingInstance": NODE,
    }
    model = deserialize(dict(body, metadata={"name": "p.abcde", "namespace": "ns"}), "CoreV1Event")
    assert model.event_time == START and model.involved_object.resource_version == "42"


# -- Started ----------------------------------------------------------------------------------


def test_started_is_stamped_at_the_instant_the_pod_was_set_running_once_per_container(env: Env) -> None:
    env.clock.advance(0.5)
    env.add_pod("p", containers=("main", "sidecar"))
    started = env.clock.now()
    env.step()
    env.step(0.7)  # a later pass writes nothing new, and does not move the stamp
    pod = env.pod("p")
    assert pod["status"]["phase"] == "Running"
    events = env.events()
    assert [(e["reason"], e["type"], e["message"], e["involvedObject"]["fieldPath"]) for e in events] == [
        ("Started", "Normal", "Started container main", "spec.containers{main}"),
        ("Started", "Normal", "Started container sidecar", "spec.containers{sidecar}"),
    ]
    for ev in events:
        assert ev["eventTime"] == micro_time(started) == "2026-11-30T01:02:03.623456Z"
        ref = ev["involvedObject"]
        assert (ref["kind"], ref["namespace"], ref["name"], ref["uid"], ref["apiVersion"]) == (
            "Pod", "default", "p", pod["metadata"]["uid"], "v1")
    # The same instant as every container's startedAt, which has only seconds.
    for cs in pod["status"]["containerStatuses"]:
        assert cs["state"]["running"]["startedAt"] == rfc3339(event_time(events[0])) == "2026-11-30T01:02:03Z"


def test_an_idle_pod_gets_no_resumed_event_and_a_start_error_no_started_event(env: Env) -> None:
    env.add_pod("idle")
    env.add_pod("bad", {"firedrill.dev/workload": "mining"})
    env.step()
    env.step(10)
    assert [(e["reason"], e["involvedObject"]["name"]) for e in env.events()] == [("Started", "idle")]


def test_a_container_restarted_after_an_agent_restart_is_started_again(env: Env, tmp_path: Path) -> None:
    env.add_pod("t", TRAINING)
    env.step()
    env.step(2.0)  # steps 1-8, checkpoint 8 published
    # A new agent process: fresh state and recorder, same API.
    again = Env(tmp_path)
    again.api, again.clock = env.api, env.clock
    again.recorder = PodEventRecorder(env.api, NODE, retry_delays=())
    again.sync = PodSync(env.api, NODE, again.store, env.clock, events=again.recorder)  # type: ignore[arg-type]
    again.refresh()
    again.clock.advance(3)
    restarted = again.clock.now()
    again.step()
    again.step(1.0)
    started = again.events("Started")
    assert [e["eventTime"] for e in started] == [micro_time(START), micro_time(restarted)]
    resumed = again.events("Resumed")
    assert [e["message"] for e in resumed] == ["Resumed training at step 1 beyond checkpoint 0",
                                               "Resumed training at step 9 beyond checkpoint 8"]
    assert resumed[1]["eventTime"] == micro_time(restarted + timedelta(seconds=0.25))


# -- Resumed ----------------------------------------------------------------------------------


def test_resumed_is_stamped_when_the_first_step_beyond_the_checkpoint_completed(env: Env) -> None:
    env.add_pod("fresh", TRAINING)
    env.add_pod("again", TRAINING | {"firedrill.dev/checkpoint-step": "12"})
    env.step()
    assert [e["reason"] for e in env.events()] == ["Started", "Started"]  # no step done yet
    env.step(1.0)  # four steps each; the agent notices a second late, the stamp is the step's own
    env.step(5.0)
    for name, message in (("fresh", "Resumed training at step 1 beyond checkpoint 0"),
                          ("again", "Resumed training at step 13 beyond checkpoint 12")):
        started, resumed = env.events(name=name)
        assert (started["reason"], resumed["reason"], resumed["type"], resumed["message"]) == (
            "Started", "Resumed", "Normal", message)
        first_step = START + timedelta(seconds=0.25)
        assert resumed["eventTime"] == micro_time(first_step) == "2026-11-30T01:02:03.373456Z"
        assert event_time(started) < event_time(resumed)
        assert resumed["involvedObject"]["uid"] == env.pod(name)["metadata"]["uid"]
        first_line = next(text for text in env_log(env, name) if " loss=" in text)
        assert first_line.startswith(f"{rfc3339_millis(first_step)} step={message.split()[4]} loss=")


def test_a_rank_resumes_from_the_job_record_once_its_gang_is_up_and_is_fenced_when_replaced(env: Env) -> None:
    jobs = env.sync.jobs = JobCoordinator(env.api, env.clock)  # type: ignore[arg-type]
    env.api.put_object(JOB, {"metadata": {"name": "j", "namespace": "default",
                                          "annotations": {"firedrill.dev/epoch": "0", "firedrill.dev/checkpoint-step": "4"}}})

    def rank(r: int) -> dict[str, str]:
        return TRAINING | {"firedrill.dev/step-seconds": "1", "firedrill.dev/rank": str(r),
                           "firedrill.dev/world-size": "2", "firedrill.dev/epoch": "0"}

    def run(seconds: float) -> None:
        for _ in range(round(seconds / 0.5)):
            jobs.poll_now()
            jobs.run_once()
            env.step(0.5)

    labels = {"volcano.sh/job-name": "j"}
    env.add_pod("j-w-0", rank(0), labels=labels)
    env.add_pod("j-w-1", rank(1), node="gpu-node-1", labels=labels)
    env.step()
    run(2.0)  # resumed from 4, stalled on its peer: no step, no Resumed
    assert [e["reason"] for e in env.events()] == ["Started"]
    env.pod("j-w-1")["status"]["phase"] = "Running"  # what the peer's agent reports
    run(3.0)
    w = env.workload("j-w-0")
    assert isinstance(w, TrainingWorkload) and w.resumed_from == 4 and w.step >= 5
    (resumed,) = env.events("Resumed")
    assert resumed["message"] == "Resumed training at step 5 beyond checkpoint 4"
    assert w.resumed_at is not None and resumed["eventTime"] == micro_time(w.resumed_at)
    assert any(text.startswith(rfc3339_millis(w.resumed_at) + " step=5 loss=") for text in env_log(env, "j-w-0"))

    # RestartJob: the next poll fences the rank, which stops at once.
    env.api.objects[JOB]["metadata"]["annotations"]["firedrill.dev/epoch"] = "1"
    run(1.0)
    env.step(2.0)
    assert env.pod("j-w-0")["status"]["phase"] == "Failed"
    (fenced,) = env.events("Fenced")
    assert w.exit is not None and fenced["eventTime"] == micro_time(w.exit.finished_at)
    assert fenced["type"] == "Warning" and fenced["involvedObject"]["name"] == "j-w-0"
    assert fenced["message"] == env.pod("j-w-0")["status"]["message"]
    assert fenced["message"].startswith("fenced: job restarted at epoch 1; rank 0 of epoch 0 stops (")
    assert env.events("Killing") == []  # it stopped on its own; the agent killed nothing
    assert [e["reason"] for e in env.events()] == ["Started", "Resumed", "Fenced"]


def env_log(env: Env, name: str) -> list[str]:
    clog = env.store.get("default", name, "main")
    assert clog is not None
    return [t for _, t in clog.snapshot()[0]]


# -- Killing ----------------------------------------------------------------------------------


def test_killing_is_stamped_when_the_agent_stopped_the_container_of_a_deleted_pod(env: Env) -> None:
    env.add_pod("d", TRAINING)
    env.step()
    env.step(1.0)
    env.api.objects[pod_path("d")]["metadata"]["deletionTimestamp"] = "2026-11-30T01:02:34Z"
    env.refresh()
    env.clock.advance(0.3)
    stopped = env.clock.now()
    env.step()
    assert pod_path("d") not in env.api.objects
    (killing,) = env.events("Killing")
    assert (killing["type"], killing["message"], killing["eventTime"]) == (
        "Normal", "Stopping container main", micro_time(stopped))
    assert env_log(env, "d")[-1] == f"{rfc3339_millis(stopped)} received SIGTERM, exiting"
    assert [e["reason"] for e in env.events()] == ["Started", "Resumed", "Killing"]


def test_a_vanished_pod_is_killed_and_a_pod_that_ended_by_itself_is_not(env: Env) -> None:
    env.add_pod("v", TRAINING)
    env.add_pod("done", {"firedrill.dev/run-seconds": "1"})
    env.add_pod("away", {}, phase="Running", containerStatuses=[{"name": "main", "restartCount": 0, "state": {"running": {}}}])
    env.api.objects[pod_path("away")]["metadata"]["deletionTimestamp"] = "2026-11-30T01:02:34Z"
    env.refresh()
    uid = env.pod("v")["metadata"]["uid"]
    env.step()
    env.step(2.0)
    assert env.pod("done")["status"]["phase"] == "Succeeded"
    del env.api.objects[pod_path("v")]
    env.api.objects[pod_path("done")]["metadata"]["deletionTimestamp"] = "2026-11-30T01:02:34Z"
    env.refresh()
    env.step(0.5)
    (killing,) = env.events("Killing")
    assert killing["involvedObject"]["uid"] == uid and killing["eventTime"] == micro_time(env.clock.now())
    # The pod deleted while the agent was away was never started here: no Started, no Killing.
    assert env.events(name="away") == []


# -- best effort: partitions, failures, the queue -------------------------------------------------


def test_a_partitioned_agent_emits_nothing_and_what_it_queued_is_dropped(tmp_path: Path) -> None:
    env = Env(tmp_path, gated=True, retry_delays=(0.0, 0.0))
    env.gate.partition()
    env.add_pod("t", TRAINING)
    env.step()
    env.step(1.0)  # Started and Resumed happen while cut off
    assert env.workload("t").step == 4 and env.recorder.dropped == 2
    assert env.events() == [] and env.api.verbs("POST") == []  # not even attempted past the gate
    env.gate.heal()
    env.recorder.drain()
    assert env.events() == []  # dropped, not delivered late
    env.sync.resync()
    env.step()
    assert env.pod("t")["status"]["phase"] == "Running"
    # Connected again: the next transition is recorded.
    env.api.objects[pod_path("t")]["metadata"]["deletionTimestamp"] = "2026-11-30T01:02:34Z"
    env.refresh()
    env.step(0.1)
    assert [e["reason"] for e in env.events()] == ["Killing"]


def test_a_partition_between_the_transition_and_the_write_drops_the_event(tmp_path: Path) -> None:
    env = Env(tmp_path, gated=True)
    env.add_pod("p")
    env.sync.sync_once()  # Started is queued ...
    assert env.recorder.queued() == 1
    env.gate.partition()  # ... and the node is cut off before it goes out
    env.recorder.drain()
    assert env.events() == [] and env.recorder.dropped == 1 and env.recorder.queued() == 0


def test_transient_failures_are_retried_and_lasting_ones_never_reach_pod_sync(tmp_path: Path) -> None:
    env = Env(tmp_path, retry_delays=(0.0, 0.0))
    failures = iter([status_error(500, "InternalError"), unreachable("POST", "/x")])

    def flaky(verb: str, path: str) -> Exception | None:
        return next(failures, None) if "/events" in path else None

    env.api.fail = flaky
    env.add_pod("p")
    env.step()
    assert [e["reason"] for e in env.events()] == ["Started"]  # third attempt
    env.api.fail = lambda verb, path: unreachable(verb, path) if "/events" in path else None
    env.add_pod("q")
    env.step()
    assert env.pod("q")["status"]["phase"] == "Running" and env.recorder.dropped == 1
    assert len([c for c in env.api.verbs("POST") if c[1].endswith("/events")]) == 3 + 3
    env.api.fail = lambda verb, path: status_error(403, "Forbidden") if "/events" in path else None
    env.add_pod("r")
    env.step()  # refused: one attempt, dropped
    assert env.recorder.dropped == 2 and len(env.api.verbs("POST")) == 6 + 1


def test_the_same_event_again_bumps_count_and_series_and_an_expired_one_is_recreated(env: Env) -> None:
    ref = pod_reference(env.add_pod("p"))
    recorder = env.recorder
    second = START + timedelta(seconds=2, microseconds=7)
    recorder.record(ref, "Normal", "Started", "Started container main", START, field_path="spec.containers{main}")
    recorder.record(ref, "Normal", "Started", "Started container main", second, field_path="spec.containers{main}")
    assert recorder.drain() == 2
    (ev,) = env.events()
    assert (ev["count"], ev["eventTime"], ev["lastTimestamp"]) == (2, micro_time(START), rfc3339(second))
    assert ev["series"] == {"count": 2, "lastObservedTime": "2026-11-30T01:02:05.123463Z"}
    assert deserialize(ev, "CoreV1Event").series.last_observed_time == second
    del env.api.objects[next(p for p in env.api.objects if "/events/" in p)]
    recorder.record(ref, "Normal", "Started", "Started container main", second, field_path="spec.containers{main}")
    assert recorder.drain() == 1
    (ev,) = env.events()
    assert (ev["count"], ev["eventTime"]) == (1, micro_time(second))


def test_recording_never_blocks_or_raises_and_a_full_queue_drops_the_newest(tmp_path: Path) -> None:
    api = FakeApi()
    recorder = PodEventRecorder(api, NODE, max_queued=2)
    ref = {"kind": "Pod", "namespace": "default", "name": "p", "uid": "u", "apiVersion": "v1", "resourceVersion": ""}
    for i in range(3):
        recorder.record(ref, "Normal", "Started", f"Started container c{i}", START)
    recorder.record({"name": object()}, "Normal", "Started", "x", "not a time")  # type: ignore[arg-type]
    assert recorder.queued() == 2 and recorder.dropped == 1
    assert recorder.drain() == 2
    assert [o["message"] for p, o in api.objects.items() if "/events/" in p] == ["Started container c0", "Started container c1"]


def test_the_writer_thread_writes_in_order_and_stops(tmp_path: Path) -> None:
    api = FakeApi()
    recorder = PodEventRecorder(api, NODE)
    ref = {"kind": "Pod", "namespace": "default", "name": "p", "uid": "u", "apiVersion": "v1", "resourceVersion": ""}
    recorder.start()
    try:
        for i in range(20):
            recorder.record(ref, "Normal", "Started", f"Started container c{i}", START + timedelta(microseconds=i))
        deadline = time.monotonic() + 10
        while recorder.written < 20 and time.monotonic() < deadline:
            threading.Event().wait(0.01)
    finally:
        recorder.stop()
    assert recorder._thread is not None and not recorder._thread.is_alive()
    times = [o["eventTime"] for p, o in api.objects.items() if "/events/" in p]
    assert times == [micro_time(START + timedelta(microseconds=i)) for i in range(20)]
