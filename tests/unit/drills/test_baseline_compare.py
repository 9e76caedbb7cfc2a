"""Comparing two observations: the method must match field by field, each change carries its uncertainty, and a
contract clause PASSes only when the improvement minus that uncertainty clears its figure."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from drills.kinds.baseline.compare import ClauseVerdict, compare, parse_clause
from drills.kinds.baseline.errors import BaselineUsageError, MethodMismatch
from drills.kinds.baseline.method import (Method, differences, leak_report_source, observed_workload, prometheus_source,
                                          window_method)
from drills.kinds.baseline.mix import DEFAULT_MIX
from drills.kinds.baseline.slices import HOLES, Slice, summary
from drills.kinds.baseline.statement import Observed

CAPACITY = 10.0  # GPU-hours per slice


def method(**changes: object) -> Method:
    base = Method(source=leak_report_source(), workload={"kind": "mix", "mix": DEFAULT_MIX.to_dict()},
                  window=window_method(600, 4, 5))
    return Method(**{**base.__dict__, **changes})


def slices(effective: Sequence[float], data_pipeline: Sequence[float], unmeasured: bool = False) -> tuple[Slice, ...]:
    """Slices of CAPACITY GPU-hours whose effective layer is ``effective[i]`` of capacity."""
    out = []
    for i, (e, d) in enumerate(zip(effective, data_pipeline)):
        holes: dict[str, float | None] = {h: 0.0 for h in HOLES}
        holes["dataPipeline"] = d
        if unmeasured:
            holes["communication"] = holes["faultTolerance"] = None
        out.append(Slice(f"s{i}", f"e{i}", CAPACITY, {"allocated": 6.0, "active": 4.0, "effective": e * CAPACITY},
                         holes, "0" * 64))
    return tuple(out)


def observed(name: str, sl: tuple[Slice, ...], m: Method | None = None) -> Observed:
    return Observed(name=name, method=m or method(), slices=sl, window=("a", "b"))


BEFORE = observed("the baseline", slices([0.10, 0.11, 0.09, 0.10], [1.0, 1.2, 0.8, 1.0]))


def test_different_windows_are_refused_naming_the_field() -> None:
    other = observed("RUN", BEFORE.slices, method(window=window_method(300, 4, 5)))
    with pytest.raises(MethodMismatch) as caught:
        compare(BEFORE, other)
    text = str(caught.value)
    assert "window.seconds: 600 in the baseline, 300 in RUN" in text
    assert "window.sliceSeconds" in text and "refused" in text
    assert "window.seconds" in caught.value.fields


def test_a_different_workload_mix_or_source_is_refused_naming_it() -> None:
    mix = DEFAULT_MIX.to_dict()
    mix["training"][0]["inputSeconds"] = 0.01
    with pytest.raises(MethodMismatch, match=r"workload\.mix\.training\[0\]\.inputSeconds: 0\.03 in the baseline, "
                                             r"0\.01 in RUN"):
        compare(BEFORE, observed("RUN", BEFORE.slices, method(workload={"kind": "mix", "mix": mix})))
    prom = prometheus_source({"active": "sum(x)"}, 1.0, ["communication"])
    with pytest.raises(MethodMismatch, match=r"source\.kind: 'leak-report' in the baseline, 'prometheus' in RUN"):
        compare(BEFORE, observed("RUN", BEFORE.slices, method(source=prom)))
    with pytest.raises(MethodMismatch, match=r"\(workload differs\).*workload\.kind: 'mix' in the baseline, "
                                             r"'observed' in RUN\. Measure"):
        compare(BEFORE, observed("RUN", BEFORE.slices, method(workload=observed_workload("production  queues"))))


def test_equal_methods_have_no_differences_even_after_a_round_trip() -> None:
    m = method()
    assert differences(m, Method.from_dict(m.to_dict(), "here")) == []


def test_layers_improve_upwards_in_points_and_holes_downwards_in_gpu_hours() -> None:
    after = observed("RUN", slices([0.25, 0.26, 0.24, 0.25], [0.5, 0.6, 0.4, 0.5]))
    c = compare(BEFORE, after)
    eff, dp = c.row("effective"), c.row("dataPipeline")
    assert eff.improvement == pytest.approx(15.0)  # 10 % -> 25 % of capacity
    assert dp.improvement == pytest.approx(2.0)  # 4 GPU-h -> 2 GPU-h
    assert eff.uncertainty is not None and 0 < eff.uncertainty < 3
    assert c.row("allocated").improvement == pytest.approx(0.0) and c.row("allocated").uncertainty == 0.0
    assert "effective utilization" in "\n".join(c.lines())


@pytest.mark.parametrize("text, quantity, n", [
    ("effective utilization improves by at least 10 points over the signed baseline", "effective", 10.0),
    ("Allocated utilisation improves by at least 2.5 percentage points.", "allocated", 2.5),
    ('"active utilization improves by at least 1 point"', "active", 1.0),
    ("the data pipeline hole shrinks by at least 0.5 GPU-hours over the signed baseline", "dataPipeline", 0.5),
    ("the fault tolerance hole shrinks by at least 3 GPU-hours", "faultTolerance", 3.0),
    ("The   fragmentation hole shrinks by at least 1 gpu-hour", "fragmentation", 1.0),
])
def test_clauses_parse(text: str, quantity: str, n: float) -> None:
    clause = parse_clause(text)
    assert (clause.quantity, clause.minimum) == (quantity, n)


@pytest.mark.parametrize("text, says", [
    ("effective utilization improves by 10 %", "utilization improves by at least <N> points"),
    ("the storage hole shrinks by at least 1 GPU-hours", "unknown hole 'storage'"),
    ("effective utilization is at least 40 %", "not one Firedrill can judge"),
])
def test_a_clause_that_cannot_be_judged_is_refused_with_the_templates(text: str, says: str) -> None:
    with pytest.raises(BaselineUsageError, match=says):
        parse_clause(text)


def test_a_clause_passes_only_when_the_improvement_minus_its_uncertainty_clears_the_figure() -> None:
    after = observed("RUN", slices([0.25, 0.30, 0.20, 0.25], [0.5, 0.6, 0.4, 0.5]))
    c = compare(BEFORE, after)
    row = c.row("effective")
    assert row.improvement == pytest.approx(15.0) and row.uncertainty is not None and row.uncertainty > 2
    # The point estimate clears 14, but not once its uncertainty is taken off: FAIL.
    tight = parse_clause("effective utilization improves by at least 14 points").judge(c)
    assert tight.verdict is ClauseVerdict.FAIL
    assert "improvement minus uncertainty" in tight.message and "does not clear 14 points" in tight.message
    loose_figure = row.improvement - row.uncertainty - 0.01
    loose = parse_clause(f"effective utilization improves by at least {loose_figure:.2f} points").judge(c)
    assert loose.verdict is ClauseVerdict.PASS
    assert parse_clause("the data pipeline hole shrinks by at least 1 GPU-hours").judge(c).verdict is ClauseVerdict.PASS
    grew = parse_clause("the data pipeline hole shrinks by at least 0 GPU-hours").judge(compare(after, BEFORE))
    assert grew.verdict is ClauseVerdict.FAIL and "grew by 2" in grew.message


def test_an_unmeasured_hole_or_an_unknown_uncertainty_is_inconclusive() -> None:
    m = method(window=window_method(600, 4, 5))
    before = observed("the baseline", slices([0.1] * 4, [1.0] * 4, unmeasured=True), m)
    after = observed("RUN", slices([0.2] * 4, [0.5] * 4, unmeasured=True), m)
    c = compare(before, after)
    j = parse_clause("the communication hole shrinks by at least 1 GPU-hours").judge(c)
    assert j.verdict is ClauseVerdict.INCONCLUSIVE and "not measured" in j.message
    one = Method(**{**m.__dict__, "window": {**m.window, "slices": 1}})
    c1 = compare(observed("the baseline", slices([0.1], [1.0]), one), observed("RUN", slices([0.3], [1.0]), one))
    j1 = parse_clause("effective utilization improves by at least 1 points").judge(c1)
    assert j1.verdict is ClauseVerdict.INCONCLUSIVE and "uncertainty is unknown" in j1.message


def test_the_summary_holds_shares_and_gpu_hours_with_standard_errors() -> None:
    s = summary(list(BEFORE.slices))
    assert s["layers"]["effective"]["share"] == pytest.approx(0.10)
    assert s["holes"]["dataPipeline"]["gpuHours"] == pytest.approx(4.0)
    assert s["holes"]["dataPipeline"]["standardError"] > 0
