"""Step definitions: thin sentences over the drills.  Loaded as a pytest plugin by ``firedrill run``.

Each step parses its numbers and units and calls a drill; the judging of
thresholds happens in :class:`drills.verdict.DrillResult`, and the verdict is
delivered after the scenario's last step (so every threshold is judged, not
just the first that misses).
"""

from __future__ import annotations

from drills.bdd.context import ScenarioContext
from drills.bdd.vocabulary import step
from drills.target import FaultMethod
from drills.verdict import Comparison, Threshold

# Waiting longer than a threshold tells "missed by a little" from "never": each Then step
# observes for this many times its threshold, plus a fixed margin, before calling it never.
OBSERVE_FACTOR, OBSERVE_MARGIN = 2.0, 10.0


def _window(limit: float) -> float:
    return limit * OBSERVE_FACTOR + OBSERVE_MARGIN


# ------------------------------------------------------------------ Given
@step("Given", "the cluster has at least {nodes:d} schedulable GPU nodes with {gpus:d} free GPUs each",
      "the cluster has at least 4 schedulable GPU nodes with 8 free GPUs each")
def enough_capacity(drill: ScenarioContext, nodes: int, gpus: int) -> None:
    """Steady state before: the drill needs this much free capacity, or it is INCONCLUSIVE (it proves nothing)."""
    drill.gang_drill().steady_state_before(nodes, gpus)


@step("Given", "a canary training job of {workers:d} workers with {gpus:d} GPUs each, "
               "checkpointing every {every:d} steps",
      "a canary training job of 2 workers with 4 GPUs each, checkpointing every 5 steps")
def canary_job(drill: ScenarioContext, workers: int, gpus: int, every: int) -> None:
    """Start the canary: a synchronous data-parallel job (one rank per worker) that checkpoints every N steps."""
    drill.node_pull_drill().start_canary(workers, gpus, every)


@step("Given", "the job has written a checkpoint within {limit:Duration}",
      "the job has written a checkpoint within 60 seconds")
def checkpoint_written(drill: ScenarioContext, limit: float) -> None:
    """Wait until the canary job has recorded a checkpoint (so resumption can be checked)."""
    drill.node_pull_drill().wait_checkpoint(limit)


# ------------------------------------------------------------------- When
@step("When", "I submit a gang of {workers:d} workers with {gpus:d} GPUs each",
      "I submit a gang of 4 workers with 8 GPUs each")
def submit_one_gang(drill: ScenarioContext, workers: int, gpus: int) -> None:
    """Submit one gang (all workers must be placed together)."""
    drill.gang_drill().submit(1, workers, gpus)


@step("When", "I submit {count:d} gangs of {workers:d} workers with {gpus:d} GPUs each at the same time, "
              "each running for {duration:Duration}",
      "I submit 2 gangs of 3 workers with 8 GPUs each at the same time, each running for 5 seconds")
def submit_gangs(drill: ScenarioContext, count: int, workers: int, gpus: int, duration: float) -> None:
    """Submit several gangs together, their pods interleaved; each worker finishes after the given time."""
    drill.gang_drill().submit(count, workers, gpus, run_seconds=duration)


@step("When", "I pull the node of worker {rank:d} with {method}", "I pull the node of worker 0 with kill")
def pull_node(drill: ScenarioContext, rank: int, method: str) -> None:
    """Pull the node hosting a worker: kill, hang or partition (reference platform); kubelet-stop,
    delete-node or command (real clusters); or "the configured fault method" from the target profile."""
    drill.node_pull_drill().pull(rank, _method(drill, method))


def _method(drill: ScenarioContext, text: str) -> FaultMethod:
    if text.strip() == "the configured fault method":
        return drill.target.profile.fault.method
    try:
        return FaultMethod(text.strip())
    except ValueError:
        allowed = ", ".join(m.value for m in FaultMethod)
        raise ValueError(f"unknown fault method {text!r}; use one of {allowed} or "
                         "'the configured fault method'") from None


