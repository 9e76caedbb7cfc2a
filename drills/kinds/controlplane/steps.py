"""The control-plane drill's sentences (docs/STEPS.md, docs/CONTROL_PLANE.md)."""

from __future__ import annotations

import math

from drills.kinds.controlplane.drill import ControlPlaneDrill
from drills.records.verdict import Threshold
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import Requires, step
from drills.target.profile import FaultMethod

@step("Given", "steady control-plane load from {users:Count} users writing, listing and watching pods",
      "steady control-plane load from 4 users writing, listing and watching pods",
      sets=('cp_load',))
def control_plane_load(drill: ScenarioContext, users: int) -> None:
    """Locust's control-plane users create, update, list and watch pods that no node can take (they stay
    Pending) through the official kubernetes client, each starting its next call when one ends."""
    drill.drill(ControlPlaneDrill).start_load(users)


@step("Given", "{rate:Count} pods are started every second", "2 pods are started every second",
      requires=(Requires(("cp_load",), "no control-plane load runs",
                         "put 'Given steady control-plane load from ...' before it"),),
      sets=("startup",))
def pods_started(drill: ScenarioContext, rate: int) -> None:
    """Small schedulable pods (`sleep` in the profile's canary image) are created at that rate, each timed from
    its create call to the harness's watch seeing it Running with every container started."""
    drill.drill(ControlPlaneDrill).start_pods(rate)


@step("Given", "{rate:Count} pods of {gpus:Gpus} each are started every second, each running for {seconds:Duration}",
      "2 pods of 1 GPU each are started every second, each running for 5 seconds",
      requires=(Requires(("cp_load",), "no control-plane load runs",
                         "put 'Given steady control-plane load from ...' before it"),),
      sets=("startup",))
def gpu_pods_started(drill: ScenarioContext, rate: int, gpus: int, seconds: float) -> None:
    """Pods are created at that rate and timed as in '<rate> pods are started every second', each asking for that
    many GPUs: a GPU workload (the canary as a job of one rank) that logs which GPUs it was given and ends after
    that long, so the GPUs handed out while a node dies are checked by the invariants (docs/INVARIANTS.md) and the
    startup SLO is measured on the pods a GPU cluster runs."""
    drill.drill(ControlPlaneDrill).start_pods(rate, gpus, max(1, math.ceil(seconds)))


@step("When", "a node is pulled with {method:FaultMethod} after {after:Duration} of load",
      "a node is pulled with kill after 3 seconds of load",
      requires=(Requires(("cp_load",), "no control-plane load runs to disturb",
                         "put 'Given steady control-plane load from ...' before it"),))
def pull_any_node(drill: ScenarioContext, method: FaultMethod | None, after: float) -> None:
    """One eligible node (the first by name that takes pods) is pulled with a fault method, as in the node-pull
    drill; on a real cluster the profile's safety checks apply."""
    drill.drill(ControlPlaneDrill).pull(after, drill.fault_method(method))


@step("Then", "mutating API calls have a p99 latency within {limit:Duration}",
      "mutating API calls have a p99 latency within 1 second",
      requires=(Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),))
def mutating_p99(drill: ScenarioContext, limit: float) -> None:
    """The Kubernetes SLO, per verb: the worst of the create and update p99 latencies the users measured."""
    drill.result.check(Threshold("mutating API call p99", limit, "s"))


@step("Then", "pod startup has a p99 latency within {limit:Duration}",
      "pod startup has a p99 latency within 5 seconds",
      requires=(Requires(("startup",), "no pods are started to time",
                         "put 'Given <rate> pods are started every second' first"),
                Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),))
def startup_p99(drill: ScenarioContext, limit: float) -> None:
    """The Kubernetes SLO for schedulable stateless pods: create call to Running with every container started,
    as the harness's watch saw it. Pods bound to the pulled node are shown, not judged; a pod that never
    started counts as never."""
    drill.result.check(Threshold("pod startup p99", limit, "s"))


@step("Then", "every write the API acknowledged is found afterwards",
      "every write the API acknowledged is found afterwards",
      requires=(Requires(("stopped",), "the load is still running here, so there is nothing to judge yet",
                         "put 'When the load goes on for <duration>' before it"),))
def acknowledged_found(drill: ScenarioContext) -> None:
    """Each pod whose create the API acknowledged to a load user is listed afterwards; each missing one is
    named."""
    drill.result.check(Threshold("acknowledged writes lost", 0.0, "writes"))
