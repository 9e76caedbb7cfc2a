"""The node pull drill's sentences (docs/STEPS.md)."""

from __future__ import annotations


from collections.abc import Iterator, Sequence

from drills.errors import PlaceholderError
from drills.kinds.nodepull.drill import NodePullDrill
from drills.records.verdict import Comparison, Threshold
from drills.scenario.back_in_service import FAULTED
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import Checked, scenario_rule, step
from drills.target.profile import FaultMethod
from drills.workloads.training import TrainingRun

@step("Given", "a canary training job of {workers:Workers} with {gpus:Gpus} each, "
               "checkpointing every {every:Steps}",
      "a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps")
def canary_job(drill: ScenarioContext, workers: int, gpus: int, every: int) -> None:
    """Start the canary: a synchronous data-parallel job (one rank per worker) that checkpoints every N steps."""
    _training(drill).start_canary(workers, gpus, every)


@step("Given", "a canary training job of {workers:Workers} with {gpus:Gpus} each, "
               "checkpointing every {every:Steps}, each checkpoint taking {seconds:Duration} to write",
      "a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps, each checkpoint taking "
      "3 seconds to write")
def canary_job_slow_checkpoints(drill: ScenarioContext, workers: int, gpus: int, every: int, seconds: float) -> None:
    """The canary job whose checkpoints are large: each write of rank 0 takes that long (the canary declares it,
    ``checkpoint-begin`` before and ``checkpoint`` once durable, and makes no step meanwhile)."""
    run = _training(drill)
    run.write_seconds = seconds
    run.start_canary(workers, gpus, every, checkpoint_seconds=seconds)


@step("Given", "the job has written a checkpoint within {limit:Duration}",
      "the job has written a checkpoint within 60 seconds")
def checkpoint_written(drill: ScenarioContext, limit: float) -> None:
    """Wait until the canary job has recorded a checkpoint (so resumption can be checked)."""
    _training(drill).wait_checkpoint(limit)


@step("When", "I pull the node of worker {rank:Whole} with {method:FaultMethod}",
      "I pull the node of worker 0 with kill", sets=(FAULTED,))
def pull_node(drill: ScenarioContext, rank: int, method: FaultMethod | None) -> None:
    """Pull the node hosting a worker (ranks count from 0, below the canary job's worker count): kill, hang or
    partition (reference platform); kubelet-stop, delete-node or command (real clusters); or "the configured
    fault method" from the target profile."""
    _pull_run(drill).pull(rank, drill.fault_method(method), method)


@step("When", "the job is writing a checkpoint and I pull the node of worker {rank:Whole} with {method:FaultMethod}",
      "the job is writing a checkpoint and I pull the node of worker 0 with kill", sets=(FAULTED,))
def pull_node_mid_checkpoint(drill: ScenarioContext, rank: int, method: FaultMethod | None) -> None:
    """As "I pull the node of worker N with ...", while rank 0 writes a checkpoint: a third of the way into the
    write time the canary was given (a third of "each checkpoint taking N seconds to write", counted from its
    ``checkpoint-begin`` line; at once when no write time was given), so worker 0's node pulled tears the
    checkpoint it was writing."""
    _pull_run(drill).pull_during_checkpoint(rank, drill.fault_method(method), method)


@step("Then", "training resumes from the last complete checkpoint, never from a torn one",
      "training resumes from the last complete checkpoint, never from a torn one")
def not_torn(drill: ScenarioContext) -> None:
    """After the resume: the job resumed from the last checkpoint it completed before the pull, and the checkpoint
    the pull cut short was never shown under its final name (the canary's digest check would refuse it; a
    framework that trusts the name would load it)."""
    _training(drill).judge_not_torn()


@step("Then", "the platform detects the failure within {limit:Duration}",
      "the platform detects the failure within 5 seconds")
def detected(drill: ScenarioContext, limit: float) -> None:
    """detect = t_detect - t_fault: the node's Ready condition leaves True or an unreachable/not-ready taint appears;
    for a failed GPU, the GPU leaves the node's allocatable."""
    _phase(drill, "detect", limit)


