"""The hang drill's sentences (docs/STEPS.md, docs/HANG.md).  The canary job, its checkpoint, the whole recovery
and the lost steps are node pull's sentences: they act on this drill in a scenario that hangs a rank."""

from __future__ import annotations

from drills.kinds.hang.drill import HangDrill
from drills.records.verdict import Comparison, Threshold
from drills.scenario.back_in_service import FAULTED
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import step
from drills.workloads.training import TrainingRun


def _hang(drill: ScenarioContext) -> HangDrill:
    return drill.drill(HangDrill)


@step("Given", "the platform restarts a job that makes no progress for {threshold:Duration}",
      "the platform restarts a job that makes no progress for 10 seconds")
def progress_threshold(drill: ScenarioContext, threshold: float) -> None:
    """The promise's threshold: a job whose ranks complete no step for that long is hung. It is written on the
    canary's Job as ``firedrill.dev/progress-timeout-seconds``, which the reference platform's progress watchdog
    reads (docs/HANG.md); comes after the canary job's sentence. In a campaign it applies to the campaign's job
    (a rank hang of its mix is recovered only by such a watchdog)."""
    drill.drill_for(TrainingRun, HangDrill).watch_progress(threshold)


@step("When", "worker {rank:Whole} hangs inside a step", "worker 1 hangs inside a step", sets=(FAULTED,))
def rank_hangs(drill: ScenarioContext, rank: int) -> None:
    """The GPU of a worker (ranks count from 0) gets stuck in a kernel: that rank stops inside its step without
    crashing or saying a word, and every other rank waits in the all-reduce for it with its pod Running, as in a
    hung NCCL collective. The canary's own peer timeout is an hour: only the platform can end it."""
    _hang(drill).hang_rank(rank)


@step("When", "the checkpoint storage stops answering for {duration:Duration}",
      "the checkpoint storage stops answering for 12 seconds", sets=(FAULTED,))
def storage_stalls(drill: ScenarioContext, duration: float) -> None:
    """The storage the job checkpoints to stops answering for that long (an NFS server failing over, a throttled
    object store): a checkpoint write under way or begun in that time waits, and goes on when it answers again.
    On the reference platform the node agent's volume layer freezes writes; on a real cluster the profile's
    ``fault.storage_stall`` command stalls each node's storage. The stall expires by itself."""
    _hang(drill).stall_storage(duration)


@step("Then", "the platform names the hung job within {limit:Duration} of the hang",
      "the platform names the hung job within 15 seconds of the hang")
def hang_named(drill: ScenarioContext, limit: float) -> None:
    """named = t_named - t_fault: the platform names the job hung (the reference platform's ``ProgressStalled``
    Event on the Job, or that condition on its pods). Never named: FAIL naming the job, the rank that hung and the
    step the job stopped at (the canaries' own lines); the scenario ends there."""
    run = _hang(drill)
    run.observe_named(limit)
    drill.result.check(Threshold("named", limit, "s"))
    run.end_if_never("named", limit)


@step("Then", "the job runs again within {limit:Duration} of the naming",
      "the job runs again within 10 seconds of the naming")
def hang_restarted(drill: ScenarioContext, limit: float) -> None:
    """restart = t_restart - t_named: every rank of the job running again, each in a new pod."""
    run = _hang(drill)
    run.observe_phase("restart", limit)
    drill.result.check(Threshold("restart", limit, "s"))
    run.end_if_never("restart", limit)


@step("Then", "training resumes beyond the checkpoint within {limit:Duration} of the restart",
      "training resumes beyond the checkpoint within 10 seconds of the restart")
def hang_resumed(drill: ScenarioContext, limit: float) -> None:
    """resume = t_resume - t_restart: a new rank logs a step beyond the checkpoint it resumed from, which must be
    the last checkpoint the job completed before the hang."""
    run = _hang(drill)
    run.observe_phase("resume", limit)
    drill.result.check(Threshold("resume", limit, "s"))
    run.end_if_never("resume", limit)


@step("Then", "the job is not restarted for {limit:Duration}", "the job is not restarted for 20 seconds")
def not_restarted(drill: ScenarioContext, limit: float) -> None:
    """For that long from the fault (or from this sentence, where nothing was injected) no pod of the job is
    deleted or replaced and the platform names no hang: a checkpoint write or a stalled store is a pause the
    canary declares (its ``checkpoint-begin`` line), not a hang. No pause longer than the stated threshold in
    that time: INCONCLUSIVE."""
    _hang(drill).observe_not_restarted(limit)
    drill.result.check(Threshold("restarts", 0.0, "restarts", Comparison.AT_MOST))


@step("Then", "the checkpoint completes and training goes on within {limit:Duration} of the storage answering again",
      "the checkpoint completes and training goes on within 5 seconds of the storage answering again")
def storage_carried_on(drill: ScenarioContext, limit: float) -> None:
    """carried on = t_carried - t_answer: after the stall's end, the checkpoint write it met is complete (the
    canary's ``checkpoint`` line) and the job steps past where it stood, in the same pods."""
    _hang(drill).observe_carried_on(limit)
    drill.result.check(Threshold("carried on", limit, "s"))
