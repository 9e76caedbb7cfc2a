"""The leak identification drill's sentences (docs/STEPS.md, docs/LEAK_REPORT.md)."""

from __future__ import annotations


from drills.kinds.leak.drill import LeakDrill
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import step
from drills.target.leakreport.model import Hole

@step("Given", "a workload mix that leaks GPU time through {hole:Hole} for {seconds:Duration}",
      "a workload mix that leaks GPU time through data pipeline for 12 seconds")
def leaking_mix(drill: ScenarioContext, hole: Hole, seconds: float) -> None:
    """Open one hole of a known size, sized to the cluster's free GPUs: `data pipeline` (training ranks that
    wait on input half of each step), `communication` (half of each step stalled on collectives),
    `fragmentation` (every node keeps 2 GPUs free, one pod needs 4) or `fault tolerance` (the node of a
    training rank is pulled; the window then stays open until training resumes, plus 2 s). The window opens
    once the mix leaks steadily (for fragmentation: once the scheduler marked the pod `Unschedulable`, and, with
    a Prometheus source, one scrape interval later, when its samples can show it); the drill's own arithmetic
    of what it injected is the truth."""
    drill.drill(LeakDrill).inject(hole, seconds)


@step("When", "the platform's leak report is read for that window",
      "the platform's leak report is read for that window")
def leak_report_read(drill: ScenarioContext) -> None:
    """Read the leak report (docs/LEAK_REPORT.md) for the window, from the target's API server, the URL the
    target profile configures (`leakReport.url`), or computed from its Prometheus (`prometheus.url`: DCGM
    exporter and kube-state-metrics series; it cannot measure communication or fault tolerance, so those
    scenarios are INCONCLUSIVE there). A report that cannot be read makes the scenario INCONCLUSIVE and says
    how to configure a source; one that breaks the contract's shape FAILs."""
    drill.drill(LeakDrill).read()


@step("Then", "it names {hole:Hole} as the largest hole", "it names data pipeline as the largest hole")
def names_largest(drill: ScenarioContext, hole: Hole) -> None:
    """The report's `largest` must be the hole the drill opened; otherwise FAIL, naming the hole expected (and
    the GPU-hours injected) and the one the report named."""
    drill.drill(LeakDrill).judge_named(hole)


@step("Then", "it sizes that hole within {tolerance:Number} % of what was injected",
      "it sizes that hole within 10 % of what was injected")
def sizes_hole(drill: ScenarioContext, tolerance: float) -> None:
    """The report's size of the hole the scenario opened is within the tolerance of what was injected:
    the absolute difference over the injected GPU-hours, in percent, at most <number>."""
    leak = drill.drill(LeakDrill)
    if leak.hole is None:
        raise ValueError("no hole was opened in this scenario; start it with 'a workload mix that leaks GPU time "
                         "through <hole> for <duration>'")
    leak.judge_size(leak.hole, tolerance)
