"""The pytest plugin behind ``firedrill run``: the scenario fixture, live progress, verdicts, outcomes.

- ``drill`` (fixture): a :class:`~drills.scenario.context.ScenarioContext` per scenario, rolled back on every
  exit path (pass, fail, error, Ctrl-C) by its finalizer.
- After a scenario's last step its verdict is delivered: FAIL fails the test with every missed threshold
  named; INCONCLUSIVE skips it with the reason (JUnit shows it as skipped, the run's exit code says 3).
- Each Gherkin step is also an Allure step, when Allure is recording.
- With ``firedrill run --live``, each scenario, step, act, measured phase and verdict is also published to the live
  view (:mod:`drills.bdd.live`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import allure
import pytest
from pytest_bdd.scenario import scenario_wrapper_template_registry

from drills.bdd import collector
from drills.bdd.claims import Claims
from drills.bdd.cost import HarnessMeter
from drills.bdd.live import LivePublisher
from drills.records.live.events import StepLine, StepState
from drills.records.verdict import DrillInconclusive, DrillResult, ScenarioHalted, Verdict
from drills.scenario import needs
from drills.scenario.context import ScenarioContext
from drills.scenario.drill import Drill
from drills.scenario.vocabulary import suggest
from drills.target.connect import Target

CONTEXT = pytest.StashKey[ScenarioContext]()
UNSTARTED = pytest.StashKey[DrillResult]()
"""The result of a scenario that ended before any drill started (it cannot run on this target)."""


class ScenarioFailed(AssertionError):
    """The platform broke a promise stated in the scenario."""


ScenarioKey = tuple[str, int, tuple[tuple[str, str], ...]]
"""Which scenario, as :mod:`drills.bdd.parallel` names it: its feature file (relative to the features directory),
its line, and its Examples row ((column, value) pairs; () for a plain Scenario)."""


@dataclass
class ScenarioOutcome:
    nodeid: str
    feature: str = ""
    feature_file: str = ""
    """Relative to the features directory."""
    scenario: str = ""
    tags: list[str] = field(default_factory=list)
    verdict: Verdict | None = None
    """None when the harness itself failed (an error, not a verdict on the platform)."""
    result: DrillResult | None = None
    error: str = ""
    seconds: float = 0.0
    repeat: int = 1
    timeline_span: tuple[int, int] = (0, 0)
    wall: tuple[float, float] = (0.0, 0.0)
    """Wall-clock instants (epoch seconds) the scenario began and ended: when scenarios run side by side
    (``--parallel``), whether they overlapped."""
    key: ScenarioKey | None = None
    """Which scenario of the features it is (:meth:`FiredrillPlugin.key_of`)."""
    placement: dict[str, Any] | None = None
    """Where a ``--parallel`` run placed it (its wave, pool and nodes, and why it ran alone); None: a serial run."""


def broken_promises(result: DrillResult) -> list[str]:
    """What a FAIL or INCONCLUSIVE rests on, as the final table words it: each missed threshold (its measured
    value, or why it was never measured, and the promise) and each finding (a broken promise, or the
    evidence that could not be established)."""
    return [j.message for j in result.judgements if j.verdict is not Verdict.PASS] + list(result.findings)


def summarize(result: DrillResult) -> str:
    lines = [f"{result.drill}: {result.verdict.value}"]
    lines += [f"  - {line}" for line in broken_promises(result)]
    return "\n".join(lines)


def live_line(outcome: ScenarioOutcome) -> str:
    """The progress line printed when a scenario ends: its verdict, its time and, for a FAIL or an
    INCONCLUSIVE, every broken promise with its measured value (or the missing evidence), on one line."""
    label = outcome.verdict.value if outcome.verdict else "HARNESS ERROR"
    line = f"  {label} ({outcome.seconds:.1f} s)"
    if outcome.verdict in (Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.ABORTED) and outcome.result is not None:
        broken = broken_promises(outcome.result)
        if broken:
            return f"{line}: {outcome.result.drill}: " + "; ".join(" ".join(b.split()) for b in broken)
    return line + (f": {outcome.error.splitlines()[0]}" if outcome.error else "")


FIRST_DONE = "firedrill-worker: the scenarios that run alone are over"
"""The line a ``--parallel`` worker prints once the verdict of its last ``first`` scenario is in (its rollback, which
measures nothing, goes on beside the other pools)."""
HELD = "firedrill-worker: up and collected, waiting for the word to go"
"""What a ``--parallel`` worker started during wave 1 (:func:`drills.bdd.parallel.run_plan`) prints once its platform
is up and its scenarios collected; it then waits for a line on its stdin before the first of them."""
PART_WRITTEN = "firedrill-worker: outcomes written"
"""What a ``--parallel`` worker prints once its outcomes are in its part file, whole (renamed into place): the run
may seal them while the worker stops its platform."""


class FiredrillPlugin:
    def __init__(self, target: Target, progress: Callable[[str], None] = print, repeat: int = 1,
                 features_dir: Path | None = None, live: LivePublisher | None = None,
                 select: frozenset[ScenarioKey] | None = None,
                 first: frozenset[ScenarioKey] = frozenset(), hold: Callable[[], None] | None = None,
                 claims: Claims | None = None) -> None:
        self.target = target
        self.claims = claims
        """A ``--parallel`` worker of a wave whose pools share their scenarios as they go (:mod:`drills.bdd.claims`):
        of ``select``, it runs ``first``, then each scenario it claims; None: every selected one, in order."""
        self.hold = hold
        """Called once the scenarios are collected, before the first: returns when the worker may go (a held
        ``--parallel`` worker); None: go at once."""
        self.select = select
        """Only these scenarios run (a ``--parallel`` worker's share); None: every collected one."""
        self.first = first
        """Of those, the ones that run alone: first, and :data:`FIRST_DONE` is printed when they are over."""
        self._first_left: set[str] | None = None
        """The node ids of ``first`` not yet over (None: none was asked for, or it has been said)."""
        self.live = live
        """Where the live view's events go (``firedrill run --live``); None: no live view."""
        self.features_dir = features_dir
        self.progress = progress
        self.repeat = repeat
        self.outcomes: list[ScenarioOutcome] = []
        self._open_steps: dict[int, Any] = {}
        self._step_started: dict[int, float] = {}
        self._started: dict[str, float] = {}
        self._wall_started: dict[str, float] = {}
        self._timeline_start: dict[str, int] = {}
        self._names: dict[str, tuple[str, str, list[str], str]] = {}
        self._kinds: dict[str, tuple[type[Drill], ...]] = {}
        """Each scenario's drill kinds (by node id), from its sentences before its first step."""
        self.t0 = time.monotonic()

    def _say(self, text: str) -> None:
        self.progress(f"[{time.monotonic() - self.t0:6.1f}s] {text}")

    # ------------------------------------------------------------ fixtures
    @pytest.fixture
    def drill(self, request: pytest.FixtureRequest) -> Iterator[ScenarioContext]:
        ctx = ScenarioContext(self.target, DrillResult("scenario"), kinds=self._kinds.get(request.node.nodeid, ()))
        request.node.stash[CONTEXT] = ctx
        if self.live is not None:
            node = request.node
            self.live.attach(node.nodeid, ctx, lambda: self._outcome(node, ctx.result.verdict, ctx))
        with collector.young_only():
            meter = HarnessMeter().start()
            ctx.watch_invariants()
            try:
                yield ctx
            finally:
                self._say("  rollback")
                ctx.rollback()
                ctx.result.details["harness_cost"] = meter.stop().as_dict()  # the evidence is sealed after every scenario

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if self.repeat > 1:
            metafunc.fixturenames.append("firedrill_repeat")
            metafunc.parametrize("firedrill_repeat", range(1, self.repeat + 1), ids=lambda i: f"run{i}")

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """A ``--parallel`` worker runs only its share: the other scenarios are deselected, never skipped (they
        are another worker's, and its record holds them)."""
        if self.select is None:
            return
        keep, drop = [], []
        for item in items:
            (keep if self.key_of(item) in self.select else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        if self.first:
            ahead = [i for i in keep if self.key_of(i) in self.first]
            keep = ahead + [i for i in keep if self.key_of(i) not in self.first]
            self._first_left = {i.nodeid for i in ahead}
            self._first_over()
        items[:] = keep
        if self.hold is not None:
            self.progress(HELD)
            self.hold()
            self.t0 = time.monotonic()  # its progress lines count from the go

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """With :attr:`claims`: ``first`` in order, then every scenario this worker claims, one at a time, as
        :meth:`Claims.next_key` picks them (its own share, then another pool's last unstarted one); a scenario
        another worker claimed is not run here and leaves no trace (no report, no JUnit case, no Allure result).
        Without: pytest's own loop."""
        if self.claims is None or session.testsfailed or session.config.option.collectonly:
            return None  # pytest's own loop (it also stops on collection errors)
        items = list(session.items)
        by_key: dict[ScenarioKey, list[pytest.Item]] = {}
        for item in items:
            key = self.key_of(item)
            if key is not None:
                by_key.setdefault(key, []).append(item)
        claims = self.claims
        queue = [i for i in items if self.key_of(i) in self.first]
        for item in queue:
            self._protocol(session, item, items)
        while (key := claims.next_key(claims.is_claimed, by_key)) is not None:
            if claims.claim(key):
                for item in by_key[key]:
                    self._protocol(session, item, items)
        return True

    @staticmethod
    def _protocol(session: pytest.Session, item: pytest.Item, items: list[pytest.Item]) -> None:
        """One item's setup, call and teardown, as pytest's loop runs it. Its ``nextitem`` is a neighbour in the
        list: every scenario is of the same module, so only the item's own fixtures are torn down after it, as in
        pytest's loop; what stands after the last is torn down when the session ends."""
        at = items.index(item)
        neighbour = items[at + 1] if at + 1 < len(items) else items[at - 1] if at > 0 else None
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=neighbour)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        """After a scenario's teardown (its rollback included): where no verdict was recorded (a harness error in
        its teardown alone), a ``first`` scenario is over only now."""
        if self._first_left is not None:
            self._first_left.discard(nodeid)
            self._first_over()

    def _first_over(self) -> None:
        if self._first_left is not None and not self._first_left:
            self._first_left = None
            self.progress(FIRST_DONE)

    def key_of(self, item: pytest.Item) -> ScenarioKey | None:
        """The :data:`ScenarioKey` of a collected scenario, None for an item that is none."""
        template = scenario_wrapper_template_registry.get(getattr(item, "obj", None))  # type: ignore[arg-type]
        if template is None:
            return None
        path = Path(template.feature.filename)
        if self.features_dir is not None and path.is_relative_to(self.features_dir):
            path = path.relative_to(self.features_dir)
        callspec = getattr(item, "callspec", None)
        example = callspec.params.get("_pytest_bdd_example") if callspec is not None else None
        return path.as_posix(), int(template.line_number), tuple((example or {}).items())

    # ---------------------------------------------------------- bdd hooks
    def pytest_bdd_apply_tag(self, tag: str, function: Any) -> bool:
        """Tags name contract clauses (``@clause:4.2``) and conformance items; they are recorded with each
        scenario's evidence, not turned into pytest marks (which cannot hold ':')."""
        return True

    def pytest_bdd_before_scenario(self, request: pytest.FixtureRequest, feature: Any, scenario: Any) -> None:
        tags = sorted(getattr(scenario, "tags", set()) or [])
        path = Path(feature.filename)
        if self.features_dir is not None and path.is_relative_to(self.features_dir):
            path = path.relative_to(self.features_dir)
        self._names[request.node.nodeid] = (feature.name, scenario.name, tags, path.as_posix())
        self._started[request.node.nodeid] = time.monotonic()
        self._wall_started[request.node.nodeid] = time.time()
        self._timeline_start[request.node.nodeid] = len(self.target.timeline)
        allure.dynamic.feature(feature.name)
        allure.dynamic.title(scenario.name)
        for tag in tags:
            allure.dynamic.tag(tag)
        self._say(f"{feature.name} > {scenario.name}" + (f"  [{' '.join('@' + t for t in tags)}]" if tags else ""))
        if self.live is not None:
            self.live.scenario(request.node.nodeid, feature.name, scenario.name, tags,
                               [StepLine(st.keyword, st.name) for st in scenario.steps], _repeat(request.node))

    def pytest_bdd_before_step(self, request: pytest.FixtureRequest, feature: Any, scenario: Any, step: Any,
                               step_func: Any) -> None:
        ctx = request.node.stash.get(CONTEXT, None)
        if ctx is not None:
            ctx.result.raise_if_halted()  # a halted scenario runs no further step
        if step is scenario.steps[0]:
            self._can_run([s.name for s in scenario.steps], request.node.nodeid, ctx)
        self._say(f"  {step.keyword} {step.name}")
        self._step_started[id(step)] = time.monotonic()
        self._live_step(request, scenario, step, StepState.RUNNING)
        cm = allure.step(f"{step.keyword} {step.name}")
        cm.__enter__()
        self._open_steps[id(step)] = cm

    def _can_run(self, steps: list[str], nodeid: str, ctx: ScenarioContext | None) -> None:
        """Before a scenario's first step: one that cannot run on this target (a flavor with no workload for its
        drill, a fault with no stand-in, a sentence for the embedded platform alone) is INCONCLUSIVE now, with the
        reason, before anything is created; the same check ``--dry-run`` prints. The scenario learns its kinds
        (its context may be made only when the first step asks for it: the fixture reads them then)."""
        needed = needs.needs_of(steps)
        self._kinds[nodeid] = needed.kinds
        if ctx is not None:
            ctx.kinds = needed.kinds
        reasons = needs.problems(needed, self.target.profile, reference=self.target.embedded is not None)
        if reasons:
            raise DrillInconclusive("cannot run on this target: " + "; ".join(reasons))

    def pytest_bdd_after_step(self, request: pytest.FixtureRequest, feature: Any, scenario: Any, step: Any,
                              step_func: Any, step_func_args: Any) -> None:
        cm = self._open_steps.pop(id(step), None)
        if cm is not None:
            cm.__exit__(None, None, None)
        self._live_step(request, scenario, step, StepState.PASSED)
        if self.live is not None and step.type == "when":
            self.live.act(request.node.nodeid, f"{step.keyword} {step.name}")
        if step is scenario.steps[-1]:
            self._deliver(request)

    def pytest_bdd_step_error(self, request: pytest.FixtureRequest, feature: Any, scenario: Any, step: Any,
                              step_func: Any, step_func_args: Any, exception: BaseException) -> None:
        cm = self._open_steps.pop(id(step), None)
        if cm is not None:
            cm.__exit__(type(exception), exception, exception.__traceback__)
        self._live_step(request, scenario, step, StepState.FAILED)

    def _live_step(self, request: pytest.FixtureRequest, scenario: Any, step: Any, state: StepState) -> None:
        if self.live is None:
            return
        index = next((i for i, st in enumerate(scenario.steps) if st is step), -1)
        began = self._step_started.get(id(step)) if state is not StepState.RUNNING else None
        if state is not StepState.RUNNING:
            self._step_started.pop(id(step), None)
        self.live.step(request.node.nodeid, index, state, None if began is None else time.monotonic() - began)

    def pytest_bdd_step_func_lookup_error(self, request: pytest.FixtureRequest, feature: Any, scenario: Any,
                                          step: Any, exception: BaseException) -> None:
        close = suggest(step.name)
        hint = ("; closest known steps: " + " | ".join(close)) if close else ""
        self._say(f"  unknown step: {step.keyword} {step.name}{hint}")

    def _deliver(self, request: pytest.FixtureRequest) -> None:
        ctx = request.node.stash.get(CONTEXT, None)
        if ctx is None:
            return
        ctx.stop_invariants()
        result = ctx.result
        if result.verdict is Verdict.ABORTED:
            raise ScenarioHalted(result.halted)
        if result.verdict is Verdict.FAIL:
            raise ScenarioFailed(summarize(result))
        if result.verdict is Verdict.INCONCLUSIVE:
            pytest.skip("INCONCLUSIVE: " + "; ".join(result.findings))

    # ------------------------------------------------------ test outcomes
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        if call.excinfo is not None and call.excinfo.errisinstance(DrillInconclusive):
            ctx = item.stash.get(CONTEXT, None)
            why = str(call.excinfo.value)
            if ctx is not None:
                if why not in ctx.result.findings:  # a drill that recorded it before raising: said once
                    ctx.result.inconclusive(why)
            else:  # before its first step: no drill started, the reason is the scenario's one finding
                early = DrillResult("scenario")
                early.inconclusive(why)
                item.stash[UNSTARTED] = early
            if ctx is not None and ctx.result.verdict is Verdict.FAIL:  # found before this step could not go on
                report.outcome = "failed"
                report.longrepr = f"FAIL: {summarize(ctx.result)}"
            else:
                report.outcome = "skipped"
                report.longrepr = (str(item.path), 0, f"INCONCLUSIVE: {call.excinfo.value}")
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self._record(item, report, call)

    def _outcome(self, item: pytest.Item, verdict: Verdict | None, ctx: ScenarioContext | None) -> ScenarioOutcome:
        """The scenario's outcome with this verdict: the final one (:meth:`_record`), or one so far (the live view's)."""
        feature, scenario, tags, feature_file = self._names.get(item.nodeid, ("", item.name, [], ""))
        out = ScenarioOutcome(item.nodeid, feature, feature_file, scenario, tags, verdict=verdict,
                              seconds=time.monotonic() - self._started.get(item.nodeid, time.monotonic()),
                              repeat=_repeat(item), timeline_span=(self._timeline_start.get(item.nodeid, 0),
                                                                   len(self.target.timeline)),
                              wall=(self._wall_started.get(item.nodeid, time.time()), time.time()),
                              key=self.key_of(item))
        if ctx is not None:
            out.result = ctx.result
        elif UNSTARTED in item.stash:
            out.result = item.stash[UNSTARTED]
        return out

    def _record(self, item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[Any]) -> None:
        ctx = item.stash.get(CONTEXT, None)
        out = self._outcome(item, None, ctx)
        raised = call.excinfo.value if call.excinfo is not None else None
        out.verdict = scenario_verdict(report.passed, report.skipped, raised, ctx.result if ctx is not None else None)
        if out.verdict in (Verdict.FAIL, Verdict.ABORTED):
            out.error = summarize(ctx.result) if ctx is not None else str(raised)
        elif out.verdict is Verdict.INCONCLUSIVE:
            out.error = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        elif out.verdict is None:
            out.error = call.excinfo.exconly() if call.excinfo is not None else str(report.longrepr)
        self._say(live_line(out))
        self.outcomes.append(out)
        if self._first_left is not None:  # its verdict is in: what is left, its rollback, measures nothing
            self._first_left.discard(item.nodeid)
            self._first_over()
        if out.verdict is Verdict.ABORTED:  # the guard's breach: nothing after this scenario runs
            item.session.shouldstop = f"ABORTED: {ctx.result.halted if ctx is not None else ''}"
        if self.live is not None:
            self.live.verdict(item.nodeid, out)


def scenario_verdict(passed: bool, skipped: bool, raised: BaseException | None,
                     result: DrillResult | None) -> Verdict | None:
    """A scenario's verdict from how its test ended: ABORTED (the abort guard's breach, however the test ended),
    PASS, FAIL (its drill's findings, also when it ended early, or when a later step could not go on after a FAIL
    was found: the FAIL stands), INCONCLUSIVE (a skip: a drill could not establish the truth), or None (the harness
    failed: its exception is the error)."""
    if result is not None and result.verdict is Verdict.ABORTED:
        return Verdict.ABORTED
    if passed:
        return Verdict.PASS
    failed = result is not None and result.verdict is Verdict.FAIL
    if isinstance(raised, ScenarioFailed) or (failed and isinstance(raised, (ScenarioHalted, DrillInconclusive))):
        return Verdict.FAIL
    if skipped or isinstance(raised, DrillInconclusive):
        return Verdict.INCONCLUSIVE
    return None


def _repeat(item: pytest.Item) -> int:
    """Which run of its scenario ``item`` is (``--repeat``), from 1."""
    callspec = getattr(item, "callspec", None)
    return int(callspec.params.get("firedrill_repeat", 1)) if callspec is not None else 1
