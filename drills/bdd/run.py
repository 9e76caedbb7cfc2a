"""``firedrill run``: check the features, connect the target, run the scenarios, judge, summarize.

Exit codes, so CI can tell "the platform broke a promise" from "the harness could not run":

====  =====================================================================
0     every scenario PASSed
1     at least one scenario FAILed (a promise was broken)
2     usage or input error: bad option, broken feature file, unknown step, bad profile
3     no FAIL, but at least one scenario was INCONCLUSIVE
4     the harness could not run: cluster unreachable, platform did not start, harness error
====  =====================================================================
"""

from __future__ import annotations

import dataclasses
import os
import signal
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import IntEnum
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from drills.bdd.claims import Claims
from drills.bdd.features import FeatureError, FeatureInfo, load_features
from drills.bdd.live import LivePublisher
from drills.bdd import niceness, parallel
from drills.bdd.plugin import PART_WRITTEN, FiredrillPlugin, ScenarioKey, ScenarioOutcome
from drills.bdd.rbac import needed, rbac_command
from drills.errors import FiredrillError
from drills.kube.flavors import valid_dns_label
from drills.records.evidence.archive import seal
from drills.records.evidence.collect import build_record, new_run_id, rfc3339, scenario_record
from drills.records.evidence.contract import ContractSigner, load_signers
from drills.records.evidence.report import SignatureStatus, render_report
from drills.records.evidence.signing import Signer
from drills.records.live import LiveServer, LiveServerError, RunFinished, RunStarted, TargetReady
from drills.records.score import explain as explain_score, run_score, scored_from_record
from drills.records.verdict import Verdict
from drills.scenario import needs
from drills.kube.driver import KubeDriver
from drills.target.connect import AccessCheck, LeftBroken, Target, cluster_target, embedded_target
from drills.target.raytarget import RayTarget, ray_driver, ray_key, ray_serving_on, ray_target
from drills.target.slurmtarget import SlurmTarget, serving_on, slurm_driver, slurm_key, slurm_target
from drills.target.journal import ARCHIVE_NAME, FaultJournal
from drills.target.recover import left_broken, leftovers
from drills.target.leakreport.source import run_window_report, source_for
from drills.target.profile import TargetProfile, load_profile, reference_profile


LIVE_TEST_HOLD = "FIREDRILL_LIVE_TEST_HOLD"
"""Test-only: with the live view on and this set, the run waits for a line on its stdin after the last scenario's
verdict and before it seals the archive, so a browser test can look at the page while the run is surely still
running (a wait on an event the test sends, not a sleep). Never set it for a real run."""

DEFECT_NOTE = ("  NOTE: the reference platform runs with defect(s) {defects} from the defect zoo (docs/DEFECTS.md): "
               "a FAIL is what the drills owe it; this run is no acceptance of any platform.")


CONTRACT_PLUGINS = ("pytest_bdd.plugin", "allure_pytest.plugin", "drills.bdd.steps")
"""The pytest plugins of the contract's session, and the only ones it loads (:func:`_no_caller_pytest_options`):
Gherkin scenarios, the Allure results, Firedrill's steps (its scenario plugin is passed as an object)."""


class ExitCode(IntEnum):
    PASSED = 0
    FAILED = 1
    USAGE = 2
    INCONCLUSIVE = 3
    HARNESS = 4
    ABORTED = 5
    """The abort guard stopped the run (docs/SAFETY.md): a condition of the profile's safety.abort_when."""


@dataclass(frozen=True)
class RunOptions:
    features: Path
    kubeconfig: Path | None = None
    context: str | None = None
    profile: Path | None = None
    repeat: int = 1
    dry_run: bool = False
    keyword: str | None = None
    scheduler_profile: str = "gang"
    nodes: int = 4
    namespace: str | None = None
    reports: Path = Path("reports")
    """Archives land in reports/<run-id>/, and reports/ledger.jsonl chains them."""
    sign_key: Path | None = None
    """Ed25519 private key (PEM, mode 0600); without it a throwaway key signs the run."""
    defects: tuple[str, ...] = ()
    """Embedded platform only: defects from the zoo to start it with (docs/DEFECTS.md)."""
    real_gpus: bool = False
    """Embedded platform only: report this machine's GPUs instead of simulating them (``--real-gpus``)."""
    keep_measuring: float = 0.0
    """Seconds a phase that missed its threshold is still waited for (0: fail fast)."""
    live: bool = False
    """Serve the live view on loopback while the run goes (``--live``; :func:`live_by_default`)."""
    live_port: int = 0
    """The live view's port on 127.0.0.1 (0: any free port, printed)."""
    live_linger: float = 0.0
    """Seconds the live view stays up after the run (its final state), 0: it ends with the run."""
    parallel: int = 1
    """Pools run side by side (``--parallel N``; :mod:`drills.bdd.parallel`); 1: one scenario after another."""
    select: frozenset[ScenarioKey] | None = None
    """A ``--parallel`` worker's share of the scenarios; None: all of them."""
    first: frozenset[ScenarioKey] = frozenset()
    """Of a ``--parallel`` worker's share, the scenarios that run alone: they go first, and the worker says when
    they are over (:data:`drills.bdd.plugin.FIRST_DONE`), so the other pools start only then."""
    hold: bool = False
    """A ``--parallel`` worker started while wave 1 runs: it starts its platform and collects its scenarios, says
    so (:data:`drills.bdd.plugin.HELD`) and waits for a line on its stdin before its first scenario."""
    node_prefix: str = "gpu-node"
    """The embedded platform's node names (a ``--parallel`` pool's own)."""
    part_out: Path | None = None
    """A ``--parallel`` worker: write the outcomes here (:class:`drills.bdd.parallel.Part`) instead of sealing."""
    claims: Claims | None = None
    """A ``--parallel`` worker of a wave whose pools share their scenarios as they go (:mod:`drills.bdd.claims`)."""


