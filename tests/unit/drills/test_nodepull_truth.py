"""The node-pull drill judges the resume point and lost work from the canary's own log, never the platform's."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from drills.kinds.nodepull.drill import NodePullDrill
from drills.kube.flavors import FlavorError, GangFlavor, VolcanoForm, gang_manifests, indexed_job
from drills.records.verdict import DrillInconclusive, DrillResult, ScenarioHalted, Threshold, Verdict
from drills.target.profile import CanarySettings, reference_profile
from drills.workloads.canaryjob import CanaryForm, CanaryTraining, canary_job_spec
from drills.workloads.canarylog import CanaryLog, parse_line
from drills.workloads.training import Instant, rank_of

T0 = 1_800_000_000.0


def add(log: CanaryLog, uid: str, seq: int, event: str, ts: float, mono: float, **fields: Any) -> None:
    stamp = f"2027-01-15T08:{int((ts - T0) // 60):02d}:{(ts - T0) % 60:09.6f}Z"
    text = json.dumps({"seq": seq, "ts": stamp, "event": event, "rank": fields.pop("rank", 0), **fields})
    parsed = parse_line(text, pod=f"pod-{uid}", uid=uid, node="gpu-node-0", mono=mono, wall=mono)
    assert parsed is not None
    log.add(parsed)


def story(resume_from: int, *, checkpoint_every: int = 20, fault_after: int = 30) -> NodePullDrill:
    """Ranks a (rank 0) and b step to ``fault_after`` at 0.1 s a step, rank 0 checkpoints every 20; the fault comes
    right after; a replacement c resumes from ``resume_from`` and steps once beyond it."""
    drill = NodePullDrill(target=None, result=DrillResult("node-pull"), run_id="r")  # type: ignore[arg-type]
    seq = {"a": 0, "b": 0}
    for step in range(1, fault_after + 1):
        for uid in ("a", "b"):
            seq[uid] += 1
            add(drill.canary, uid, seq[uid], "step", T0 + step * 0.1, step * 0.1, step=step, wall_s=0.1)
        if step % checkpoint_every == 0:
            seq["a"] += 1
            add(drill.canary, "a", seq["a"], "checkpoint", T0 + step * 0.1 + 0.001, step * 0.1, step=step)
    drill.before_fault = {"a", "b"}
    fault = T0 + fault_after * 0.1 + 0.05
    drill.instants = {"fault": Instant(fault - T0, fault), "replace": Instant(fault - T0 + 4, fault + 4)}
    add(drill.canary, "c", 3, "resumed", fault + 4.5, fault - T0 + 4.5, from_step=resume_from,
        checkpoint=f"ckpt-{resume_from:010d}.json" if resume_from else None, skipped=[], generation="1")
    add(drill.canary, "c", 4, "step", fault + 4.7, fault - T0 + 4.7, step=resume_from + 1, wall_s=0.1)
    (drill.resumption,) = drill.canary.resumptions(exclude=drill.before_fault)
    return drill


def test_resuming_from_the_last_checkpoint_passes_and_counts_the_steps_redone() -> None:
    drill = story(resume_from=20)
    drill._judge_resume_point()
    assert drill.result.verdict is Verdict.PASS, drill.result.findings
    assert (drill.step_at_fault, drill.checkpoint_at_fault) == (30, 20)
    assert drill.result.details["resume-point"]["resumed_from"] == 20


def test_a_platform_that_loses_the_checkpoint_fails_naming_both_steps() -> None:
    drill = story(resume_from=0)
    drill._judge_resume_point()
    assert drill.result.verdict is Verdict.FAIL
    (finding,) = drill.result.findings
    assert "training resumed from step 0, but checkpoint 20 was complete before the fault" in finding
    assert "20 steps of saved work were lost" in finding


def test_resuming_from_a_checkpoint_the_job_never_wrote_fails() -> None:
    drill = story(resume_from=25)
    drill._judge_resume_point()
    assert drill.result.verdict is Verdict.FAIL
    assert "a checkpoint the job never logged as complete" in drill.result.findings[0]


def test_the_resume_point_is_judged_once() -> None:
    drill = story(resume_from=0)
    drill._judge_resume_point()
    drill._judge_resume_point()
    assert len(drill.result.findings) == 1


def test_a_pull_between_checkpoints_reports_the_steps_really_lost() -> None:
    """Checkpoints every 20 steps, the fault about 10 steps after one: about 10 steps lost, not 0."""
    drill = story(resume_from=20, fault_after=31)
    drill._judge_resume_point()
    assert drill.step_at_fault - drill.resumption.from_step == 11  # type: ignore[union-attr]


def test_the_canary_job_carries_rank_generation_storage_and_the_canary_command() -> None:
    profile = reference_profile()
    spec = canary_job_spec("canary-x", "run1", profile, CanaryTraining(2, 4, 5, compute_seconds=0.1))
    (job,) = gang_manifests(spec, GangFlavor.VOLCANO, VolcanoForm.JOB)
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["firedrill-canary"]
    assert container["args"][:1] == ["train"] and "/firedrill/run1/canary-x/checkpoints" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["WORLD_SIZE"]["value"] == "2"
    assert env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.annotations['volcano.sh/task-index']"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert pod["volumes"] == [{"name": "firedrill-shared", "nfs": {"server": "refplatform-nfs", "path": "/firedrill"}}]
    assert container["volumeMounts"] == [{"name": "firedrill-shared", "mountPath": "/firedrill"}]
    json.dumps(job)  # a plain manifest, no mapping proxies left


def test_without_shared_storage_the_canary_cannot_run() -> None:
    from dataclasses import replace
    profile = replace(reference_profile(), canary=CanarySettings())
    with pytest.raises(DrillInconclusive, match="canary.shared_volume"):
        canary_job_spec("c", "r", profile, CanaryTraining(2, 4, 5))


@pytest.mark.parametrize("flavor,queue_label", [(GangFlavor.NATIVE, None), (GangFlavor.KUEUE, "team-a")])
def test_on_a_cluster_without_volcano_the_canary_is_an_indexed_job_whose_ranks_rejoin(
        flavor: GangFlavor, queue_label: str | None) -> None:
    from dataclasses import replace
    profile = replace(reference_profile(), flavor=flavor, queue="team-a")
    training = CanaryTraining(3, 4, 5, compute_seconds=0.1, peer_timeout=3.0)
    spec = canary_job_spec("canary-x", "run1", profile, training, form=CanaryForm.INDEXED_JOB)
    job = indexed_job(spec, flavor)
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert {k: job["spec"][k] for k in ("completionMode", "completions", "parallelism", "podReplacementPolicy")} == {
        "completionMode": "Indexed", "completions": 3, "parallelism": 3, "podReplacementPolicy": "TerminatingOrFailed"}
    assert job["metadata"]["labels"].get("kueue.x-k8s.io/queue-name") == queue_label
    template = job["spec"]["template"]
    assert template["metadata"]["labels"]["firedrill.dev/drill-run"] == "run1"  # the drill finds every rank's pod
    (container,) = template["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["FIREDRILL_GENERATION"] == {"name": "FIREDRILL_GENERATION", "value": "0"}
    args = container["args"]
    assert args[args.index("--peer-timeout") + 1] == "3"  # a survivor exits, so the Job controller restarts it
    assert template["spec"]["restartPolicy"] == "Never"
    json.dumps(job)


def test_no_indexed_job_is_written_for_a_flavor_with_its_own_job_controller() -> None:
    spec = canary_job_spec("canary-x", "run1", reference_profile(), CanaryTraining(2, 4, 5),
                           form=CanaryForm.INDEXED_JOB)
    with pytest.raises(FlavorError, match="flavor volcano"):
        indexed_job(spec, GangFlavor.VOLCANO)
    with pytest.raises(ValueError, match="peer timeout"):
        CanaryTraining(2, 4, 5, peer_timeout=0)


@pytest.mark.parametrize("meta,rank", [
    ({"annotations": {"volcano.sh/task-index": "1"}}, 1),
    ({"annotations": {"batch.kubernetes.io/job-completion-index": "2"}}, 2),
    ({"annotations": {"firedrill.dev/rank": "0"}}, 0),
    ({"labels": {"firedrill.dev/worker-index": "3"}}, 3),
    ({"name": "canary-x-worker-1"}, None),  # a name is no rank
])
def test_the_pulled_rank_is_found_by_what_its_job_controller_wrote(meta: dict[str, Any], rank: int | None) -> None:
    assert rank_of({"metadata": meta}) == rank


class JumpingClock:
    """A harness clock that moves 4 s each time it is read: a phase's deadline passes without real waiting."""

    def __init__(self) -> None:
        self.t = 0.0

    def mono(self) -> float:
        self.t += 4.0
        return self.t

    def wall(self) -> float:
        return T0 + self.t


