"""``firedrill run --parallel N``: independent scenarios at the same time, each on a node pool of its own.

The plan (:func:`make_plan`, pure: scenarios + pools -> waves) is printed before anything moves:

- A **pool** is an embedded node group: a reference platform of its own (API server, controllers, the same
  4 nodes + 1 spare a serial run has), its nodes named for the pool (``p2-gpu-node-0`` ...), so no two pools
  share a node, a scheduler, a healer or a spare.  Each scenario therefore sees exactly the cluster a serial run
  gives it: what it proves, how it is timed and what its verdict rests on are unchanged.  Pinning scenarios to
  labelled nodes of one platform would not keep that: free capacity, gang placement, spare promotion and the
  invariant watches all read the whole cluster.
- **Alone**: a scenario whose drill measures the control plane (:attr:`Drill.measures_control_plane`) runs
  with nothing beside it, before the parallel wave: the other scenarios' work would be measured with it.  A
  scenario that acts on the whole cluster (:attr:`Drill.needs_whole_cluster`) runs alone only where pools share
  a control plane (``shared_control_plane``); an embedded pool is a whole cluster of its own.
- **Parallel wave**: the rest, spread over the pools longest first (each scenario's seconds from the last
  archives under ``--reports``, else :data:`DEFAULT_SECONDS`), each pool running its share in order.  The shares
  are a start: each scenario is claimed before it runs, and a pool that has run its share takes the last unstarted
  scenario of the pool with the most seconds left (:mod:`drills.bdd.claims`).

Each pool's share is run by a worker: a ``firedrill run`` subprocess (:func:`drills.bdd.run.worker_main`) against
its own pool, the same pytest plugin, steps and rollback as a serial run, writing its outcomes instead of an
archive.  Processes, not threads: pytest is not thread-safe, and a worker's crash or Ctrl-C stays its own.  The
run merges every worker's outcomes, timeline, JUnit and Allure results into ONE archive sealed, signed and
chained exactly as a serial run's is (``firedrill verify`` is unchanged); each scenario's record says where it
ran (``placement``: wave, pool, nodes, why alone, its wall-clock span).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from drills.bdd.features import FeatureInfo
from drills.bdd import niceness
from drills.bdd.claims import Claims, Share
from drills.bdd.plugin import FIRST_DONE, HELD, PART_WRITTEN, ScenarioKey, ScenarioOutcome
from drills.records.evidence.collect import rfc3339
from drills.scenario import needs

DEFAULT_SECONDS = 15.0
"""A scenario's expected seconds when no earlier archive under ``--reports`` timed it."""
TAIL_SECONDS = 4.0
"""A scenario expected to take at most this long goes to the end of its pool's share (:func:`_run_order`)."""
HISTORY_RUNS = 20
"""How many of the newest archives the estimates read."""
WORKER_STOP_S = 120.0
"""Seconds a worker is given to roll back after it is told to stop, before it is killed."""
BOOT_CPU_S = 5.5
"""CPU seconds one worker spends starting (the harness, its pool's API server, controllers and 5 agents) and
stopping: ``/usr/bin/time firedrill run -k advertises`` on the 2-core CI machine (docs/BENCHMARKS.md)."""


HELD_BOOT_LEFT = 0.5
"""The share of their start-up held workers have left when wave 1 ends: at nice 19 beside it they hardly move, then
their platforms come up about 3.5 s after the go instead of 8 (4 pools on the 2-core CI machine)."""


def head_start(pools: int, cpus: int, held: bool = False) -> float:
    """Seconds the first pool, whose platform is already up when its alone scenarios end, is expected to gain on
    the others, which start then (or, ``held``, begun beside wave 1, go on then): their start-up, side by side on
    ``cpus`` cores."""
    return BOOT_CPU_S * max(0, pools - 1) / max(1, cpus) * (HELD_BOOT_LEFT if held else 1.0)