def live_by_default(environ: dict[str, str] | None = None, interactive: bool | None = None) -> bool:
    """Whether ``firedrill run`` serves the live view when neither ``--live`` nor ``--no-live`` is given: where it
    costs nothing and someone may look, that is when the run's output is a terminal and no CI is running it
    (``$CI`` unset, as GitHub Actions, GitLab CI and most others set it)."""
    env = os.environ if environ is None else environ
    tty = sys.stdout.isatty() if interactive is None else interactive
    return tty and not env.get("CI")


@dataclass(frozen=True)
class RunEnded:
    """How a run that got past its inputs ended: what the live view's last event says."""

    code: int
    summary: str
    sealed: bool = False
    """The archive was sealed (and chained in the ledger)."""


def _plan(console: Console, features: list[FeatureInfo], target: str, profile: TargetProfile,
          options: RunOptions) -> int:
    """Print the plan; returns how many scenarios could not run on this target."""
    console.print(f"Plan (dry run: nothing is started, created or pulled)\n  target: {target}")
    if profile.slurm is not None:
        sl = profile.slurm
        console.print(f"  partition {sl.partition}, account {sl.account or '(the user default)'}, QOS "
                      f"{sl.qos or '(the association default)'}, GPUs as GRES {sl.gres}, fault method "
                      f"{profile.fault.method.value}")
        console.print(f"  safety: only nodes with feature {sl.allow_feature}; at most {profile.safety.max_nodes} "
                      f"node(s) and {profile.safety.max_gpu_share:.0%} of GPUs per drill; "
                      f"{'refuse' if profile.safety.require_healthy else 'allow'} a degraded cluster")
    elif profile.ray is not None:
        ry = profile.ray
        console.print(f"  canary: {' '.join(ry.canary_command)}, Ray Train storage {ry.storage_path or '(none)'}, "
                      f"max_failures {ry.max_failures}, gangs as {ry.gang_form.value}, fault method "
                      f"{profile.fault.method.value}")
        console.print(f"  safety: only nodes declaring resource {ry.allow_resource}, never the head; at most "
                      f"{profile.safety.max_nodes} node(s) and {profile.safety.max_gpu_share:.0%} of GPUs per drill; "
                      f"{'refuse' if profile.safety.require_healthy else 'allow'} a degraded cluster")
    else:
        console.print(f"  flavor {profile.flavor.value}, namespace {profile.namespace}, queue {profile.queue}, "
                      f"fault method {profile.fault.method.value}")
    if profile.on_kubernetes and (options.kubeconfig is not None or options.profile is not None):
        s = profile.safety
        console.print(f"  safety: only nodes labelled {s.allow_label}; at most {s.max_nodes} node(s) and "
                      f"{s.max_gpu_share:.0%} of GPUs per drill; control plane "
                      f"{'refused' if s.refuse_control_plane else 'allowed'}; "
                      f"{'refuse' if s.require_healthy else 'allow'} a degraded cluster")
    reference = options.kubeconfig is None and options.context is None and profile.on_kubernetes
    cannot = 0
    for f in features:
        console.print(f"  {f.path.name}: {f.name}")
        for sc in f.scenarios:
            console.print(f"    - {sc.name}  x{options.repeat}" + (f"  [{' '.join('@' + t for t in sc.tags)}]"
                                                                      if sc.tags else ""))
            for text in sc.steps:
                console.print(f"        {text}")
            reasons = needs.problems(needs.needs_of(sc.steps), profile, reference=reference)
            cannot += bool(reasons)
            for reason in reasons:
                console.print(f"      WOULD BE INCONCLUSIVE here: {reason}")
    total = sum(len(f.scenarios) for f in features)
    console.print(f"  {total - cannot} of {total} scenario(s) can run on this target" +
                  (f"; {cannot} would be INCONCLUSIVE before their first step (reasons above)" if cannot else ""))
    return cannot


