"""The healing decisions on a virtual clock: node lifecycle, taint eviction, the healer, the Volcano job.

Every case is a pure function of plain data and ``now``; no clock is read, no process started.
"""

from __future__ import annotations

import pytest

from refplatform.core import Taint, TaintEffect, Toleration, TolerationOperator
from refplatform.core.healing import (
    NOT_READY_TAINT, UNREACHABLE_TAINT, NodeObservation, NodeState, PoolNode, Readiness, TimedTaint,
    TimedToleration, eviction_time, judge_node, plan_healing, with_default_tolerations,
)
from refplatform.core.vcjob import (
    JobAction, JobEvent, JobPhase, JobSpec, JobView, Policy, RankPod, TaskSpec, plan_job, ranks_of,
)
from refplatform.profiles import K8S_DEFAULTS, TUNED

T0 = 1_800_000_000.0  # a virtual epoch
NE, NS = TaintEffect.NO_EXECUTE, TaintEffect.NO_SCHEDULE
UNREACHABLE = (Taint(UNREACHABLE_TAINT, "", NE), Taint(UNREACHABLE_TAINT, "", NS))
NOT_READY = (Taint(NOT_READY_TAINT, "", NE), Taint(NOT_READY_TAINT, "", NS))
GPU_TAINT = Taint("gpu", "bad", NS)


# ------------------------------------------------------------------ node lifecycle
def obs(heard: float, ready: Readiness = Readiness.TRUE, taints: tuple[Taint, ...] = (),
        healthy: bool | None = None) -> NodeObservation:
    return NodeObservation("n0", T0 + heard, ready, taints, healthy)


@pytest.mark.parametrize("case, observation, now, state, ready, taints, probe", [
    ("fresh lease, Ready: nothing to do", obs(0), 2.9, NodeState.HEALTHY, None, (), False),
    ("exactly at the grace period: still fresh", obs(0), 3.0, NodeState.HEALTHY, None, (), False),
    ("lease older than the grace period: Unknown + unreachable taints", obs(0), 3.01,
     NodeState.UNREACHABLE, Readiness.UNKNOWN, UNREACHABLE, False),
    ("already Unknown and tainted: nothing new to write", obs(0, Readiness.UNKNOWN, UNREACHABLE), 10,
     NodeState.UNREACHABLE, None, UNREACHABLE, False),
    ("other taints are kept", obs(0, taints=(GPU_TAINT,)), 4, NodeState.UNREACHABLE, Readiness.UNKNOWN,
     (GPU_TAINT, *UNREACHABLE), False),
    ("a stale not-ready taint becomes unreachable", obs(0, Readiness.FALSE, NOT_READY), 4,
     NodeState.UNREACHABLE, Readiness.UNKNOWN, UNREACHABLE, False),
    ("the agent says Ready=False itself: not-ready taints", obs(0, Readiness.FALSE), 1,
     NodeState.NOT_READY, None, NOT_READY, False),
    ("lease moves again, not probed yet: taints kept, probe wanted", obs(10, Readiness.UNKNOWN, UNREACHABLE), 10.5,
     NodeState.RECOVERING, None, UNREACHABLE, True),
    ("lease moves again, health check fails: taints kept", obs(10, Readiness.TRUE, UNREACHABLE, healthy=False),
     10.5, NodeState.RECOVERING, None, UNREACHABLE, True),
    ("lease moves again, health passes: Ready back, untainted",
     obs(10, Readiness.UNKNOWN, (GPU_TAINT, *UNREACHABLE), healthy=True), 10.5,
     NodeState.RECOVERED, Readiness.TRUE, (GPU_TAINT,), False),
    ("agent already posted Ready, health passes: only the taints go", obs(10, Readiness.TRUE, UNREACHABLE, True),
     10.5, NodeState.RECOVERED, None, (), False),
])
def test_node_lifecycle(case: str, observation: NodeObservation, now: float, state: NodeState,
                        ready: Readiness | None, taints: tuple[Taint, ...], probe: bool) -> None:
    verdict = judge_node(observation, T0 + now, TUNED.node_monitor_grace_period)
    got = (verdict.state, verdict.ready, set(verdict.taints), verdict.probe)
    assert got == (state, ready, set(taints), probe), case