@step("Then", "the job's pods are off the failed node within {limit:Duration} of detection",
      "the job's pods are off the failed node within 5 seconds of detection")
def evicted(drill: ScenarioContext, limit: float) -> None:
    """evict = t_evict - t_detect: no pod of the job remains bound to the pulled node in a non-terminal phase."""
    _phase(drill, "evict", limit, _pull_run(drill))


@step("Then", "the job runs again on healthy nodes within {limit:Duration} of eviction",
      "the job runs again on healthy nodes within 10 seconds of eviction")
def replaced(drill: ScenarioContext, limit: float) -> None:
    """replace = t_replace - t_evict: minMember pods Running again, all on healthy nodes."""
    _phase(drill, "replace", limit, _pull_run(drill))


@step("Then", "training resumes beyond the checkpoint within {limit:Duration} of replacement",
      "training resumes beyond the checkpoint within 10 seconds of replacement")
def resumed(drill: ScenarioContext, limit: float) -> None:
    """resume = t_resume - t_replace: the workload reports a step beyond the checkpoint it resumed from."""
    _phase(drill, "resume", limit)


@step("Then", "the whole recovery takes at most {limit:Duration}", "the whole recovery takes at most 20 seconds")
def total(drill: ScenarioContext, limit: float) -> None:
    """total = t_resume - t_fault."""
    _phase(drill, "total", limit)


RESUME_BOUND_S = 60.0
"""Lost steps are counted at the resume; a scenario that states no resume window waits this long for it."""


@step("Then", "at most {limit:Whole} steps of work are lost", "at most 10 steps of work are lost")
def lost_steps(drill: ScenarioContext, limit: int) -> None:
    """Steps done since the last checkpoint at the moment of the fault, which the job must redo."""
    run = _training(drill)
    run.observe_phase("total", RESUME_BOUND_S)
    drill.result.check(Threshold("lost steps", float(limit), "steps", Comparison.AT_MOST))
    run.end_if_never("lost steps", RESUME_BOUND_S)


@step("Then", "no rank of the replaced job trains after the job resumes",
      "no rank of the replaced job trains after the job resumes")
def fenced(drill: ScenarioContext) -> None:
    """Split brain: for a few seconds after the resume, no pod of the job as it was at the fault may log a
    training step (the canary's own log); a partitioned node's old ranks must be fenced, not left training."""
    _training(drill).judge_fenced()


def _training(drill: ScenarioContext) -> TrainingRun:
    """The scenario's training run: the node pull drill's, or that of the kind the scenario is about (a failed
    GPU's), for the sentences they share."""
    return drill.drill_for(TrainingRun, NodePullDrill)


def _pull_run(drill: ScenarioContext) -> TrainingRun:
    """The run a node pull acts on: the scenario's training run where its recovery is a node pull's (detect, evict,
    replace, resume: a job that must stay inside one rack, say), else the node pull drill's own."""
    run = _training(drill)
    return run if run.CHAIN == NodePullDrill.CHAIN else drill.drill(NodePullDrill)


def _phase(drill: ScenarioContext, phase: str, limit: float, run: TrainingRun | None = None) -> None:
    """Observe one phase and judge it; a phase that never came ends the scenario (the later ones need it)."""
    run = run or _training(drill)
    run.observe_phase(phase, limit)
    drill.result.check(Threshold(phase, limit, "s"))
    run.end_if_never(phase, limit)


@scenario_rule
def _pulled_rank_exists(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """A value an earlier step decides, checked before anything runs: a worker's rank that a later sentence names
    (the node pulled, the GPU failed) must be one the canary job has."""
    workers: int | None = None
    for i, st in enumerate(steps):
        values = st.values
        if st.step == canary_job.__name__:
            workers = values["workers"]
        elif "rank" in values and workers is not None and values["rank"] >= workers:
            yield i, PlaceholderError(str(values["rank"]), f"the canary job has {workers} worker(s), ranked 0 to "
                                      f"{workers - 1}", f"write a rank from 0 to {workers - 1}", placeholder="rank")