def _connect(options: RunOptions, profile: TargetProfile,
             features: list[FeatureInfo]) -> Target | SlurmTarget | RayTarget:
    if not profile.on_kubernetes:
        refused = _batch_journals_refuse(profile, options, connected=True)
        if refused:
            raise LeftBroken(refused)
        return slurm_target(profile) if profile.on_slurm else ray_target(profile)
    if options.kubeconfig is not None or options.context is not None:
        access = AccessCheck(needed(features, profile), rbac_command(options.profile, options.features))
        return cluster_target(options.kubeconfig, options.context, profile, access,
                              recover_command=recover_command(options))
    return embedded_target(options.scheduler_profile, nodes=options.nodes, profile=profile, defects=options.defects,
                           real_gpus=options.real_gpus, node_prefix=options.node_prefix)


def batch_where(profile: TargetProfile) -> str:
    """The Slurm or Ray cluster a profile names, as the plan and the report say it."""
    if profile.ray is not None:
        return f"Ray cluster {profile.name} (dashboard {profile.ray.dashboard})"
    assert profile.slurm is not None
    conf = profile.slurm.conf or "the client's default slurm.conf"
    return f"Slurm cluster {profile.name} ({conf}), partition {profile.slurm.partition}"


def check_batch_options(options: RunOptions, profile: TargetProfile) -> None:
    """A Slurm or Ray profile names its cluster itself: the options that pick or shape a Kubernetes target are
    refused, each saying why."""
    given = [flag for flag, on in (("--kubeconfig", options.kubeconfig is not None),
                                   ("--context", options.context is not None), ("--defect", bool(options.defects)),
                                   ("--parallel", options.parallel > 1), ("--real-gpus", options.real_gpus),
                                   ("--namespace", bool(options.namespace))) if on]
    if given:
        which = ("a Ray cluster (platform: ray), the one its ray.dashboard names" if profile.on_ray else
                 "a Slurm cluster (platform: slurm), the one its slurm.conf names")
        raise FiredrillError(f"{', '.join(given)}: the profile drills {which}; these options pick or shape a "
                             "Kubernetes target (or the embedded platform): drop them")


def check_defects(options: RunOptions) -> tuple[str, ...]:
    """The defect names of ``--defect``, checked: each must be in the zoo, and only the embedded platform has
    them.  Raises :class:`FiredrillError` saying which names exist, or why a real cluster cannot have them."""
    from refplatform.defects import DefectError, parse_defects  # the zoo's names, nothing of the platform runs

    if not options.defects:
        return ()
    if options.kubeconfig is not None or options.context is not None:
        raise FiredrillError(f"--defect {' --defect '.join(options.defects)}: defects exist only on the reference "
                             "platform (docs/DEFECTS.md); drop --defect, or drop --kubeconfig/--context to run "
                             "the embedded platform")
    try:
        return tuple(sorted(d.value for d in parse_defects(options.defects)))
    except DefectError as exc:
        raise FiredrillError(f"--defect: {exc} (docs/DEFECTS.md)") from None