def test_node_lifecycle_says_when_to_look_again() -> None:
    verdict = judge_node(obs(0), T0 + 1, grace=3)
    assert verdict.next_check == T0 + 3
    assert judge_node(obs(0), T0 + 1, grace=K8S_DEFAULTS.node_monitor_grace_period).next_check == T0 + 50


def test_a_lost_node_is_detected_within_the_tuned_budget_wherever_the_fault_lands() -> None:
    """A fault anywhere in a heartbeat interval is detected within grace + one monitor period (<= 3.5 s)."""
    hb, grace, period = TUNED.heartbeat, TUNED.node_monitor_grace_period, TUNED.node_monitor_period
    for tenth in range(10):
        fault = T0 + tenth * hb / 10  # the last renewal was at T0
        now = fault
        while judge_node(obs(0), now, grace).state is NodeState.HEALTHY:
            now += period
        assert now - fault <= TUNED.detect_bounds()[1] <= 3.5
        assert now - fault >= TUNED.detect_bounds()[0]


def test_a_fresh_grace_period_after_master_disruption_holds_a_stale_node_but_never_recovers_it() -> None:
    grace = TUNED.node_monitor_grace_period
    stale = obs(0, Readiness.UNKNOWN, (UNREACHABLE[1],))
    held = judge_node(stale, T0 + 20, grace, fresh_from=T0 + 19)
    assert (held.state, held.ready, held.taints, held.probe, held.next_check) == (
        NodeState.GRACE, None, stale.taints, False, T0 + 19 + grace)
    after = judge_node(stale, T0 + 22.1, grace, fresh_from=T0 + 19)
    assert after.state is NodeState.UNREACHABLE and set(after.taints) == set(UNREACHABLE)


# ------------------------------------------------------------------ taint eviction
def tol(key: str = "", op: TolerationOperator = TolerationOperator.EXISTS, effect: TaintEffect | None = NE,
        seconds: float | None = None, value: str = "") -> TimedToleration:
    return TimedToleration(Toleration(key, op, value, effect), seconds)


UNREACHABLE_AT_0 = [TimedTaint(UNREACHABLE[0], T0), TimedTaint(UNREACHABLE[1], T0)]


@pytest.mark.parametrize("case, taints, tolerations, default, expect", [
    ("no NoExecute taint: never", [TimedTaint(GPU_TAINT, T0)], [], 0, None),
    ("tuned default 0 s: at once", UNREACHABLE_AT_0, [], TUNED.default_toleration_seconds, 0),
    ("k8s default 300 s after the taint was added", UNREACHABLE_AT_0, [], K8S_DEFAULTS.default_toleration_seconds,
     300),
    ("the pod's own toleration wins over the default", UNREACHABLE_AT_0, [tol(UNREACHABLE_TAINT, seconds=30)], 300,
     30),
    ("a toleration without seconds tolerates for ever", UNREACHABLE_AT_0, [tol(UNREACHABLE_TAINT)], 0, None),
    ("the empty key with Exists tolerates everything", UNREACHABLE_AT_0, [tol("", effect=None)], 0, None),
    ("an untolerated NoExecute taint evicts at once",
     [TimedTaint(Taint("node.kubernetes.io/out-of-service", "nodeshutdown", NE), T0)], [], 300, 0),
    ("the shortest matching toleration counts", UNREACHABLE_AT_0,
     [tol(UNREACHABLE_TAINT, seconds=60), tol("", effect=None, seconds=20)], 300, 20),
    ("negative seconds count as zero", UNREACHABLE_AT_0, [tol(UNREACHABLE_TAINT, seconds=-5)], 300, 0),
    ("Equal needs the value", [TimedTaint(Taint("maint", "yes", NE), T0)],
     [tol("maint", TolerationOperator.EQUAL, seconds=10, value="no")], 300, 0),
])
def test_taint_eviction(case: str, taints: list[TimedTaint], tolerations: list[TimedToleration], default: float,
                        expect: float | None) -> None:
    now = T0 + 1
    at = eviction_time(taints, with_default_tolerations(tolerations, default), now)
    if expect is None:
        assert at is None, case
    elif expect == 0:
        assert at is not None and at <= now, case
    else:
        assert at == T0 + expect, case


