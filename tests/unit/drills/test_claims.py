"""The pools of a ``--parallel`` wave share its scenarios as they go (drills/bdd/claims.py): each worker runs its own
share, then takes the last unstarted scenario of the busiest other pool; a scenario is claimed by exactly one."""

from __future__ import annotations

import multiprocessing
import subprocess
from pathlib import Path

from drills.bdd.claims import Claims, Share
from drills.bdd.parallel import Part, Plan, Pool, Slot, Unit, Wave, Worker, merge
from drills.bdd.plugin import ScenarioOutcome


def key(n: int) -> tuple[str, int, tuple[tuple[str, str], ...]]:
    return ("f.feature", n, ())


SHARES = (Share("pool-1", ((key(1), 10.0), (key(2), 5.0))),
          Share("pool-2", ((key(3), 20.0), (key(4), 4.0), (key(5), 3.0))),
          Share("pool-3", ((key(6), 8.0), (key(7), 9.0))))


def test_a_pool_runs_its_own_share_in_order_first(tmp_path: Path) -> None:
    claims = Claims(tmp_path, "pool-1", SHARES)
    assert claims.next_key(lambda k: False) == key(1)
    assert claims.next_key(lambda k: k == key(1)) == key(2)


def test_then_it_takes_the_last_unstarted_scenario_of_the_pool_with_the_most_seconds_left(tmp_path: Path) -> None:
    claims = Claims(tmp_path, "pool-1", SHARES)
    mine = {key(1), key(2)}
    # pool-2 has 27 s unclaimed, pool-3 17 s: pool-2's last one
    assert claims.next_key(lambda k: k in mine) == key(5)
    # pool-2 has begun its 20-s one: 7 s left against pool-3's 17 s: pool-3's last one
    assert claims.next_key(lambda k: k in mine | {key(3)}) == key(7)
    # everything claimed: nothing left to run
    assert claims.next_key(lambda k: True) is None


def test_only_the_scenarios_the_worker_collected_count(tmp_path: Path) -> None:
    claims = Claims(tmp_path, "pool-1", SHARES)
    assert claims.next_key(lambda k: False, candidates=[key(2), key(6)]) == key(2)
    assert claims.next_key(lambda k: k == key(2), candidates=[key(2), key(6)]) == key(6)


def test_a_claim_is_granted_once_and_names_its_pool(tmp_path: Path) -> None:
    one, two = Claims(tmp_path, "pool-1", SHARES), Claims(tmp_path, "pool-2", SHARES)
    assert one.claim(key(3)) and not two.claim(key(3))
    assert one.is_claimed(key(3)) and two.is_claimed(key(3)) and not two.is_claimed(key(4))
    (made,) = tmp_path.iterdir()
    assert made.read_text() == "pool-1"
    assert one.keys() == frozenset(key(n) for n in range(1, 8))


def _drain(folder: str, pool: str, out: str) -> None:
    claims = Claims(Path(folder), pool, SHARES)
    got = []
    while (k := claims.next_key(claims.is_claimed)) is not None:
        if claims.claim(k):
            got.append(k[1])
    Path(out).write_text(",".join(map(str, got)))


def test_processes_racing_for_every_scenario_each_get_a_different_one(tmp_path: Path) -> None:
    folder = tmp_path / "claims"
    folder.mkdir()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_drain, args=(str(folder), f"pool-{i}", str(tmp_path / f"got-{i}")))
             for i in (1, 2, 3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    got = [int(n) for i in (1, 2, 3) for n in (tmp_path / f"got-{i}").read_text().split(",") if n]
    assert sorted(got) == list(range(1, 8))  # every scenario once, none twice


def _worker(pool: Pool, units: tuple[Unit, ...], wave: int = 2) -> Worker:
    w = Worker(Slot(pool, units), wave, False, Path("spec"), Path("part"))
    w.proc = subprocess.Popen(["true"])
    w.proc.wait()
    return w


def _part(pool: Pool, *keys: tuple[str, int, tuple[tuple[str, str], ...]]) -> Part:
    outs = [ScenarioOutcome(f"f.feature::s{k[1]}", feature_file="f.feature", scenario=f"s{k[1]}", key=k,
                            wall=(1.0, 2.0)) for k in keys]
    return Part(pool.name, pool.nodes, outs, [], "", {}, "", None, [], "")


def test_the_record_says_which_pool_ran_a_scenario_the_plan_gave_another() -> None:
    p1, p2 = Pool("pool-1", ("a",)), Pool("pool-2", ("b",))
    u = {n: Unit(key(n), f"s{n}", "f.feature") for n in (1, 2, 3)}
    plan = Plan((Wave((Slot(p1, (u[1],)), Slot(p2, (u[2], u[3]))), alone=False),), (p1, p2))
    w1, w2 = _worker(p1, (u[1],)), _worker(p2, (u[2], u[3]))
    outcomes, _ = merge([(w1, _part(p1, key(1), key(3))), (w2, _part(p2, key(2)))], plan,
                        {key(n): n for n in (1, 2, 3)})
    placed = {o.key[1]: o.placement for o in outcomes if o.key is not None}
    assert placed[3]["pool"] == "pool-1" and placed[3]["taken_from"] == "pool-2"
    assert placed[1]["pool"] == "pool-1" and "taken_from" not in placed[1]
    assert placed[2]["pool"] == "pool-2" and "taken_from" not in placed[2]


def test_a_worker_that_left_nothing_errs_only_the_scenarios_no_other_pool_ran() -> None:
    p1, p2 = Pool("pool-1", ("a",)), Pool("pool-2", ("b",))
    u = {n: Unit(key(n), f"s{n}", "f.feature") for n in (1, 2, 3)}
    plan = Plan((Wave((Slot(p1, (u[1],)), Slot(p2, (u[2], u[3]))), alone=False),), (p1, p2))
    w1, w2 = _worker(p1, (u[1],)), _worker(p2, (u[2], u[3]))
    outcomes, _ = merge([(w1, _part(p1, key(1), key(3))), (w2, None)], plan, {key(n): n for n in (1, 2, 3)})
    assert [(o.key[1], o.verdict, bool(o.error)) for o in outcomes if o.key is not None] == \
        [(1, None, False), (2, None, True), (3, None, False)]
    (lost,) = [o for o in outcomes if o.error]
    assert "the worker of pool-2 ended" in lost.error and lost.placement["pool"] == "pool-2"
