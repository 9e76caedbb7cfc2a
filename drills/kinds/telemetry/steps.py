"""The accelerator metrics drill's sentences (docs/STEPS.md, docs/METRICS.md)."""

from __future__ import annotations

from drills.kinds.telemetry.drill import CHANGES, INVENTORY, OTHERS, RISE, XID_SHOWN, TelemetryDrill
from drills.records.verdict import Comparison, Threshold
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import step

NO_KERNELS = ("the training canary runs no GPU kernels on a real cluster (its compute is a sleep, docs/WORKLOAD.md), "
              "so a real GPU's utilization cannot be expected to move with it; these promises are judged on the "
              "reference platform, whose simulated GPUs count the canary's compute (docs/METRICS.md)")


def _telemetry(drill: ScenarioContext) -> TelemetryDrill:
    return drill.drill(TelemetryDrill)


@step("Given", "the GPU metrics of every node are read", "the GPU metrics of every node are read")
def metrics_read(drill: ScenarioContext) -> None:
    """Read the GPU metrics once from the target's source: on the reference platform each node agent's own
    `/metrics` (DCGM's names, as dcgm-exporter serves them), on a real cluster the profile's Prometheus
    (`prometheus.url`) scraping dcgm-exporter. No source, or one that cannot be read at all: INCONCLUSIVE, naming
    what to configure."""
    _telemetry(drill).read_all()


@step("Then", "every GPU of every node reports its utilization and memory within {limit:Duration}",
      "every GPU of every node reports its utilization and memory within 10 seconds")
def every_gpu_reported(drill: ScenarioContext, limit: float) -> None:
    """Every Ready node with GPUs (its capacity of the profile's GPU resource) reports, for each of its GPUs,
    utilization (`DCGM_FI_DEV_GPU_UTIL`, or `DCGM_FI_PROF_GR_ENGINE_ACTIVE` on MIG) and memory used
    (`DCGM_FI_DEV_FB_USED`); each node that does not within the time is named, with the GPUs it lacks. A node
    whose exporter answers nothing, or answers 200 with no sample, reports none of its GPUs."""
    _telemetry(drill).judge_inventory(limit)
    drill.result.check(Threshold(INVENTORY, 0.0, "GPUs"))


@step("When", "a canary computes on {gpus:Gpus} of an idle node", "a canary computes on 1 GPU of an idle node",
      reference_only=NO_KERNELS)
def canary_computes(drill: ScenarioContext, gpus: int) -> None:
    """A canary pod holding that many whole GPUs on the first node whose GPUs are all free computes one second
    in every two (its input wait the other), so live telemetry moves with it. Its own start line names the GPUs
    it was given: the first is the GPU the following sentences judge."""
    _telemetry(drill).start_canary(gpus)


@step("Given", "a canary holds {gpus:Gpus} of an idle node", "a canary holds 1 GPU of an idle node")
def canary_holds(drill: ScenarioContext, gpus: int) -> None:
    """The same canary pod, for a scenario about its GPU rather than its load (an Xid injected on it): it runs on
    a real cluster too, where its start line gives the GPU's UUID to aim the injection with."""
    _telemetry(drill).start_canary(gpus)


@step("Then", "that GPU's utilization rises above {percent:Number} % within {limit:Duration}",
      "that GPU's utilization rises above 50 % within 10 seconds")
def utilization_rises(drill: ScenarioContext, percent: float, limit: float) -> None:
    """From the moment the harness received the canary's start line, the canary's GPU reads above that
    utilization within the time. Never: FAIL naming the node and the GPU, and saying whether its series stayed
    frozen, was empty or only stayed low; a canary that logged no step is INCONCLUSIVE."""
    _telemetry(drill).judge_rise(percent, limit)
    drill.result.check(Threshold(RISE, limit, "s"))


@step("Then", "no other GPU of that node rises above {percent:Number} % meanwhile",
      "no other GPU of that node rises above 10 % meanwhile")
def others_stay(drill: ScenarioContext, percent: float) -> None:
    """Since the canary started, no other GPU of its node read above that utilization: the load is on the GPU
    the canary was given, not on a neighbour. Each GPU that did is named, with its peak."""
    _telemetry(drill).judge_others(percent)
    drill.result.check(Threshold(OTHERS, 0.0, "GPUs"))


@step("When", "the drill injects Xid {xid:Count} on the canary's GPU", "the drill injects Xid 43 on the canary's GPU")
def xid_injected(drill: ScenarioContext, xid: int) -> None:
    """The canary's GPU takes the Xid: through its node's agent on the reference platform (the canary's next call
    fails, which it logs), through the profile's `fault.xid` command aimed by `{uuid}` on a real cluster. A GPU
    that already reports that Xid as its last is INCONCLUSIVE: the new one could not be told apart."""
    _telemetry(drill).inject(xid)


@step("Then", "the metrics show that Xid on that GPU within {limit:Duration}",
      "the metrics show that Xid on that GPU within 10 seconds")
def xid_shown(drill: ScenarioContext, limit: float) -> None:
    """`DCGM_FI_DEV_XID_ERRORS` of the canary's GPU reads the injected Xid within the time of the injection. Never,
    on an injection confirmed elsewhere (the canary logged its GPU failed; on a real cluster the node's
    allocatable GPUs fell): FAIL naming the node and the GPU. Never, unconfirmed: INCONCLUSIVE."""
    _telemetry(drill).judge_xid(limit)
    drill.result.check(Threshold(XID_SHOWN, limit, "s"))


@step("Then", "that GPU's utilization changes at least {count:Count} times within {limit:Duration}",
      "that GPU's utilization changes at least 3 times within 10 seconds")
def utilization_moves(drill: ScenarioContext, count: int, limit: float) -> None:
    """While the canary computes one second in two, the utilization its GPU reads changes value at least that
    many times from one reading to the next (a reading every quarter second): telemetry that answers 200 but
    holds the same samples, or answers empty, is frozen, a FAIL naming the node and the GPU."""
    _telemetry(drill).judge_changes(count, limit)
    drill.result.check(Threshold(CHANGES, float(count), "changes", Comparison.AT_LEAST))