@dataclass(frozen=True)
class Unit:
    """One scenario (one Examples row of an outline) as the planner sees it."""

    key: ScenarioKey
    name: str
    feature_file: str
    seconds: float = DEFAULT_SECONDS
    control_plane: str = ""
    """Why it measures the control plane ("" if it does not): it runs alone."""
    whole_cluster: str = ""
    """Why it acts on the whole cluster ("" if it does not): alone where pools share a control plane."""


@dataclass(frozen=True)
class Pool:
    name: str
    nodes: tuple[str, ...]
    prefix: str = "gpu-node"
    """The node-name prefix its embedded node group starts with."""


@dataclass(frozen=True)
class Slot:
    """One worker: a pool and the scenarios it runs there, in order."""

    pool: Pool
    units: tuple[Unit, ...]

    @property
    def seconds(self) -> float:
        return sum(u.seconds for u in self.units)


@dataclass(frozen=True)
class Wave:
    slots: tuple[Slot, ...]
    alone: bool
    """The scenarios of this wave run one at a time with nothing beside them."""


@dataclass(frozen=True)
class Plan:
    waves: tuple[Wave, ...]
    pools: tuple[Pool, ...]
    shared_control_plane: bool = False

    def why_alone(self, unit: Unit) -> str:
        return unit.control_plane or (unit.whole_cluster if self.shared_control_plane else "")


def node_pools(count: int, nodes: int = 4, spares: int = 1) -> tuple[Pool, ...]:
    """``count`` embedded node groups of ``nodes`` working nodes + ``spares`` spares each, names disjoint."""
    out = []
    for i in range(1, count + 1):
        prefix = f"p{i}-gpu-node"
        out.append(Pool(f"pool-{i}", tuple(f"{prefix}-{n}" for n in range(nodes + spares)), prefix))
    return tuple(out)


def make_plan(units: Sequence[Unit], pools: Sequence[Pool], *, shared_control_plane: bool = False,
              head_start: float = 0.0) -> Plan:
    """Waves for ``units`` over ``pools`` (pure).  First the scenarios that must run alone, one after another on
    the first pool (all of its nodes, nothing beside); then one wave with the rest spread over every pool, longest
    first onto the pool with the least work so far (ties: the lower pool), each pool keeping the scenarios' own
    order but for its short ones, which go last (:func:`_run_order`).  The first pool's worker carries on into that
    wave while the others start (:func:`run_plan`), so where scenarios ran alone it is counted ``head_start``
    seconds ahead.  Raises ValueError without a pool."""
    if not pools:
        raise ValueError("a plan needs at least one pool")
    plan = Plan((), tuple(pools), shared_control_plane)
    alone = tuple(u for u in units if plan.why_alone(u))
    rest = [u for u in units if not plan.why_alone(u)]
    order = {u.key: i for i, u in enumerate(units)}
    shares: list[list[Unit]] = [[] for _ in pools]
    load = [0.0] * len(pools)
    if alone:
        load[0] = -head_start
    for unit in sorted(rest, key=lambda u: (-u.seconds, order[u.key])):
        best = min(range(len(pools)), key=lambda i: (load[i], i))
        shares[best].append(unit)
        load[best] += unit.seconds
    waves = []
    if alone:
        waves.append(Wave((Slot(pools[0], alone),), alone=True))
    parallel = tuple(Slot(pool, tuple(sorted(share, key=lambda u: _run_order(u, order[u.key]))))
                     for pool, share in zip(pools, shares) if share)
    if parallel:
        waves.append(Wave(parallel, alone=False))
    return replace(plan, waves=tuple(waves))


def _run_order(unit: Unit, index: int) -> tuple[bool, float, int]:
    """Where a scenario goes in its pool's share: the longer ones in the features' order (side by side with the
    other pools' as a serial run has them), then the short ones (:data:`TAIL_SECONDS`), longest first.  The pools'
    last scenarios are then short ones, which a pool done with its share can take from a busier one
    (:mod:`drills.bdd.claims`): their ends come within seconds of each other."""
    short = unit.seconds <= TAIL_SECONDS
    return short, -unit.seconds if short else 0.0, index