def run(options: RunOptions, console: Console | None = None) -> int:
    console = console or Console(highlight=False, soft_wrap=True, markup=False)
    err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
    try:
        features = load_features(options.features)
        signers = load_signers(options.features)
        profile = load_profile(options.profile) if options.profile else reference_profile()
        if options.namespace:
            if not valid_dns_label(options.namespace):
                raise FiredrillError(f"--namespace {options.namespace!r} is not a namespace name (a-z, 0-9, '-')")
            profile = dataclasses.replace(profile, namespace=options.namespace)
        if not profile.on_kubernetes:
            check_batch_options(options, profile)
        options = dataclasses.replace(options, defects=check_defects(options))
        if options.real_gpus and (options.kubeconfig is not None or options.context is not None):
            raise FiredrillError("--real-gpus: only the embedded reference platform simulates GPUs; a real "
                                 "cluster's GPUs are always its own (drop --real-gpus)")
        if options.parallel > 1 and (options.kubeconfig is not None or options.context is not None):
            raise FiredrillError("--parallel: pools are embedded node groups, so it runs on the embedded reference "
                                 "platform only for now; drop --parallel to drill a real cluster (docs/PARALLEL.md)")
        if options.parallel > 1 and options.real_gpus:
            raise FiredrillError("--parallel with --real-gpus: this machine's GPUs cannot be split between pools")
    except FeatureError as exc:
        for line in exc.lines():
            err.print(line)
        return ExitCode.USAGE
    except FiredrillError as exc:
        err.print(f"error: {exc}")
        return ExitCode.USAGE
    remote = options.kubeconfig is not None or options.context is not None
    if not profile.on_kubernetes and options.dry_run:
        refused = _batch_journals_refuse(profile, options)
        if refused:
            err.print(f"error: {refused}")
            return ExitCode.HARNESS
        cannot = _plan(console, features, batch_where(profile), profile, options)
        return ExitCode.INCONCLUSIVE if cannot else ExitCode.PASSED
    where = batch_where(profile) if not profile.on_kubernetes else (f"cluster from {options.kubeconfig or '$KUBECONFIG'}" + (f" (context {options.context})"
             if options.context else "")) if remote else \
        f"embedded reference platform ({options.nodes} nodes + 1 spare, {options.scheduler_profile} scheduler" + \
        (", this machine's real GPUs" if options.real_gpus else ", simulated GPUs") + \
        (f", {profile.flavor.value} flavor" if profile.flavor.value != "volcano" else "") + \
        (f", with defect(s) {', '.join(options.defects)})" if options.defects else ")")
    plan = None
    if options.parallel > 1:
        plan = parallel.make_plan(parallel.units_of(features, options.features,
                                                    parallel.past_seconds(options.reports), options.keyword),
                                  parallel.node_pools(options.parallel, options.nodes),
                                  head_start=parallel.head_start(options.parallel, os.cpu_count() or 1,
                                                                 held=niceness.can_hold()))
        where = (f"embedded reference platform, {options.parallel} node groups side by side ({options.nodes} nodes "
                 f"+ 1 spare each, {options.scheduler_profile} scheduler, simulated GPUs" +
                 (f", with defect(s) {', '.join(options.defects)})" if options.defects else ")"))
    if remote and options.dry_run:  # a real run checks once connected (_perform), where it can look at nodes
        refused = _journals_refuse(options, console)
        if refused:
            err.print(f"error: {refused}")
            return ExitCode.HARNESS
    if options.dry_run:
        cannot = _plan(console, features, where, profile, options)
        for line in parallel.plan_lines(plan) if plan is not None else []:
            console.print(line)
        return ExitCode.INCONCLUSIVE if cannot else ExitCode.PASSED
    try:
        signer = _signer(options, err) if options.part_out is None else Signer.generate_ephemeral()
    except FiredrillError as exc:
        err.print(f"error: {exc}")
        return ExitCode.USAGE
    run_id = new_run_id()
    run_dir = options.reports / run_id
    started = datetime.now(timezone.utc)
    live: LiveServer | None = None
    if options.live and plan is not None:
        console.print("Live view: off with --parallel (it follows one scenario at a time; each pool's progress "
                      "lines are printed, prefixed with the pool)")
    elif options.live:
        try:
            live = LiveServer(port=options.live_port).start()
        except LiveServerError as exc:
            err.print(f"error: {exc}")
            return ExitCode.USAGE
        console.print(f"Live view: {live.url} (loopback only; follow the run in a browser there, --no-live to "
                      "turn it off)")
        live.log.publish(RunStarted(run_id, where, rfc3339(started), str(run_dir)))
    ended = RunEnded(ExitCode.HARNESS, "the run was stopped before its end")
    try:
        if plan is not None:
            ended = _perform_parallel(options, console, err, plan, features=features, profile=profile, where=where,
                                      signer=signer, run_id=run_id, run_dir=run_dir, started=started)
        else:
            ended = _perform(options, console, err, features=features, profile=profile, where=where,
                             signer=signer, run_id=run_id, run_dir=run_dir, started=started, live=live)
        return ended.code
    finally:
        if live is not None:
            _end_live(live, ended, run_dir, options.live_linger, console)


def recover_command(options: RunOptions) -> str:
    """The ``firedrill recover`` line for this run's cluster."""
    words = ["firedrill", "recover"]
    if options.kubeconfig is not None:
        words += ["--kubeconfig", str(options.kubeconfig)]
    if options.context is not None:
        words += ["--context", options.context]
    if options.profile is not None:
        words += ["--profile", str(options.profile)]
    return " ".join(words)


def _journals_refuse(options: RunOptions, console: Console) -> str:
    """Why a dry run must not plan on its cluster (a dead run's faults still journaled open), or "".  It reads the
    journals alone; a real run checks once connected, where it can also look at the nodes (:func:`cluster_target`)."""
    try:
        server = KubeDriver.server_of(options.kubeconfig, options.context)
    except FiredrillError as exc:  # a dry run goes on without the cluster
        console.print(f"note: the fault journals of earlier runs were not checked: {exc}")
        return ""
    found = leftovers(server)
    return left_broken(found, recover_command(options)) if found else ""


def _batch_journals_refuse(profile: TargetProfile, options: RunOptions, *, connected: bool = False) -> str:
    """Why a run must not start on this Slurm or Ray cluster (a dead run's faults still journaled open), or "".  A
    run (``connected``) reads the nodes too: a fault that undid itself, or one a person undid, whose node serves
    again, is closed and no longer refuses; a dry run reads the journals alone."""
    if profile.on_ray:
        found = leftovers(ray_key(profile), serving=ray_serving_on(ray_driver(profile)) if connected else None)
        return left_broken(found, recover_command(options)) if found else ""
    found = leftovers(slurm_key(profile), serving=serving_on(slurm_driver(profile)) if connected else None)
    return left_broken(found, recover_command(options)) if found else ""