def pulled(**instants: float) -> NodePullDrill:
    target = SimpleNamespace(timeline=SimpleNamespace(clock=JumpingClock()))
    drill = NodePullDrill(target=target, result=DrillResult("node-pull"), run_id="r")  # type: ignore[arg-type]
    drill.instants = {name: Instant(at, T0 + at) for name, at in instants.items()}
    return drill


def test_a_phase_that_never_comes_ends_the_scenario_at_its_threshold_and_grace() -> None:
    """Issue 25, fail fast: detect within 5 s is waited for 5 s and 1.25 s of grace from the fault, not for twice
    the threshold and ten seconds more; then the scenario ends, naming what it never reached."""
    drill = pulled(fault=0.0)
    drill.observe_phase("detect", 5.0)
    drill.result.check(Threshold("detect", 5.0, "s"))
    drill.end_if_never("detect", 5.0)
    with pytest.raises(ScenarioHalted):
        drill.result.raise_if_halted()
    assert drill.target.timeline.clock.t <= 16.0, "it waited well past the threshold and grace"
    assert any("detect never came: t_detect was not observed within 6.25 s of t_fault (the promise of 5 s and "
               "1.25 s of grace), so evict, replace, resume, total, lost steps could never be measured" in f
               for f in drill.result.findings), drill.result.findings