def _matches(keyword: str | None, scenario: str, example: tuple[tuple[str, str], ...]) -> bool:
    """Whether ``-k keyword`` keeps the scenario, as pytest matches it: case-insensitive substrings of the test's
    name (``test_`` + the scenario's name as pytest-bdd makes it) and of its Examples id.  The workers apply
    the real ``-k``; this only keeps the printed plan from starting pools for scenarios it drops."""
    if not keyword:
        return True
    from _pytest.mark.expression import Expression
    from pytest_bdd.scenario import make_python_name

    names = [f"test_{make_python_name(scenario)}", "-".join(v for _, v in example), "test_contract.py"]
    return Expression.compile(keyword).evaluate(lambda sub, **_: any(sub.lower() in n.lower() for n in names))


def units_of(features: Sequence[FeatureInfo], features_dir: Path,
             history: dict[tuple[str, str], float] | None = None, keyword: str | None = None) -> list[Unit]:
    """Every scenario of the features (``-k keyword`` kept) as a :class:`Unit`: its kinds' declarations, its
    expected seconds."""
    history = history or {}
    out = []
    root = features_dir.resolve()
    for f in features:
        rel = f.path.resolve().relative_to(root).as_posix()
        for sc in f.scenarios:
            if not _matches(keyword, sc.name, sc.example):
                continue
            kinds = needs.needs_of(sc.steps).kinds
            cp = next((k.measures_control_plane for k in kinds if k.measures_control_plane), "")
            whole = next((k.needs_whole_cluster for k in kinds if k.needs_whole_cluster), "")
            out.append(Unit((rel, sc.line, sc.example), sc.name, rel, history.get((rel, sc.name), DEFAULT_SECONDS),
                            cp, whole))
    return out


def past_seconds(reports: Path, newest: int = HISTORY_RUNS) -> dict[tuple[str, str], float]:
    """Each scenario's median seconds over the newest sealed archives under ``reports`` (by feature file and
    scenario name), its rollback included where the record has it (``details.harness_cost.seconds`` spans the
    scenario and its rollback: a GPU held out takes its burn-in to give back, seconds its pool spends all the
    same); unreadable archives are passed over."""
    records = sorted(reports.glob("*/record.json"), key=lambda p: p.parent.name)[-newest:] if reports.is_dir() else []
    seen: dict[tuple[str, str], list[float]] = {}
    for path in records:
        try:
            doc = orjson.loads(path.read_bytes())  # a record is megabytes (its timeline): twice json's speed
        except (OSError, ValueError):
            continue
        for s in doc.get("scenarios") or []:
            if isinstance(s, dict) and s.get("verdict") == "PASS" and isinstance(s.get("seconds"), (int, float)):
                seen.setdefault((str(s.get("feature_file")), str(s.get("scenario"))), []).append(_slot_seconds(s))
    return {k: statistics.median(v) for k, v in seen.items()}


def _slot_seconds(scenario: dict[str, Any]) -> float:
    """A scenario's seconds in its worker: with its rollback where the record measured it, never less than the
    scenario itself."""
    cost = ((scenario.get("details") or {}).get("harness_cost") or {}).get("seconds")
    seconds = float(scenario["seconds"])
    return max(seconds, float(cost)) if isinstance(cost, (int, float)) else seconds