# ------------------------------------------------------------------------ healer
def pn(name: str, ready: Readiness = Readiness.TRUE, **kw: object) -> PoolNode:
    return PoolNode(name, ready, **kw)  # type: ignore[arg-type]


def steps(plan_nodes: list[PoolNode], now: float = T0, **kw: object) -> list[tuple[str, str, str]]:
    plan = plan_healing(plan_nodes, now, **kw)  # type: ignore[arg-type]
    return [(s.action.value, s.node, s.reason) for s in plan.steps]


SPARE = dict(spare=True, enrolled=True, configured_spare=True)


def test_healer_enrolls_configured_spares_once() -> None:
    assert steps([pn("n0"), pn("n4", configured_spare=True)]) == [("EnrollSpare", "n4", "")]
    assert steps([pn("n0"), pn("n4", **SPARE)]) == []
    # Promoted earlier (label gone, annotation kept): not enrolled again.
    assert steps([pn("n0"), pn("n4", configured_spare=True, enrolled=True)]) == []


LOST = dict(lease_fresh=False, condition_tainted=True)


def test_a_lost_working_node_is_quarantined_and_one_spare_released() -> None:
    nodes = [pn("n0", Readiness.UNKNOWN, not_ready_since=T0, **LOST), pn("n1"),
             pn("n4", **SPARE), pn("n5", **SPARE)]
    assert steps(nodes) == [("NodeQuarantined", "n0", "unreachable"), ("SparePromoted", "n4", "n0")]


def test_two_lost_nodes_release_two_spares_and_an_unhealthy_spare_is_never_released() -> None:
    nodes = [pn("n0", Readiness.UNKNOWN, **LOST), pn("n1", Readiness.FALSE, condition_tainted=True),
             pn("n4", Readiness.UNKNOWN, **LOST, **SPARE), pn("n5", **SPARE)]
    assert steps(nodes) == [("NodeQuarantined", "n0", "unreachable"), ("SparePromoted", "n5", "n0"),
                            ("NodeQuarantined", "n1", "not-ready"), ("NodeQuarantined", "n4", "unreachable")]


def test_quarantine_waits_for_quarantine_after_and_can_be_off() -> None:
    lost = [pn("n0", Readiness.UNKNOWN, not_ready_since=T0, **LOST), pn("n4", **SPARE)]
    plan = plan_healing(lost, T0 + 1, quarantine_after=5)
    assert plan.steps == () and plan.next_check == T0 + 5
    assert steps(lost, T0 + 5, quarantine_after=5)[0] == ("NodeQuarantined", "n0", "unreachable")
    assert steps(lost, T0 + 60, quarantine=False) == []


def test_quarantine_waits_for_the_node_lifecycle_controllers_taint() -> None:
    """Ready=Unknown but not yet tainted unreachable: not yet (the taints keep their order)."""
    nodes = [pn("n0", Readiness.UNKNOWN, not_ready_since=T0, lease_fresh=False), pn("n4", **SPARE)]
    assert steps(nodes) == []


def test_a_quarantined_node_returns_to_the_pool_only_after_its_health_check_passes() -> None:
    q = dict(quarantined=True, enrolled=True)
    # Still silent: nothing, no probe.
    plan = plan_healing([pn("n0", Readiness.UNKNOWN, lease_fresh=False, **q)], T0)
    assert plan.steps == () and plan.probes == ()
    # Heartbeats again, not probed yet / probe failed: a probe is wanted, no return.
    for healthy in (None, False):
        plan = plan_healing([pn("n0", Readiness.TRUE, lease_fresh=True, healthy=healthy, **q)], T0)
        assert plan.steps == () and plan.probes == ("n0",)
    # Heartbeats, Ready, healthy: back into the pool.
    assert steps([pn("n0", Readiness.TRUE, lease_fresh=True, healthy=True, **q)]) == [("NodeRecovered", "n0", "")]
    # Healthy but Ready still Unknown, or still tainted unreachable (the node lifecycle controller has
    # not put it back yet): wait.
    assert steps([pn("n0", Readiness.UNKNOWN, lease_fresh=True, healthy=True, **q)]) == []
    assert steps([pn("n0", Readiness.TRUE, lease_fresh=True, healthy=True, condition_tainted=True, **q)]) == []