def test_a_phase_missed_by_a_little_is_reported_with_its_value() -> None:
    drill = pulled(fault=0.0, detect=1.0, evict=1.5, replace=13.0)
    drill.observe_phase("replace", 10.0)
    drill.result.check(Threshold("replace", 10.0, "s"))
    drill.end_if_never("replace", 10.0)
    drill.result.raise_if_halted()  # it came: nothing halts
    assert [j.message for j in drill.result.judgements] == ["replace: measured 11.500 s, threshold <= 10 s -- MISSED"]


class FixedClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def mono(self) -> float:
        return self.t


def ranks_started(at: float, now: float, *, met: bool = False) -> NodePullDrill:
    target = SimpleNamespace(timeline=SimpleNamespace(clock=FixedClock(now)))
    drill = NodePullDrill(target=target, result=DrillResult("node-pull"), run_id="r")  # type: ignore[arg-type]
    drill.spec = SimpleNamespace(min_available=2)  # type: ignore[assignment]
    for i, uid in enumerate(("a", "b")):
        drill.pods[f"w{i}"] = {"metadata": {"name": f"w{i}", "uid": uid}, "status": {"phase": "Running"}}
        add(drill.canary, uid, 1, "start", T0 + at, at, rank=i, pid=1, config={}, gpus=None)
        if met:
            add(drill.canary, uid, 2, "rendezvous", T0 + at + 1, at + 1, rank=i, master="x:1", seconds=1.0)
    return drill


def test_a_world_that_never_forms_is_given_up_soon_after_its_last_rank_started() -> None:
    """Fail fast at the start too: ranks that run and started but never met (storage not shared between nodes)
    are told apart from a slow start within seconds, not after the minute a start may take."""
    assert ranks_started(at=100.0, now=111.0)._never_met()
    assert not ranks_started(at=100.0, now=105.0)._never_met()  # still within the rendezvous grace
    assert not ranks_started(at=100.0, now=200.0, met=True)._never_met()  # they met: training is what counts