def plan_lines(plan: Plan) -> list[str]:
    """The plan in words: each wave, each pool's nodes and scenarios, and why a scenario runs alone."""
    lines = [f"Parallel plan: {len(plan.pools)} pool(s), {len(plan.waves)} wave(s); each pool is an embedded node "
             "group of its own (API server, controllers, nodes), so no two scenarios share a node"]
    if _carried(plan):
        lines.append(f"  {plan.waves[0].slots[0].pool.name} carries on into wave 2 once wave 1 is over (its platform "
                     "is up); the other pools run nothing before then (where this machine lets the run give "
                     "them their CPU priority back, their platforms start beside wave 1 at nice 19)")
    if any(_shares(wave) for wave in plan.waves):
        lines.append("  the shares below are a start: a pool that has run its own takes the last unstarted scenario "
                     "of the pool with the most seconds left, so no pool waits idle while another has work")
    for w, wave in enumerate(plan.waves, 1):
        expect = max(s.seconds for s in wave.slots)
        lines.append(f"  wave {w}: " + ("alone, one scenario at a time, nothing beside" if wave.alone else
                                       f"{len(wave.slots)} pool(s) side by side") + f" (about {expect:.0f} s)")
        for slot in wave.slots:
            lines.append(f"    {slot.pool.name} [{', '.join(slot.pool.nodes)}]:")
            for u in slot.units:
                why = plan.why_alone(u)
                lines.append(f"      - {u.feature_file}: {u.name} (~{u.seconds:.0f} s)" +
                             (f"  ALONE: {why}" if why else ""))
    return lines


# ------------------------------------------------------------------------------------------------- the run


@dataclass
class Part:
    """What a worker hands back: its outcomes, its timeline, and what the archive needs of its pool."""

    pool: str
    nodes: tuple[str, ...]
    outcomes: list[ScenarioOutcome]
    timeline: list[dict[str, Any]]
    description: str
    fingerprint: dict[str, Any]
    fingerprint_digest: str
    leak_report: dict[str, Any] | None
    secrets: list[str]
    run_dir: str
    """The worker's own run directory (its junit.xml and allure-results)."""
    defects: tuple[str, ...] = ()
    journal: str = ""
    """The worker's fault journal as it stood when its scenarios were over (JSON Lines: its header, each intent,
    each closure), for the run's archive."""


@dataclass
class Worker:
    slot: Slot
    wave: int
    alone: bool
    spec: Path
    out: Path
    proc: subprocess.Popen[str] | None = None
    reader: threading.Thread | None = None
    tail: list[str] = field(default_factory=list)
    first: frozenset[ScenarioKey] = frozenset()
    """Scenarios of wave 1 that run alone before the worker carries on into its ``wave``."""
    first_over: threading.Event = field(default_factory=threading.Event)
    """Set when the worker said its ``first`` scenarios are over (:data:`FIRST_DONE`), or ended."""
    held: bool = False
    """Started at nice 19 while wave 1 runs; it waits, up, for :func:`_go`."""
    parted: threading.Event = field(default_factory=threading.Event)
    """Set when the worker said its part file is written (:data:`PART_WRITTEN`), or ended."""

    def wave_of(self, key: ScenarioKey | None) -> tuple[int, bool]:
        """The wave a scenario of this worker ran in, and whether alone."""
        return (1, True) if key is not None and key in self.first else (self.wave, self.alone)