# -------------------------------------------------------------- Volcano job
RESTART_ON_LOSS = (Policy(("PodEvicted",), JobAction.RESTART_JOB), Policy(("PodFailed",), JobAction.RESTART_JOB))
CANARY = JobSpec("canary", (TaskSpec("worker", 2),), min_available=2, max_retry=3, policies=RESTART_ON_LOSS)


def rp(index: int, epoch: int = 0, phase: str = "Running", **kw: object) -> RankPod:
    return RankPod(f"canary-worker-{index}", f"uid-{epoch}-{index}", epoch, phase, task="worker",
                   **kw)  # type: ignore[arg-type]


def test_ranks_are_named_and_numbered_in_task_order() -> None:
    spec = JobSpec("j", (TaskSpec("master", 1), TaskSpec("worker", 2)))
    assert [(r.name, r.task, r.index, r.rank) for r in ranks_of(spec)] == [
        ("j-master-0", "master", 0, 0), ("j-worker-0", "worker", 0, 1), ("j-worker-1", "worker", 1, 2)]
    assert spec.min_available_or_all == 3


def test_a_new_job_creates_every_rank_and_runs_once_min_available_run() -> None:
    plan = plan_job(CANARY, JobView(), [])
    assert plan.phase is JobPhase.PENDING and [r.name for r in plan.create] == ["canary-worker-0", "canary-worker-1"]
    assert plan_job(CANARY, JobView(JobPhase.PENDING), [rp(0), rp(1, phase="Pending")]).phase is JobPhase.PENDING
    plan = plan_job(CANARY, JobView(JobPhase.PENDING), [rp(0), rp(1)])
    assert plan.phase is JobPhase.RUNNING and plan.create == () and plan.counts.running == 2


def test_an_evicted_rank_restarts_the_whole_gang_with_a_new_epoch() -> None:
    pods = [rp(0, node="n0", terminating=True, node_lost=True), rp(1, node="n1")]
    plan = plan_job(CANARY, JobView(JobPhase.RUNNING, 0, 0), pods)
    assert (plan.phase, plan.bump_epoch, plan.epoch, plan.retry_count, plan.action) == (
        JobPhase.RESTARTING, True, 1, 1, JobAction.RESTART_JOB)
    assert plan.trigger == (JobEvent.POD_EVICTED, "canary-worker-0")
    # Grace 0 on the lost node, graceful elsewhere.
    assert {(d.name, d.force) for d in plan.delete} == {("canary-worker-0", True), ("canary-worker-1", False)}

    # Next reconcile (epoch 1 stored): the old rank 1 is still terminating -> keep Restarting, create nothing.
    old_1 = rp(1, node="n1", terminating=True)
    plan = plan_job(CANARY, JobView(JobPhase.RESTARTING, 1, 1), [old_1], deleting=frozenset({old_1.uid}))
    assert (plan.phase, plan.create, plan.delete, plan.bump_epoch) == (JobPhase.RESTARTING, (), (), False)
    # Old pods gone: back to Pending, every rank created at epoch 1.
    plan = plan_job(CANARY, JobView(JobPhase.RESTARTING, 1, 1), [])
    assert plan.phase is JobPhase.PENDING and plan.epoch == 1 and len(plan.create) == 2


def test_a_failed_rank_restarts_the_job_and_an_exit_code_policy_can_abort_it() -> None:
    plan = plan_job(CANARY, JobView(JobPhase.RUNNING), [rp(0, phase="Failed", exit_code=1), rp(1)])
    assert plan.action is JobAction.RESTART_JOB and plan.trigger == (JobEvent.POD_FAILED, "canary-worker-0")
    spec = JobSpec("canary", (TaskSpec("worker", 2, (Policy((), JobAction.ABORT_JOB, exit_code=3),)),),
                   min_available=2, policies=RESTART_ON_LOSS)
    plan = plan_job(spec, JobView(JobPhase.RUNNING), [rp(0, phase="Failed", exit_code=3), rp(1)])
    assert plan.phase is JobPhase.ABORTING and [d.name for d in plan.delete] == ["canary-worker-1"]
    assert plan_job(spec, JobView(JobPhase.ABORTING), [rp(0, phase="Failed")]).phase is JobPhase.ABORTED