def test_keep_measuring_waits_past_the_threshold_so_the_value_is_recorded() -> None:
    """Issue 32: on acceptance day a cluster with slow timers still gets each phase's value in its evidence."""
    drill = pulled(fault=0.0)
    assert drill._grace(5.0) == 1.25
    drill.target.keep_measuring = 60.0  # type: ignore[attr-defined]
    assert drill._grace(5.0) == 60.0 and drill._grace(400.0) == 100.0


def test_a_job_its_controller_gave_up_on_ends_the_wait_for_it_with_the_reason() -> None:
    """The canary job failed before it trained whole (a rank placed on a dead GPU three times): the start is
    INCONCLUSIVE at once, naming the controller's reason, instead of after the minute a start may take."""
    drill = NodePullDrill(target=None, result=DrillResult("node-pull"), run_id="r")  # type: ignore[arg-type]
    drill.spec = SimpleNamespace(name="canary-r")  # type: ignore[assignment]
    assert drill._job_failed() is None
    drill.events.append({"involvedObject": {"kind": "Job", "name": "other"}, "reason": "JobFailed"})
    drill.events.append({"involvedObject": {"kind": "Pod", "name": "canary-r"}, "reason": "JobFailed"})
    assert drill._job_failed() is None
    drill.events.append({"involvedObject": {"kind": "Job", "name": "canary-r"}, "reason": "JobFailed",
                         "message": "job restarted 3 times, maxRetry is 3"})
    assert drill._job_failed() == "JobFailed: job restarted 3 times, maxRetry is 3"


def test_a_rank_replaced_and_deleted_before_the_fault_is_not_the_recovery() -> None:
    """A rank that started fresh (resumed from 0), stepped, and was deleted before the fault (a rendezvous
    retried at start, seen at 64 ranks) is of the old incarnation: its fresh start is not the resume point."""
    drill = NodePullDrill(target=None, result=DrillResult("node-pull"), run_id="r")  # type: ignore[arg-type]
    on_pod = drill._on(drill.pods)
    early = {"kind": "Pod", "metadata": {"name": "job-1-x", "uid": "z"}, "spec": {}, "status": {}}
    on_pod("ADDED", early)
    add(drill.canary, "z", 1, "resumed", T0 + 0.05, 0.05, from_step=0, checkpoint=None, skipped=[], rank=1)
    add(drill.canary, "z", 2, "step", T0 + 0.1, 0.1, step=1, wall_s=0.1, rank=1)
    on_pod("DELETED", early)
    drill._mark_before_fault()
    assert "z" in drill.before_fault and not drill.canary.resumptions(exclude=drill.before_fault)


def _event(reason: str, uid: str, at: str) -> dict[str, Any]:
    return {"reason": reason, "involvedObject": {"kind": "Pod", "uid": uid}, "eventTime": at}


def test_the_platform_evicts_a_pod_when_it_first_marks_it_for_deletion() -> None:
    """The harness's t_evict is the first deletion it sees of each pod on the pulled node; the platform's claim
    beside it is each victim's first eviction Event (upstream's TaintManagerEviction marks it for deletion
    before any job controller force-deletes it), the last over the victims; another pod's Events do not count."""
    drill = NodePullDrill(target=None, result=DrillResult("node-pull"), run_id="r")  # type: ignore[arg-type]
    drill.instants = {"fault": Instant(0.0, T0)}
    drill.victims = {"v1", "v2"}
    drill.events += [
        _event("TaintManagerEviction", "v1", "2027-01-15T08:00:03.100000Z"),
        _event("Evicted", "v1", "2027-01-15T08:00:03.300000Z"),  # the job controller's force delete, later
        _event("Killing", "v2", "2027-01-15T08:00:03.200000Z"),
        _event("TaintManagerEviction", "other", "2027-01-15T08:00:09.000000Z"),
    ]
    server = drill._server_instants()
    assert server["evict"] == pytest.approx(T0 + 3.2)  # v2's Killing; v1 was marked at 3.1, not 3.3
