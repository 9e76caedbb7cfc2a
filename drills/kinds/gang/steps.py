"""The gang submission drill's sentences (docs/STEPS.md)."""

from __future__ import annotations


from collections.abc import Iterator, Sequence

from drills.errors import PlaceholderError
from drills.kinds.gang.drill import GangDrill
from drills.kinds.gang.slurm import SlurmGangDrill  # noqa: F401 - its Slurm side, registered on import
from drills.kinds.gang.ray import RayGangDrill  # noqa: F401 - its Ray side, registered on import
from drills.records.verdict import Threshold
from drills.scenario.context import ScenarioContext
from drills.scenario.drill import observe_window
from drills.scenario.vocabulary import Checked, scenario_rule, step, window_outlasts

RUNNING_WITHIN = 60.0
"""Seconds a scenario's already-running gang ('When a gang of ... runs for ...') gets to run whole."""


@step("Given", "the cluster has at least {nodes:Count} schedulable GPU nodes with {gpus:Count} free GPUs each",
      "the cluster has at least 4 schedulable GPU nodes with 8 free GPUs each")
def enough_capacity(drill: ScenarioContext, nodes: int, gpus: int) -> None:
    """Steady state before: the drill needs this much free capacity, or it is INCONCLUSIVE (it proves nothing)."""
    drill.drill(GangDrill).steady_state_before(nodes, gpus)


@step("When", "I submit a gang of {workers:Workers} with {gpus:Gpus} each",
      "I submit a gang of 4 workers with 8 GPUs each")
def submit_one_gang(drill: ScenarioContext, workers: int, gpus: int) -> None:
    """Submit one gang (all workers must be placed together)."""
    drill.drill(GangDrill).submit(1, workers, gpus)


@step("When", "I submit {count:Gangs} of {workers:Workers} with {gpus:Gpus} each at the same time, "
              "each running for {duration:Duration}",
      "I submit 2 gangs of 3 workers with 8 GPUs each at the same time, each running for 5 seconds")
def submit_gangs(drill: ScenarioContext, count: int, workers: int, gpus: int, duration: float) -> None:
    """Submit several gangs together, their pods interleaved; each worker finishes after the given time."""
    drill.drill(GangDrill).submit(count, workers, gpus, run_seconds=duration)


@step("When", "a gang of {workers:Workers} with {gpus:Gpus} each runs for {duration:Duration}",
      "a gang of 2 workers with 8 GPUs each runs for 5 seconds")
def running_gang(drill: ScenarioContext, workers: int, gpus: int, duration: float) -> None:
    """A job already running: one gang whose workers finish after the given time.  The step returns once it runs
    whole, so a gang submitted next has to wait for it (INCONCLUSIVE if it never runs whole, or if the cluster has
    room for the next gang as well)."""
    drill.drill(GangDrill).submit(1, workers, gpus, run_seconds=duration)
    drill.drill(GangDrill).wait_running(RUNNING_WITHIN)


@step("Then", "all workers are running within {limit:Duration}", "all workers are running within 30 seconds")
def all_running(drill: ScenarioContext, limit: float) -> None:
    """Every submitted gang has all its workers Running, measured from submission."""
    drill.drill(GangDrill).wait_all_running(observe_window(limit))
    drill.result.check(Threshold("time to run whole", limit, "s"))


@step("Then", "exactly one gang runs whole within {limit:Duration} while the others hold no GPU",
      "exactly one gang runs whole within 30 seconds while the others hold no GPU")
def one_whole(drill: ScenarioContext, limit: float) -> None:
    """Contention: one gang gets all its GPUs; the others get none at all while it runs (no partial holds)."""
    drill.drill(GangDrill).wait_one_whole_others_empty(observe_window(limit))
    drill.result.check(Threshold("time until one gang runs whole", limit, "s"))


@step("Then", "every gang has run whole within {limit:Duration}", "every gang has run whole within 60 seconds")
def every_whole(drill: ScenarioContext, limit: float) -> None:
    """Each gang eventually ran with all its workers (the waiting one after the first finished)."""
    drill.drill(GangDrill).wait_all_ran_whole(observe_window(limit))
    drill.result.check(Threshold("time until every gang ran whole", limit, "s"))


@step("Then", "the waiting gang runs whole within {limit:Duration}, holding no GPU until then",
      "the waiting gang runs whole within 30 seconds, holding no GPU until then")
def waiting_gang_whole(drill: ScenarioContext, limit: float) -> None:
    """The gang submitted last, which had to wait for the running one, runs whole (measured from its submission,
    so a window no longer than the running gang's time is refused before anything runs); GPUs it held with fewer
    than minMember workers placed while it waited (a partial commit) are a FAIL that names
    them."""
    drill.drill(GangDrill).wait_waiting_gang_whole(observe_window(limit))
    drill.result.check(Threshold("time until the waiting gang runs whole", limit, "s"))


@step("Then", "partial-hold GPU-seconds stay at or below {limit:Number}",
      "partial-hold GPU-seconds stay at or below 0")
def partial_hold(drill: ScenarioContext, limit: float) -> None:
    """GPUs held by gangs with fewer than minMember workers placed, integrated over time (episodes shorter
    than 1 s, the time to bind a gang pod by pod, count zero)."""
    drill.drill(GangDrill).partial_hold()
    drill.result.check(Threshold("partial-hold GPU-seconds", limit, "GPU-s"))


@scenario_rule
def _a_waiting_gang_waits_for_a_running_one(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """'the waiting gang' is the gang submitted after one that runs: both must come before it."""
    running = waiting = False
    for i, st in enumerate(steps):
        if st.step == running_gang.__name__:
            running = True
        elif st.step in (submit_one_gang.__name__, submit_gangs.__name__) and running:
            waiting = True
        elif st.step == waiting_gang_whole.__name__ and not waiting:
            yield i, PlaceholderError(st.text or st.step, "no gang waits in this scenario",
                                      "put 'When a gang of ... runs for ...' and then 'And I submit a gang of ...' "
                                      "before it")


# Issue 51's audit of "until then": the waiting gang's window runs from its submission, and it can run only once the
# running gang's time is up.
window_outlasts(running_gang.__name__, "duration", waiting_gang_whole.__name__,
                "the waiting gang can run only after the running gang's {earliest} s are up, and its window runs "
                "from its submission", spare=30)
