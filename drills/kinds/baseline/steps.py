"""The baseline comparison's sentences (docs/STEPS.md, docs/CONTRACTS.md)."""

from __future__ import annotations


from collections.abc import Iterator, Sequence

from drills.errors import PlaceholderError
from drills.kinds.baseline.drill import BaselineDrill
from drills.scenario.context import ScenarioContext
from drills.scenario.vocabulary import Checked, scenario_rule, step
from drills.target.leakreport.model import Hole

def _baseline_path_check(path: str) -> None:
    if not path.strip().endswith(".json"):
        raise PlaceholderError(path, "not a baseline statement file", "name the .json file `firedrill baseline` "
                               "wrote (a DSSE envelope, e.g. baselines/before.dsse.json)", placeholder="path")


@step("Given", 'the signed baseline "{path}"', 'the signed baseline "baselines/before.dsse.json"',
      check=_baseline_path_check)
def signed_baseline(drill: ScenarioContext, path: str) -> None:
    """A baseline statement written by `firedrill baseline` (a path relative to the features directory, or
    absolute). It is verified before anything is read (with the public key it carries: integrity); one that
    cannot be read, does not verify or is not a baseline makes the scenario INCONCLUSIVE, naming why."""
    _baseline_path_check(path)
    drill.drill(BaselineDrill).load(path)


@step("When", "the cluster is observed with the baseline's method", "the cluster is observed with the baseline's method")
def observed_with_baseline_method(drill: ScenarioContext) -> None:
    """Measure the target exactly as the baseline was measured: the same source (the target profile must give the
    same kind), the baseline's workload mix run again (or the cluster's own workload), the same window and
    slices; then compare. A different method makes the scenario INCONCLUSIVE, naming the field; the measurement
    goes into the evidence, so `firedrill compare BASELINE reports/<run-id>` can repeat the comparison."""
    drill.drill(BaselineDrill).observe()


def _layer_check(layer: str, points: float) -> None:
    if layer.strip().lower() not in ("allocated", "active", "effective"):
        raise PlaceholderError(layer, "unknown utilization layer", "write allocated, active or effective "
                               "(docs/LEAK_REPORT.md)", placeholder="layer")


@step("Then", "{layer} utilization improves by at least {points:Number} points over the signed baseline",
      "effective utilization improves by at least 10 points over the signed baseline", check=_layer_check)
def layer_improves(drill: ScenarioContext, layer: str, points: float) -> None:
    """The layer's share of healthy capacity rose by at least that many percentage points over the baseline,
    after its uncertainty is taken off: PASS only if the improvement minus its 95 % uncertainty is at least the
    number (docs/CONTRACTS.md)."""
    _layer_check(layer, points)
    drill.drill(BaselineDrill).judge(f"{layer} utilization improves by at least {points:g} points")


@step("Then", "the {hole:Hole} hole shrinks by at least {hours:Number} GPU-hours over the signed baseline",
      "the data pipeline hole shrinks by at least 0.5 GPU-hours over the signed baseline")
def hole_shrinks(drill: ScenarioContext, hole: Hole, hours: float) -> None:
    """The hole's GPU-hours over the window fell by at least that many, after its uncertainty is taken off: PASS
    only if the shrinkage minus its 95 % uncertainty is at least the number; a hole the source cannot measure is
    INCONCLUSIVE."""
    drill.drill(BaselineDrill).judge(f"the {hole.words} hole shrinks by at least {hours:g} GPU-hours")


BASELINE_THEN = {layer_improves.__name__, hole_shrinks.__name__}


@scenario_rule
def _baseline_steps_in_order(steps: Sequence[Checked]) -> Iterator[tuple[int, PlaceholderError]]:
    """A re-measurement takes its method from a baseline named before it; a clause judges a re-measurement."""
    loaded = measured = False
    for i, st in enumerate(steps):
        if st.step == signed_baseline.__name__:
            loaded = True
        elif st.step == observed_with_baseline_method.__name__:
            if not loaded:
                yield i, PlaceholderError(st.text or st.step, "no baseline to take the method from",
                                          "put 'Given the signed baseline \"FILE\"' before it")
            measured = True
        elif st.step in BASELINE_THEN and not measured:
            yield i, PlaceholderError(st.text or st.step, "nothing was measured to compare with the baseline",
                                      "put 'When the cluster is observed with the baseline's method' before it")