def _end_live(live: LiveServer, ended: RunEnded, run_dir: Path, linger: float, console: Console) -> None:
    """The live view's last event (the archive and how to verify it), its linger if asked, and its end."""
    try:
        live.log.publish(RunFinished(int(ended.code), ended.summary, str(run_dir) if ended.sealed else None,
                                     str(run_dir / "report.html") if ended.sealed else None,
                                     f"firedrill verify {run_dir}" if ended.sealed else None))
        if linger > 0:
            console.print(f"Live view: its final state stays up {linger:g} s more at {live.url} (Ctrl-C ends it now)")
            live.linger(linger)
    except KeyboardInterrupt:
        pass
    finally:
        live.close()


def _perform(options: RunOptions, console: Console, err: Console, *, features: list[FeatureInfo],
             profile: TargetProfile, where: str, signer: Signer, run_id: str, run_dir: Path, started: datetime,
             live: LiveServer | None) -> RunEnded:
    """Connect the target, run the scenarios, seal the evidence, print the verdicts."""
    console.print(f"Starting: {where}")
    try:
        target = _connect(options, profile, features)
    except FiredrillError as exc:
        err.print(f"error: {exc}")
        return RunEnded(ExitCode.HARNESS, f"the target could not be reached: {exc}")
    target.keep_measuring = options.keep_measuring
    try:  # every fault is written down before it is injected (docs/SAFETY.md)
        target.journal = FaultJournal.for_target(run_id, target.journal_key,
                                                 str(options.profile.resolve()) if options.profile else "")
    except FiredrillError as exc:
        target.close()
        err.print(f"error: {exc}")
        return RunEnded(ExitCode.HARNESS, f"the fault journal could not be opened: {exc}")
    console.print(f"Target: {target.description}")
    if target.access_checked is not None:
        console.print(f"  access: the identity holds every one of the {target.access_checked} permissions "
                      "the features need (SelfSubjectAccessReview; `firedrill rbac` lists them)")
    if target.fingerprint is not None:
        fp = target.fingerprint
        models = ", ".join(f"{m.capacity} x {m.product}" for m in fp.gpu_models) or "no GPUs found"
        console.print(f"  server {fp.server_version}, {fp.node_count} nodes, GPUs: {models}; fingerprint "
                      f"{fp.digest()[:16]}")
    for warning in target.warnings:
        console.print(f"  warning: {warning}")
    if target.defects:
        console.print(DEFECT_NOTE.format(defects=", ".join(target.defects)))
    publisher = None
    if live is not None:
        live.log.publish(TargetReady(target.description))
        publisher = LivePublisher(live.log, target, repeats=options.repeat).start()
    plugin = FiredrillPlugin(target, progress=console.print, repeat=options.repeat,
                             features_dir=options.features.resolve(), live=publisher, select=options.select,
                             first=options.first, hold=_wait_for_go if options.hold else None,
                             claims=options.claims)
    run_dir.mkdir(parents=True, exist_ok=False)
    args = [str(Path(__file__).parent / "test_contract.py"), "-c", os.devnull,
            "--rootdir", str(options.features.resolve()), *(x for p in CONTRACT_PLUGINS for x in ("-p", p)),
            "-p", "no:cacheprovider", "-p", "no:terminal", "--capture=no",
            f"--junitxml={run_dir / 'junit.xml'}", "-o", "junit_suite_name=firedrill", "-o", "junit_family=xunit2",
            f"--alluredir={run_dir / 'allure-results'}"]
    if options.keyword:
        args += ["-k", options.keyword]
    os.environ["FIREDRILL_FEATURES"] = str(options.features.resolve())
    sealed = False
    try:
        with _no_caller_pytest_options():
            code = pytest.main(args, plugins=[plugin])
        if code == pytest.ExitCode.INTERRUPTED and any(o.verdict is Verdict.ABORTED for o in plugin.outcomes):
            code = pytest.ExitCode.TESTS_FAILED  # the abort guard stopped the session: a verdict, no interruption
        if publisher is not None:
            publisher.close()
            if os.environ.get(LIVE_TEST_HOLD):
                console.print(f"{LIVE_TEST_HOLD} is set: waiting for a line on stdin before sealing (a test's hold)")
                sys.stdin.readline()
        if plugin.outcomes and code != pytest.ExitCode.INTERRUPTED and profile.on_kubernetes:
            leak = run_window_report(source_for(target.profile, target.driver), started.timestamp(),
                                     datetime.now(timezone.utc).timestamp())
        else:
            leak = None
        if options.part_out is not None:  # a --parallel worker: the run seals its outcomes with the others'
            _write_part(options, target, plugin, leak, run_dir)
            return RunEnded(exit_code(plugin.outcomes) if plugin.outcomes else ExitCode.HARNESS,
                            counts_line(plugin.outcomes))
        if plugin.outcomes:
            _evidence(options, console, err, run_id=run_id, run_dir=run_dir, started=started, plugin=plugin,
                      target=target, features=features, profile=profile, signer=signer, leak_report=leak)
            sealed = True
    except KeyboardInterrupt:
        err.print("interrupted: faults undone and drill objects deleted")
        return RunEnded(ExitCode.HARNESS, "interrupted: faults undone and drill objects deleted")
    except FiredrillError as exc:
        err.print(f"error: the run's evidence could not be sealed: {exc}")
        return RunEnded(ExitCode.HARNESS, f"the run's evidence could not be sealed: {exc}")
    finally:
        if publisher is not None:
            publisher.close()
        target.close()
        _end_journal(target, options, err)
    if code == pytest.ExitCode.INTERRUPTED:
        if plugin.outcomes:
            summary(console, plugin.outcomes, options.repeat)
        err.print("interrupted: every started drill was rolled back (faults undone, drill objects deleted)")
        return RunEnded(ExitCode.HARNESS, "interrupted: every started drill was rolled back", sealed)
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR):
        err.print(f"error: the harness could not run the scenarios (pytest exit {int(code)})")
        return RunEnded(ExitCode.HARNESS, f"the harness could not run the scenarios (pytest exit {int(code)})")
    if not plugin.outcomes:
        why = "no scenario ran" + (f" (nothing matched -k {options.keyword!r})" if options.keyword else "")
        err.print(f"error: {why}")
        return RunEnded(ExitCode.USAGE, why)
    summary(console, plugin.outcomes, options.repeat)
    if options.defects:
        console.print(DEFECT_NOTE.format(defects=", ".join(options.defects)))
    return RunEnded(exit_code(plugin.outcomes), counts_line(plugin.outcomes), sealed)