def test_the_any_event_policy_and_task_policies_come_first() -> None:
    spec = JobSpec("canary", (TaskSpec("worker", 2, (Policy(("*",), JobAction.RESTART_POD),)),), min_available=2,
                   policies=RESTART_ON_LOSS)
    plan = plan_job(spec, JobView(JobPhase.RUNNING), [rp(0, terminating=True, node="n0"), rp(1)])
    assert plan.action is JobAction.RESTART_POD and not plan.bump_epoch
    assert [(d.name, d.force) for d in plan.delete] == [("canary-worker-0", False)]


def test_without_a_policy_a_deleted_rank_is_just_created_again() -> None:
    spec = JobSpec("canary", (TaskSpec("worker", 2),), min_available=2)
    plan = plan_job(spec, JobView(JobPhase.RUNNING), [rp(1)], vanished=["canary-worker-0"])
    assert plan.action is None and [r.name for r in plan.create] == ["canary-worker-0"]


def test_a_vanished_rank_raises_pod_evicted_but_pods_this_controller_deleted_do_not() -> None:
    plan = plan_job(CANARY, JobView(JobPhase.RUNNING), [rp(1)], vanished=["canary-worker-0"])
    assert plan.trigger == (JobEvent.POD_EVICTED, "canary-worker-0")
    mine = rp(0, terminating=True, node="n0")
    plan = plan_job(CANARY, JobView(JobPhase.RUNNING), [mine, rp(1)], deleting=frozenset({mine.uid}))
    assert plan.action is None


def test_restarts_are_bounded_by_max_retry_as_volcano_counts_them() -> None:
    """Volcano: RestartJob counts a retry; Restarting fails the job once retryCount >= maxRetry."""
    evicted = [rp(0, epoch=1, terminating=True, node="n0", node_lost=True), rp(1, epoch=1)]
    second = plan_job(CANARY, JobView(JobPhase.RUNNING, 1, 1), evicted)
    assert (second.phase, second.retry_count, second.epoch) == (JobPhase.RESTARTING, 2, 2)
    assert plan_job(CANARY, JobView(JobPhase.RESTARTING, 2, 2), []).phase is JobPhase.PENDING
    third = plan_job(CANARY, JobView(JobPhase.RUNNING, 2, 2),
                     [rp(0, epoch=2, terminating=True, node="n0", node_lost=True), rp(1, epoch=2)])
    assert third.retry_count == 3
    failed = plan_job(CANARY, JobView(JobPhase.RESTARTING, 3, 3), [])
    assert failed.phase is JobPhase.FAILED and failed.create == ()
    # maxRetry 0 means Volcano's default, 3.
    assert JobSpec("j", (TaskSpec("w", 1),), max_retry=0).retry_limit == 3


def test_completion_follows_volcano() -> None:
    assert plan_job(CANARY, JobView(JobPhase.RUNNING), [rp(0, phase="Succeeded"), rp(1, phase="Succeeded")]
                    ).phase is JobPhase.COMPLETED
    spec = JobSpec("canary", (TaskSpec("worker", 2),), min_available=2)  # no policies: a failure is final
    assert plan_job(spec, JobView(JobPhase.RUNNING), [rp(0, phase="Succeeded"), rp(1, phase="Failed")]
                    ).phase is JobPhase.FAILED
    assert plan_job(spec, JobView(JobPhase.RUNNING), [rp(0, phase="Succeeded"), rp(1)]).phase is JobPhase.RUNNING


def test_finished_jobs_only_clean_up_and_never_recreate() -> None:
    plan = plan_job(CANARY, JobView(JobPhase.FAILED, 3, 3), [rp(0, epoch=3, node="n0", node_lost=True,
                                                                terminating=True)])
    assert plan.phase is JobPhase.FAILED and plan.create == () and [d.force for d in plan.delete] == [True]