# ------------------------------------------------------------------- Then
@step("Then", "all workers are running within {limit:Duration}", "all workers are running within 30 seconds")
def all_running(drill: ScenarioContext, limit: float) -> None:
    """Every submitted gang has all its workers Running, measured from submission."""
    drill.gang_drill().wait_all_running(_window(limit))
    drill.result.check(Threshold("time to run whole", limit, "s"))


@step("Then", "exactly one gang runs whole within {limit:Duration} while the others hold no GPU",
      "exactly one gang runs whole within 30 seconds while the others hold no GPU")
def one_whole(drill: ScenarioContext, limit: float) -> None:
    """Contention: one gang gets all its GPUs; the others get none at all while it runs (no partial holds)."""
    drill.gang_drill().wait_one_whole_others_empty(_window(limit))
    drill.result.check(Threshold("time until one gang runs whole", limit, "s"))


@step("Then", "every gang has run whole within {limit:Duration}", "every gang has run whole within 60 seconds")
def every_whole(drill: ScenarioContext, limit: float) -> None:
    """Each gang eventually ran with all its workers (the waiting one after the first finished)."""
    drill.gang_drill().wait_all_ran_whole(_window(limit))
    drill.result.check(Threshold("time until every gang ran whole", limit, "s"))


@step("Then", "partial-hold GPU-seconds stay at or below {limit:Number}",
      "partial-hold GPU-seconds stay at or below 0")
def partial_hold(drill: ScenarioContext, limit: float) -> None:
    """GPUs held by gangs with fewer than minMember workers placed, integrated over time (episodes shorter
    than 1 s, the time to bind a gang pod by pod, count zero)."""
    drill.gang_drill().partial_hold()
    drill.result.check(Threshold("partial-hold GPU-seconds", limit, "GPU-s"))


@step("Then", "the platform detects the failure within {limit:Duration}",
      "the platform detects the failure within 5 seconds")
def detected(drill: ScenarioContext, limit: float) -> None:
    """detect = t_detect - t_fault: the node's Ready condition leaves True or an unreachable/not-ready taint appears."""
    _phase(drill, "detect", limit)


@step("Then", "the job's pods are off the failed node within {limit:Duration} of detection",
      "the job's pods are off the failed node within 5 seconds of detection")
def evicted(drill: ScenarioContext, limit: float) -> None:
    """evict = t_evict - t_detect: no pod of the job remains bound to the pulled node in a non-terminal phase."""
    _phase(drill, "evict", limit)


@step("Then", "the job runs again on healthy nodes within {limit:Duration} of eviction",
      "the job runs again on healthy nodes within 10 seconds of eviction")
def replaced(drill: ScenarioContext, limit: float) -> None:
    """replace = t_replace - t_evict: minMember pods Running again, all on healthy nodes."""
    _phase(drill, "replace", limit)


@step("Then", "training resumes beyond the checkpoint within {limit:Duration} of replacement",
      "training resumes beyond the checkpoint within 10 seconds of replacement")
def resumed(drill: ScenarioContext, limit: float) -> None:
    """resume = t_resume - t_replace: the workload reports a step beyond the checkpoint it resumed from."""
    _phase(drill, "resume", limit)


@step("Then", "the whole recovery takes at most {limit:Duration}", "the whole recovery takes at most 20 seconds")
def total(drill: ScenarioContext, limit: float) -> None:
    """total = t_resume - t_fault."""
    _phase(drill, "total", limit)


@step("Then", "at most {limit:d} steps of work are lost", "at most 10 steps of work are lost")
def lost_steps(drill: ScenarioContext, limit: int) -> None:
    """Steps done since the last checkpoint at the moment of the fault, which the job must redo."""
    drill.node_pull_drill().observe_until("resume", _window(60.0))
    drill.result.check(Threshold("lost steps", float(limit), "steps", Comparison.AT_MOST))


def _phase(drill: ScenarioContext, phase: str, limit: float) -> None:
    drill.node_pull_drill().observe_until(phase, _window(limit))
    drill.result.check(Threshold(phase, limit, "s"))

