"""The step definitions ``firedrill run`` loads as a pytest plugin: every drill kind's sentences, and the few
that no single kind owns.

Each kind's sentences live in its own package (``drills/kinds/<kind>/steps.py``); :func:`discover` imports them
all, and ``pytest_plugins`` hands their modules to pytest so that pytest-bdd finds their step definitions.
Each step parses its numbers and units and calls a drill; the judging of thresholds happens in
:class:`drills.records.verdict.DrillResult`, and the verdict is delivered after the scenario's last step (so
every threshold is judged, not just the first that misses).  Every placeholder is typed (``{nodes:Count}``,
``{limit:Duration}``, ...): its parser in :mod:`drills.scenario.vocabulary` and a step's ``check`` are the rules
``firedrill run`` checks every feature file against before it starts anything.
"""

from __future__ import annotations

from drills.scenario.back_in_service import FAULTED, judge_back_in_service
from drills.scenario.context import ScenarioContext
from drills.scenario.drill import Loaded, WatchesReturns, discover
from drills.scenario.vocabulary import Requires, step

pytest_plugins = discover()


@step("When", "the load goes on for {seconds:Duration}", "the load goes on for 8 seconds",
      requires=(Requires(("serving_load", "cp_load"), "no load runs in this scenario",
                         "put 'Given steady load from ...' or 'Given steady control-plane load from ...' first"),),
      sets=("stopped",))
def load_goes_on(drill: ScenarioContext, seconds: float) -> None:
    """The load keeps running that long after the drain or pull, then stops: each user finishes the request it
    is in (up to 10 s), and every request's fate is read from the users' own samples."""
    drill.running_as(Loaded, "no load is running in this scenario; start one with 'steady load from <users> users "
                             "who retry ...' or 'steady control-plane load from <users> users ...'").go_on(seconds)


@step("Then", "every node the fault touched is back in service within {limit:Duration}",
      "every node the fault touched is back in service within 10 seconds",
      requires=(Requires((FAULTED,), "no fault touched a node before it",
                         "put a fault before it ('When I pull the node of worker 0 with ...', 'When the control plane "
                         "is unreachable for ...', ...)"),))
def back_in_service(drill: ScenarioContext, limit: float) -> None:
    """back in service = t_back - t_undo: the harness undoes the scenario's faults that still stand (a pulled
    node powered on by the profile's fault.restore_template, a partition healed), then every node they touched
    that was in service when the scenario began must be Ready, not cordoned, free of repelling taints it did not
    have and with every GPU it had allocatable. A node not back in time FAILs, named with what keeps it out; a
    fault with no undo is INCONCLUSIVE (docs/SAFETY.md, "Back in service"). The spare pool's taint is a role,
    not a fault. A GPU an Xid took out must come back only after a burn-in it passed (docs/HEALING.md)."""
    judge_back_in_service(drill.target, drill.result, limit)
    for running in drill.drills:
        if isinstance(running, WatchesReturns):
            running.judge_returns()
