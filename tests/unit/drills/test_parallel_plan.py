"""The ``--parallel`` planner: scenarios + pools -> waves (pure), and the estimates it is fed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drills.bdd.features import load_features
from drills.bdd.parallel import Unit, head_start, make_plan, node_pools, past_seconds, plan_lines, units_of

REPO = Path(__file__).resolve().parents[3]


def unit(name: str, seconds: float = 10.0, cp: str = "", whole: str = "") -> Unit:
    return Unit(("x.feature", len(name), ((("n", name),))), name, "x.feature", seconds, cp, whole)


def names(slot) -> list[str]:
    return [u.name for u in slot.units]


def test_pools_have_disjoint_node_names_and_the_serial_shape() -> None:
    pools = node_pools(3, nodes=4, spares=1)
    assert [p.name for p in pools] == ["pool-1", "pool-2", "pool-3"]
    assert all(len(p.nodes) == 5 for p in pools)
    every = [n for p in pools for n in p.nodes]
    assert len(every) == len(set(every))
    assert pools[1].nodes[0] == "p2-gpu-node-0" and pools[1].prefix == "p2-gpu-node"


@pytest.mark.parametrize("given, pools, expect", [
    # longest first onto the pool with least work; each pool keeps the features' order (its short ones last)
    ([("a", 30), ("b", 10), ("c", 10), ("d", 10)], 2, [["a"], ["b", "c", "d"]]),
    ([("a", 5), ("b", 5), ("c", 5)], 3, [["a"], ["b"], ["c"]]),
    ([("a", 5), ("b", 5), ("c", 5), ("d", 5)], 2, [["a", "c"], ["b", "d"]]),
    ([("a", 5)], 4, [["a"]]),  # an idle pool gets no worker
])
def test_the_parallel_wave_balances_the_expected_seconds(given, pools, expect) -> None:
    plan = make_plan([unit(n, s) for n, s in given], node_pools(pools))
    assert len(plan.waves) == 1 and not plan.waves[0].alone
    assert [names(s) for s in plan.waves[0].slots] == expect


def test_each_pool_runs_its_short_scenarios_last_longest_first() -> None:
    units = [unit("s1", 1), unit("long1", 30), unit("s3", 3), unit("long2", 20), unit("s2", 2), unit("long3", 25)]
    (wave,) = make_plan(units, node_pools(1)).waves
    assert names(wave.slots[0]) == ["long1", "long2", "long3", "s3", "s2", "s1"]


def test_a_control_plane_scenario_runs_alone_before_the_parallel_wave() -> None:
    units = [unit("gang", 5), unit("slo", 15, cp="measures the API server"), unit("pull", 5), unit("leak", 16)]
    plan = make_plan(units, node_pools(2))
    alone, side_by_side = plan.waves
    assert alone.alone and [names(s) for s in alone.slots] == [["slo"]]
    assert alone.slots[0].pool.name == "pool-1"
    assert not side_by_side.alone
    assert sorted(n for s in side_by_side.slots for n in names(s)) == ["gang", "leak", "pull"]
    text = "\n".join(plan_lines(plan))
    assert "ALONE: measures the API server" in text and "p2-gpu-node-0" in text


def test_the_pool_that_ran_the_alone_scenarios_carries_on_with_a_head_start() -> None:
    units = [unit("slo", 15, cp="measures the API server"), unit("a", 10), unit("b", 10), unit("c", 10)]
    plan = make_plan(units, node_pools(2), head_start=10)
    side_by_side = plan.waves[1]
    assert [(s.pool.name, names(s)) for s in side_by_side.slots] == [("pool-1", ["a", "b"]), ("pool-2", ["c"])]
    assert "pool-1 carries on into wave 2" in "\n".join(plan_lines(plan))
    # no alone scenario: no head start, whatever is asked
    assert [names(s) for s in make_plan(units[1:], node_pools(2), head_start=10).waves[0].slots] == [["a", "c"], ["b"]]
    # the others' start-up, side by side on the cores: none for one pool, more with more pools or fewer cores
    assert head_start(1, 2) == 0 and head_start(4, 2) > head_start(3, 2) > head_start(3, 4) > 0
    assert 0 < head_start(4, 2, held=True) < head_start(4, 2), "held pools start up mostly before wave 1 ends"


def test_a_whole_cluster_scenario_runs_alone_only_where_pools_share_a_control_plane() -> None:
    units = [unit("blip", 15, whole="cuts most nodes off"), unit("gang", 5)]
    own = make_plan(units, node_pools(2))
    assert len(own.waves) == 1  # an embedded pool is a whole cluster of its own
    shared = make_plan(units, node_pools(2), shared_control_plane=True)
    assert [names(s) for s in shared.waves[0].slots] == [["blip"]] and shared.waves[0].alone
    assert [names(s) for s in shared.waves[1].slots] == [["gang"]]


def test_only_alone_scenarios_make_one_wave_and_no_pool_is_refused() -> None:
    plan = make_plan([unit("slo", cp="x"), unit("slo2", cp="y")], node_pools(3))
    assert len(plan.waves) == 1 and plan.waves[0].alone and names(plan.waves[0].slots[0]) == ["slo", "slo2"]
    assert make_plan([], node_pools(2)).waves == ()
    with pytest.raises(ValueError):
        make_plan([unit("a")], ())


def test_every_shipped_scenario_is_planned_once_and_the_control_plane_drill_alone() -> None:
    features = load_features(REPO / "features")
    units = units_of(features, REPO / "features")
    assert len({u.key for u in units}) == len(units) == sum(len(f.scenarios) for f in features)
    plan = make_plan(units, node_pools(3))
    planned = [u.key for w in plan.waves for s in w.slots for u in s.units]
    assert sorted(planned) == sorted(u.key for u in units)
    alone = [u.feature_file for u in plan.waves[0].slots[0].units]
    assert plan.waves[0].alone and alone == ["control_plane_under_chaos.feature"]
    outlines = [u for u in units if u.feature_file == "leak_identification.feature"]
    assert len(outlines) == 4 and all(u.key[2] for u in outlines)  # each Examples row is a scenario of its own


def test_estimates_are_the_median_of_past_passing_runs(tmp_path: Path) -> None:
    for i, secs in enumerate((10.0, 30.0, 12.0)):
        d = tmp_path / f"2026120{i}T000000Z-abc"
        d.mkdir()
        (d / "record.json").write_text(json.dumps({"scenarios": [
            {"feature_file": "a.feature", "scenario": "s", "verdict": "PASS", "seconds": secs},
            {"feature_file": "a.feature", "scenario": "f", "verdict": "FAIL", "seconds": 99.0}]}))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "record.json").write_text("{not json")
    assert past_seconds(tmp_path) == {("a.feature", "s"): 12.0}
    assert past_seconds(tmp_path / "missing") == {}


def test_an_estimate_counts_the_rollback_the_record_measured(tmp_path: Path) -> None:
    """A scenario's worker spends its rollback too (a held GPU's burn-in): ``harness_cost.seconds`` spans both."""
    d = tmp_path / "20261201T000000Z-abc"
    d.mkdir()
    (d / "record.json").write_text(json.dumps({"scenarios": [
        {"feature_file": "a.feature", "scenario": "held", "verdict": "PASS", "seconds": 6.0,
         "details": {"harness_cost": {"seconds": 12.0}}},
        {"feature_file": "a.feature", "scenario": "odd", "verdict": "PASS", "seconds": 6.0,
         "details": {"harness_cost": {"seconds": 2.0}}},
        {"feature_file": "a.feature", "scenario": "old", "verdict": "PASS", "seconds": 6.0, "details": {}}]}))
    assert past_seconds(tmp_path) == {("a.feature", "held"): 12.0, ("a.feature", "odd"): 6.0,
                                      ("a.feature", "old"): 6.0}


def test_the_pools_fault_journals_enter_the_archive_one_after_the_other(tmp_path: Path) -> None:
    from drills.bdd.parallel import Part, merge_journals

    def part(pool: str, journal: str) -> Part:
        return Part(pool, (), [], [], "", {}, "", None, [], "", (), journal)

    first = '{"journal":1,"server":"https://127.0.0.1:1"}\n{"intent":"1"}\n{"closed":"1"}\n'
    second = '{"journal":1,"server":"https://127.0.0.1:2"}'  # a journal cut short keeps its lines apart
    merge_journals([part("pool-1", first), part("pool-2", second), part("pool-3", "")], tmp_path / "j.jsonl")
    assert (tmp_path / "j.jsonl").read_text().splitlines() == [*first.splitlines(), second]
    merge_journals([part("pool-1", "")], tmp_path / "none.jsonl")
    assert not (tmp_path / "none.jsonl").exists()