def _die_with_parent() -> None:
    """In the worker, before exec: SIGINT it if the run dies (Linux), so nothing outlives the run."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


def _held_start() -> None:
    _die_with_parent()
    niceness.hold_niceness()


def _start(worker: Worker, say: Callable[[str], None]) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    worker.proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from drills.bdd.run import worker_main; "
         "sys.exit(worker_main(sys.argv[1]))", str(worker.spec)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.PIPE if worker.held else subprocess.DEVNULL, text=True, env=env,
        start_new_session=True, preexec_fn=_held_start if worker.held else _die_with_parent)

    def pump() -> None:
        assert worker.proc is not None and worker.proc.stdout is not None
        try:
            for line in worker.proc.stdout:
                line = line.rstrip("\n")
                if line == FIRST_DONE:
                    worker.first_over.set()
                    continue
                if line == HELD:
                    continue
                if line == PART_WRITTEN:
                    worker.parted.set()
                    continue
                worker.tail = (worker.tail + [line])[-20:]
                say(f"[{worker.slot.pool.name}] {line}")
        finally:
            worker.first_over.set()  # it ended: nobody is left to wait for
            worker.parted.set()

    worker.reader = threading.Thread(target=pump, name=f"firedrill-{worker.slot.pool.name}", daemon=True)
    worker.reader.start()


def _go(worker: Worker) -> None:
    """A held worker back at nice 0 (it, its platform's processes and their threads), then told to go."""
    assert worker.proc is not None and worker.proc.stdin is not None
    with contextlib.suppress(OSError):  # it ended: nothing to give back
        niceness.renice(worker.proc.pid, 0)
    with contextlib.suppress(OSError):  # BrokenPipeError: it ended
        worker.proc.stdin.write("go\n")
        worker.proc.stdin.close()
    worker.held = False


def _stop(workers: Iterable[Worker]) -> None:
    """Ask every running worker to roll back (SIGINT, as Ctrl-C would), wait for each with a deadline, and kill
    only one that outlived it.  Only the run's own workers are signalled, by their pid."""
    live = [w for w in workers if w.proc is not None and w.proc.poll() is None]
    for w in live:
        assert w.proc is not None
        with contextlib.suppress(ProcessLookupError):
            w.proc.send_signal(signal.SIGINT)
    for w in _outlived(live):
        assert w.proc is not None
        w.proc.kill()
        w.proc.wait()


def _outlived(workers: list[Worker]) -> list[Worker]:
    """Wait for ``workers`` to end, up to :data:`WORKER_STOP_S` in all; the ones still running then."""
    deadline, out = time.monotonic() + WORKER_STOP_S, []
    for w in workers:
        assert w.proc is not None
        try:
            w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            out.append(w)
    return out


def _carried(plan: Plan) -> bool:
    """Whether wave 1 runs alone on the pool that also has a share of wave 2: one worker then does both."""
    return len(plan.waves) > 1 and plan.waves[0].alone and len(plan.waves[0].slots) == 1 and \
        any(s.pool == plan.waves[0].slots[0].pool for s in plan.waves[1].slots)


def _worker(work: Path, options: Any, slot: Slot, wave: int, alone: bool,
            first: tuple[Unit, ...] = (), held: bool = False, shares: tuple[Share, ...] = ()) -> Worker:
    """The worker of ``slot`` in ``wave``. With ``shares`` (the wave's pools side by side), it claims its scenarios
    as it goes, and may take the others' (:mod:`drills.bdd.claims`)."""
    base = work / f"wave{wave}-{slot.pool.name}"
    base.mkdir()
    units = (*first, *slot.units)
    w = Worker(Slot(slot.pool, units), wave, alone, base / "spec.pickle", base / "part.pickle",
               first=frozenset(u.key for u in first), held=held)
    claims = None
    if shares:
        claims = Claims(work / f"claims-wave{wave}", slot.pool.name, shares)
        claims.folder.mkdir(exist_ok=True)
    select = w.first | (claims.keys() if claims is not None else frozenset(u.key for u in units))
    spec = replace(options, parallel=1, select=select, first=w.first, hold=held, claims=claims,
                   node_prefix=slot.pool.prefix, part_out=w.out, reports=base / "reports", live=False)
    w.spec.write_bytes(pickle.dumps(spec))
    return w


def _shares(wave: Wave) -> tuple[Share, ...]:
    """A wave's planned shares, for its pools to claim from as they go; none where the wave runs alone or on one
    pool."""
    if wave.alone or len(wave.slots) < 2:
        return ()
    return tuple(Share(s.pool.name, tuple((u.key, u.seconds) for u in s.units)) for s in wave.slots)


def run_plan(plan: Plan, options: Any, work: Path, say: Callable[[str], None]) -> list[tuple[Worker, Part | None]]:
    """Run each wave's workers side by side, one wave after the other; every worker's part (None: it left
    none).  Where wave 1 runs alone on a pool that has a share of wave 2, that pool's one worker runs both: the
    others start when it says wave 1 is over (its verdicts in), and its platform, already up, goes straight on.
    Where :func:`niceness.can_hold`, the others start at once instead, at nice 19, so
    their platforms come up on the CPU wave 1 leaves idle; they wait, up, and are given nice 0 and told to go when
    wave 1 is over.  No scenario of theirs runs beside wave 1 either way."""
    done: list[tuple[Worker, Part | None]] = []
    carried = _carried(plan)
    hold = carried and niceness.can_hold()
    lead: Worker | None = None
    for number, wave in enumerate(plan.waves, 1):
        if carried and number == 1:
            continue  # run by the wave-2 worker of the same pool, first
        workers = []
        shares = _shares(wave)
        for slot in wave.slots:
            if carried and number == 2 and slot.pool == plan.waves[0].slots[0].pool:
                lead = _worker(work, options, slot, number, wave.alone, first=plan.waves[0].slots[0].units,
                               shares=shares)
                workers.insert(0, lead)
            else:
                workers.append(_worker(work, options, slot, number, wave.alone, held=hold and number == 2,
                                       shares=shares))
        try:
            others = workers
            if lead is not None and lead in workers:
                others = [w for w in workers if w is not lead]
                say(f"wave 1: starting 1 worker: {lead.slot.pool.name} ({len(lead.first)} scenario(s) alone, then "
                    f"{len(lead.slot.units) - len(lead.first)} in wave 2)"
                    + (f"; {', '.join(w.slot.pool.name for w in others)} start their platforms beside it at nice 19 "
                       "and wait" if hold and others else ""))
                _start(lead, say)
                for w in others:
                    if w.held:
                        _start(w, say)
                lead.first_over.wait()
            say(f"wave {number}: starting {len(others)} worker(s): "
                + ", ".join(f"{w.slot.pool.name} ({len(w.slot.units)} scenario(s))" for w in others)
                + (" (up already: back to nice 0)" if hold and others else "")
                + (f"; {lead.slot.pool.name} carries on" if lead is not None and lead in workers else ""))
            for w in others:
                if w.held:
                    _go(w)
                else:
                    _start(w, say)
            for w in workers:  # a worker's outcomes are whole once it says so; it then stops its platform
                w.parted.wait()
                if not w.out.exists():
                    assert w.proc is not None
                    w.proc.wait()  # it ended without them: its exit code goes into the error
        except BaseException:
            _stop(workers)
            raise
        for w in workers:
            part = pickle.loads(w.out.read_bytes()) if w.out.exists() else None
            if part is not None:
                part.pool = w.slot.pool.name
            done.append((w, part))
    return done


def finish(workers: Iterable[Worker]) -> None:
    """Wait for every worker to end (each stops its platform after writing its part), up to
    :data:`WORKER_STOP_S` in all; one that outlives it is stopped as an interrupted one is (:func:`_stop`)."""
    live = [w for w in workers if w.proc is not None]
    _stop(_outlived(live))
    for w in live:
        if w.reader is not None:
            w.reader.join()


def merge(done: Sequence[tuple[Worker, Part | None]], plan: Plan,
          order: dict[ScenarioKey, int]) -> tuple[list[ScenarioOutcome], list[dict[str, Any]]]:
    """Every worker's outcomes (placed) in the features' order, and one timeline (each worker's in turn, the
    outcomes' spans moved with it).  A worker that left no part counts as a harness error each scenario of its
    share that no other pool ran (pools take each other's unstarted scenarios: :mod:`drills.bdd.claims`)."""
    outcomes: list[ScenarioOutcome] = []
    timeline: list[dict[str, Any]] = []
    units = {u.key: u for wave in plan.waves for slot in wave.slots for u in slot.units}
    planned = {u.key: slot.pool.name for wave in plan.waves for slot in wave.slots for u in slot.units}
    ran = {o.key for _, part in done if part is not None for o in part.outcomes}
    for w, part in done:
        if part is None:
            code = w.proc.returncode if w.proc is not None else None
            why = (f"the worker of {w.slot.pool.name} ended (exit {code}) without a result: "
                   + " / ".join(w.tail[-3:]))
            for u in w.slot.units:
                if u.key in ran:
                    continue
                o = ScenarioOutcome(nodeid=f"{u.feature_file}::{u.name}", feature_file=u.feature_file,
                                    scenario=u.name, error=why, key=u.key)
                o.placement = _placement(w, plan, u, o, planned.get(u.key))
                outcomes.append(o)
            continue
        offset = len(timeline)
        timeline += part.timeline
        for o in part.outcomes:
            start, end = o.timeline_span
            o.timeline_span = (start + offset, end + offset)
            o.placement = _placement(w, plan, units.get(o.key) if o.key is not None else None, o,
                                     planned.get(o.key) if o.key is not None else None)
            outcomes.append(o)
    outcomes.sort(key=lambda o: (order.get(o.key, len(order)) if o.key is not None else len(order), o.repeat))
    return outcomes, timeline


def _placement(w: Worker, plan: Plan, unit: Unit | None, o: ScenarioOutcome, planned: str | None) -> dict[str, Any]:
    """Where the scenario ran: its wave, its pool and nodes, why alone, its span, and ``taken_from`` (the pool the
    plan gave it) where another pool ran it."""
    began, ended = o.wall
    wave, alone = w.wave_of(o.key if o.key is not None else unit.key if unit is not None else None)
    return {"wave": wave, "pool": w.slot.pool.name, "nodes": list(w.slot.pool.nodes),
            "alone": (plan.why_alone(unit) or "run alone") if alone and unit is not None else None,
            "started": rfc3339(datetime.fromtimestamp(began, timezone.utc)) if began else None,
            "finished": rfc3339(datetime.fromtimestamp(ended, timezone.utc)) if ended else None,
            **({"taken_from": planned} if planned is not None and planned != w.slot.pool.name else {})}


def merge_junit(parts: Sequence[Part], out: Path) -> None:
    """One junit.xml: every worker's test cases in one ``firedrill`` suite, the counts summed."""
    suite = ET.Element("testsuite", name="firedrill")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    seconds = 0.0
    for part in parts:
        path = Path(part.run_dir) / "junit.xml"
        if not path.exists():
            continue
        root = ET.parse(path).getroot()
        for s in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
            for k in totals:
                totals[k] += int(s.get(k, "0"))
            seconds += float(s.get("time", "0") or 0)
            suite.extend(s.findall("testcase"))
    for k, v in totals.items():
        suite.set(k, str(v))
    suite.set("time", f"{seconds:.3f}")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)