def _end_journal(target: Target, options: RunOptions, err: Console) -> None:
    """Close the run's fault journal; say what a failed undo left and how to finish it."""
    journal = target.journal
    if journal is None:
        return
    left = journal.unfinished
    journal.end()
    if left:
        err.print(f"warning: {len(left)} fault(s) of this run were not undone; they stay in {journal.path}:")
        for action in left:
            err.print(f"  - {action.what}: " + ("; ".join(u.describe() for u in action.undo) or "nothing to run"))
        if target.embedded is None:
            err.print(f"  finish with: {recover_command(options)}")


def _write_part(options: RunOptions, target: Target, plugin: FiredrillPlugin, leak: dict[str, Any] | None,
                run_dir: Path) -> None:
    """A worker's outcomes and what the archive needs of its pool, for the run that seals them (mode 0600: the
    pool's tokens are among them, so the run can check none reaches the archive)."""
    import pickle

    fp = target.fingerprint
    nodes = tuple(target.embedded.cluster.spec.all_node_names()) if target.embedded is not None and \
        target.embedded.cluster is not None else ()
    part = parallel.Part("", nodes, plugin.outcomes, [ob.to_json() for ob in target.timeline],
                         _public_description(target, options), fp.to_dict() if fp else {},
                         fp.digest() if fp else "", leak, target.secrets(), str(run_dir), target.defects,
                         _journal_text(target))
    assert options.part_out is not None
    partial = options.part_out.with_name(options.part_out.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        pickle.dump(part, out)
    os.replace(partial, options.part_out)  # whole or absent: the run reads it while this worker stops its platform
    sys.stdout.write(PART_WRITTEN + "\n")
    sys.stdout.flush()


def _journal_text(target: Target) -> str:
    """A worker's fault journal as it stands, for the run's archive ("" when it has none or it cannot be read)."""
    if target.journal is None:
        return ""
    try:
        return target.journal.path.read_text(encoding="utf-8")
    except OSError:
        return ""


def _perform_parallel(options: RunOptions, console: Console, err: Console, plan: parallel.Plan, *,
                      features: list[FeatureInfo], profile: TargetProfile, where: str, signer: Signer, run_id: str,
                      run_dir: Path, started: datetime) -> RunEnded:
    """Print the plan, run its waves (one worker per pool), merge the workers' outcomes into one archive."""
    import shutil
    import tempfile
    import threading

    for line in parallel.plan_lines(plan):
        console.print(line)
    lock = threading.Lock()

    def say(text: str) -> None:
        with lock:
            console.print(text)

    work = Path(tempfile.mkdtemp(prefix="firedrill-parallel-"))
    done: list[tuple[parallel.Worker, parallel.Part | None]] = []
    try:
        try:
            done = parallel.run_plan(plan, options, work, say)
        except KeyboardInterrupt:
            err.print("interrupted: every worker rolled back its drills (faults undone, drill objects deleted)")
            return RunEnded(ExitCode.HARNESS, "interrupted: every worker rolled back its drills")
        order = {u.key: i for i, u in enumerate(parallel.units_of(features, options.features))}
        outcomes, timeline = parallel.merge(done, plan, order)
        parts = [p for _, p in done if p is not None]
        if not outcomes:
            err.print("error: no scenario ran" + (f" (nothing matched -k {options.keyword!r})"
                                                 if options.keyword else ""))
            return RunEnded(ExitCode.USAGE, "no scenario ran")
        run_dir.mkdir(parents=True, exist_ok=False)
        parallel.merge_junit(parts, run_dir / "junit.xml")
        parallel.merge_allure(parts, run_dir / "allure-results")
        parallel.merge_journals(parts, run_dir / ARCHIVE_NAME)
        first = parts[0] if parts else None
        try:
            _seal(options, console, run_id=run_id, run_dir=run_dir, started=started, outcomes=outcomes,
                  embedded=True, description=where if first is None else
                  f"{first.description.split(' (', 1)[0]}, {len(plan.pools)} node groups side by side",
                  fingerprint=first.fingerprint if first else {},
                  fingerprint_digest=first.fingerprint_digest if first else "", timeline=timeline,
                  features=features, profile=profile, signer=signer, leak_report=parallel.leak_reports(parts),
                  defects=first.defects if first else options.defects,
                  secrets=[s for p in parts for s in p.secrets], extra={"parallel": options.parallel})
        except FiredrillError as exc:
            err.print(f"error: the run's evidence could not be sealed: {exc}")
            return RunEnded(ExitCode.HARNESS, f"the run's evidence could not be sealed: {exc}")
    finally:
        parallel.finish(w for w, _ in done)  # the workers stopped their platforms while the run sealed
        shutil.rmtree(work, ignore_errors=True)
    summary(console, outcomes, options.repeat)
    if options.defects:
        console.print(DEFECT_NOTE.format(defects=", ".join(options.defects)))
    return RunEnded(exit_code(outcomes), counts_line(outcomes), True)


def worker_main(spec_path: str) -> int:
    """A ``--parallel`` worker (:mod:`drills.bdd.parallel`): ``firedrill run`` of its share on its own pool, its
    outcomes written to ``options.part_out`` instead of an archive.  SIGTERM is taken as Ctrl-C: rollback first."""
    import pickle

    options = pickle.loads(Path(spec_path).read_bytes())
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    return int(run(options, Console(highlight=False, soft_wrap=True, markup=False, width=200)))


def _wait_for_go() -> None:
    """A held worker's wait: one line on its stdin (or its end: the run is gone, and its SIGINT follows)."""
    sys.stdin.readline()


def _signer(options: RunOptions, err: Console) -> Signer:
    """The run's signing key: --sign-key, else $FIREDRILL_SIGNING_KEY, else a throwaway key (said loudly)."""
    path = options.sign_key or (Path(os.environ["FIREDRILL_SIGNING_KEY"])
                                if os.environ.get("FIREDRILL_SIGNING_KEY") else None)
    if path is not None:
        return Signer.from_key_file(path)
    err.print("WARNING: no signing key (--sign-key or FIREDRILL_SIGNING_KEY): this run is signed with a THROWAWAY "
              "key made for it alone. The archive proves it was not altered, not who made it. Make a key with "
              "`firedrill keygen`.")
    return Signer.generate_ephemeral()


def _evidence(options: RunOptions, console: Console, err: Console, *, run_id: str, run_dir: Path,
              started: datetime, plugin: FiredrillPlugin, target: Target, features: list[FeatureInfo],
              profile: TargetProfile, signer: Signer, leak_report: dict[str, Any] | None = None,
              signers: tuple[ContractSigner, ...] = ()) -> None:
    """Build the run record, render the report, sign and seal the archive, chain it in the ledger."""
    fp = target.fingerprint
    if target.journal is not None:
        target.journal.archive(run_dir)  # what was injected, when, and when and how it was undone
    _seal(options, console, run_id=run_id, run_dir=run_dir, started=started, outcomes=plugin.outcomes,
          embedded=target.embedded is not None, description=_public_description(target, options),
          fingerprint=fp.to_dict() if fp else {}, fingerprint_digest=fp.digest() if fp else "",
          timeline=[ob.to_json() for ob in target.timeline], features=features, profile=profile, signer=signer,
          leak_report=leak_report, defects=target.defects, secrets=target.secrets(), signers=signers)


def _seal(options: RunOptions, console: Console, *, run_id: str, run_dir: Path, started: datetime,
          outcomes: list[ScenarioOutcome], embedded: bool, description: str, fingerprint: dict[str, Any],
          fingerprint_digest: str, timeline: list[dict[str, Any]], features: list[FeatureInfo],
          profile: TargetProfile, signer: Signer, leak_report: dict[str, Any] | None, defects: tuple[str, ...],
          secrets: list[str], signers: tuple[ContractSigner, ...] = (), extra: dict[str, Any] | None = None) -> None:
    """The record of a serial or a ``--parallel`` run, its report, the sealed and signed archive, the ledger."""
    record = build_record(
        run_id=run_id, started=started, finished=datetime.now(timezone.utc), outcomes=outcomes,
        target_kind="embedded" if embedded else "cluster", target_description=description,
        fingerprint=fingerprint, fingerprint_digest=fingerprint_digest, features_dir=options.features,
        feature_files=[f.path for f in features], profile=profile.to_dict(),
        options={"repeat": options.repeat, "keyword": options.keyword, "context": options.context,
                 "scheduler_profile": options.scheduler_profile if embedded else None,
                 "features": options.features.name, **(extra or {})},
        timeline=timeline, leak_report=leak_report, target_defects=defects,
        signers=[s.to_dict() for s in signers])
    (run_dir / "report.html").write_text(
        render_report(record, SignatureStatus(signer.keyid, signer.ephemeral, None)), encoding="utf-8")
    sealed = seal(run_dir, record, signer, options.reports / "ledger.jsonl", secrets=secrets)
    console.print(f"Evidence: {run_dir} ({len(sealed.files)} files, signed by {'a throwaway key' if sealed.ephemeral else 'key'} "
                  f"{sealed.keyid[:16]}, ledger {sealed.ledger_path}); report: {run_dir / 'report.html'}")
    console.print(f"Verify it with: firedrill verify {run_dir}")


def _public_description(target: Target, options: RunOptions) -> str:
    """The target as the evidence names it: no kubeconfig path, no server credentials."""
    if target.embedded is not None:
        return target.description.rsplit(" at ", 1)[0]
    if not target.profile.on_kubernetes:
        return target.description  # the cluster's name, its slurm.conf or dashboard: no credential
    return f"cluster{f' (context {options.context})' if options.context else ''} at {target.driver.host} " \
           f"({target.profile.flavor.value})"


def exit_code(outcomes: list[ScenarioOutcome]) -> int:
    if any(o.verdict is Verdict.ABORTED for o in outcomes):
        return ExitCode.ABORTED
    if any(o.verdict is None for o in outcomes):
        return ExitCode.HARNESS
    if any(o.verdict is Verdict.FAIL for o in outcomes):
        return ExitCode.FAILED
    if any(o.verdict is Verdict.INCONCLUSIVE for o in outcomes):
        return ExitCode.INCONCLUSIVE
    return ExitCode.PASSED


def summary(console: Console, outcomes: list[ScenarioOutcome], repeat: int) -> None:
    table = Table(title="Firedrill results", show_lines=False)
    for col in ("scenario", "verdict", "measured vs threshold"):
        table.add_column(col)
    for o in outcomes:
        verdict = o.verdict.value if o.verdict else "HARNESS ERROR"
        lines: list[str] = []
        if o.result is not None:
            lines += [j.message for j in o.result.judgements]
            lines += o.result.findings
        if o.error and (o.verdict is None or not lines):
            lines.append(o.error.splitlines()[0])
        table.add_row(f"{o.feature} > {o.scenario}", verdict, "\n".join(lines) or "-")
    console.print(table)
    if repeat > 1:
        _percentiles(console, outcomes)
    console.print(counts_line(outcomes))
    scored = [scored_from_record(scenario_record(o)) for o in outcomes]
    score = run_score(scored)
    if score is not None:
        console.print(f"resilience score: {score:.1f} / 100 ({explain_score(scored)}; a threshold with no "
                      "measured value counts as missed: docs/TRENDS.md)")


def counts_line(outcomes: list[ScenarioOutcome]) -> str:
    """``2 passed, 1 failed, 0 inconclusive, 0 harness errors``."""
    counts = {v: sum(1 for o in outcomes if o.verdict is v) for v in Verdict}
    errors = sum(1 for o in outcomes if o.verdict is None)
    aborted = f", {counts[Verdict.ABORTED]} ABORTED" if counts[Verdict.ABORTED] else ""
    return (f"{counts[Verdict.PASS]} passed, {counts[Verdict.FAIL]} failed, {counts[Verdict.INCONCLUSIVE]} "
            f"inconclusive, {errors} harness errors{aborted}")


def _percentiles(console: Console, outcomes: list[ScenarioOutcome]) -> None:
    series: dict[tuple[str, str], list[float]] = {}
    for o in outcomes:
        if o.result is None:
            continue
        for m in o.result.measurements.values():
            if m.value is not None:
                series.setdefault((o.scenario, f"{m.name} ({m.unit})"), []).append(m.value)
    table = Table(title="Repeated measurements")
    for col in ("scenario", "measurement", "n", "p50", "p95", "max"):
        table.add_column(col)
    for (scenario, name), values in sorted(series.items()):
        values.sort()
        p95 = values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]
        table.add_row(scenario, name, str(len(values)), f"{statistics.median(values):.3f}", f"{p95:.3f}",
                      f"{values[-1]:.3f}")
    console.print(table)


__all__: list[Any] = ["ExitCode", "RunOptions", "live_by_default", "run", "exit_code"]


@contextmanager
def _no_caller_pytest_options() -> Iterator[None]:
    """The contract's pytest session reads its options from this module alone, and loads only the plugins it names
    (:data:`CONTRACT_PLUGINS`).  A caller's ``PYTEST_ADDOPTS`` (a CI job's ``-x`` or random-order seed, meant for
    its own test suite) would stop or reorder the drills, or be refused by a session that does not load the plugin
    it names; so would its ``PYTEST_PLUGINS``.  Whatever other pytest plugins the machine has installed would load into the session too (here:
    anyio's, locust's, pytest-timeout's), each free to change it, and they cost every run, and every
    ``--parallel`` worker, about 0.5 s of CPU and more of waiting before its first scenario."""
    saved = {k: os.environ.pop(k, None) for k in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