def merge_allure(parts: Sequence[Part], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for part in parts:
        src = Path(part.run_dir) / "allure-results"
        for f in sorted(src.glob("*")) if src.is_dir() else []:
            if f.is_file():
                shutil.copyfile(f, out / f.name)


def merge_journals(parts: Sequence[Part], out: Path) -> None:
    """The pools' fault journals into the archive's one ``fault-journal.jsonl``, pool after pool (each begins with
    its own header line, naming its pool's API server)."""
    text = "".join(p.journal if p.journal.endswith("\n") or not p.journal else p.journal + "\n" for p in parts)
    if text:
        out.write_text(text, encoding="utf-8")


def leak_reports(parts: Sequence[Part]) -> dict[str, Any] | None:
    """One pool's run-window leak report as is; several: each under its pool, none summed (each is its own
    platform's claim about its own node group)."""
    reports = [p for p in parts if p.leak_report is not None]
    if len(reports) <= 1:
        return reports[0].leak_report if reports else None
    return {"error": "a --parallel run: one leak report per node group, under pools (not summed)",
            "pools": {p.pool: p.leak_report for p in reports}}


__all__ = ["Unit", "Pool", "Slot", "Wave", "Plan", "Part", "make_plan", "node_pools", "units_of", "past_seconds",
           "plan_lines", "run_plan", "finish", "merge", "merge_junit", "merge_allure", "leak_reports"]
