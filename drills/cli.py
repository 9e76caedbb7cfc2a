"""The ``firedrill`` command line.

Today it stands the reference platform up and down; the drills, evidence and
verification commands join it as they land.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from drills import __version__

console = Console(highlight=False, soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)

app = typer.Typer(
    name="firedrill",
    help="Chaos and acceptance drills for GPU clusters, with signed evidence.\n\n"
         "Start here: `firedrill run` performs the promises written in ./features against a reference GPU "
         "cluster it starts on this machine (or --kubeconfig and --profile for yours), and leaves a signed "
         "archive in ./reports that `firedrill verify` checks. `firedrill up` keeps a reference cluster "
         "running for kubectl and the kubernetes client.",
    no_args_is_help=True, add_completion=False, rich_markup_mode=None)

DEFAULT_DATA_DIR = Path(".firedrill/cluster")
PIDFILE = "firedrill-up.pid"


def _defects_epilog() -> str:
    """The defect zoo for ``--help``: one line per defect (``\b`` keeps click from re-wrapping them)."""
    from refplatform.defects import describe_defects  # the zoo's names only; nothing of the platform starts

    return ("\b\nThe defect zoo (--defect NAME, repeatable; what each breaks and the scenario that catches it: "
            "docs/DEFECTS.md):\n" + describe_defects())


def _check_defects(names: list[str] | None) -> tuple[str, ...]:
    """``--defect`` names checked against the zoo; a usage error (exit 2) naming the known ones otherwise."""
    from refplatform.defects import DefectError, parse_defects

    try:
        return tuple(sorted(d.value for d in parse_defects(names or [])))
    except DefectError as exc:
        err.print(f"error: --defect: {exc} (docs/DEFECTS.md)")
        raise typer.Exit(2) from None


REAL_GPUS_HELP = ("Report the GPUs NVML finds on this machine instead of simulating them. Without it every node "
                  "agent simulates its GPUs (--simulate-gpus), so the platform behaves the same on a machine "
                  "with a GPU as on one without.")
DEFECT_HELP = ("Start the reference platform with this defect from the defect zoo (repeatable): a small, honest "
               "fault the drills must catch. The names are listed below and in docs/DEFECTS.md.")


def _running_pid(data_dir: Path) -> int | None:
    """The pid of a live `firedrill up` on this data directory, if any."""
    try:
        pid = int((data_dir / PIDFILE).read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return pid
    return pid if b"firedrill" in cmdline or b"drills" in cmdline else None


@app.command(epilog=_defects_epilog())
def up(
    nodes: Annotated[int, typer.Option(min=0, max=64, help="How many GPU nodes (one agent process each).")] = 4,
    gpus_per_node: Annotated[int, typer.Option(min=0, max=16, help="Simulated GPUs per node (with --real-gpus: only where NVML "
                                                                "finds none).")] = 8,
    gpu_model: Annotated[str, typer.Option(help="Simulated GPU model: H100-80GB, H200, A100-80GB, A100-40GB.")] = "H100-80GB",
    data_dir: Annotated[Path, typer.Option(help="Where the cluster keeps its store, tokens, kubeconfig and logs. "
                                                "Restarting on the same directory keeps every object.")] = DEFAULT_DATA_DIR,
    port: Annotated[int, typer.Option(min=0, max=65535, help="API server port on 127.0.0.1 (0 = any free port).")] = 0,
    heartbeat: Annotated[float | None, typer.Option(
        min=0.1, help="Seconds between node lease renewals (default: the profile's, 1 s on tuned).")] = None,
    profile: Annotated[str, typer.Option(
        help="Healing profile: tuned (heartbeat 1 s, grace 3 s, evict at once, quarantine, 1 spare node) or "
             "k8s-defaults (lease renewed every 10 s, grace 50 s, toleration 300 s, no spares).")] = "tuned",
    spares: Annotated[int | None, typer.Option(
        min=0, max=16, help="Spare nodes beyond --nodes, kept out of use (tainted) until a node is lost "
                            "(default: the profile's).")] = None,
    scheduler_profile: Annotated[str, typer.Option(
        help="gang: all-or-nothing gang scheduling; no-gang: bind pods one by one (shows the half-job deadlock).")] = "gang",
    timeout: Annotated[float, typer.Option(help="Seconds to wait for every node to be Ready.")] = 60.0,
    defect: Annotated[list[str] | None, typer.Option("--defect", metavar="NAME", help=DEFECT_HELP)] = None,
    real_gpus: Annotated[bool, typer.Option("--real-gpus", help=REAL_GPUS_HELP)] = False,
) -> None:
    """Start a reference GPU cluster on this machine and keep it running until Ctrl-C or `firedrill down`."""
    from refplatform.cluster import Cluster, ClusterError, ClusterSpec  # the embedded default target

    data_dir = data_dir.resolve()
    other = _running_pid(data_dir)
    if other:
        err.print(f"error: a cluster is already running on {data_dir} (pid {other}); "
                  f"stop it with `firedrill down --data-dir {data_dir}` or pick another --data-dir")
        raise typer.Exit(2)
    if scheduler_profile not in ("gang", "no-gang"):
        err.print(f"error: --scheduler-profile must be gang or no-gang, not {scheduler_profile!r}")
        raise typer.Exit(2)
    from refplatform.profiles import PROFILES  # the embedded default target's settings
    if profile not in PROFILES:
        err.print(f"error: --profile must be one of {', '.join(PROFILES)}, not {profile!r}")
        raise typer.Exit(2)
    defects = _check_defects(defect)
    spare_count = PROFILES[profile].spares if spares is None else spares
    spec = ClusterSpec(data_dir, nodes=nodes, gpus_per_node=gpus_per_node, gpu_model=gpu_model,
                       port=port, heartbeat=heartbeat, scheduler_profile=scheduler_profile, profile=profile,
                       spares=spare_count, defects=defects, real_gpus=real_gpus)
    cluster = Cluster(spec)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with console.status("starting the API server...") as status:
            cluster.start_server()
            cluster.start_controllers()
            spares_text = f" and {spare_count} spare(s)" if spare_count else ""
            status.update(f"starting {nodes} node agents{spares_text}...")
            for name in spec.all_node_names():
                cluster.start_agent(name)
            deadline = time.monotonic() + timeout
            http = cluster.http_client()
            while (ready := cluster.readiness(http))[0] < nodes or ready[2] < spare_count:
                if time.monotonic() > deadline:
                    raise ClusterError(f"only {ready[0]} of {nodes} nodes became Ready and {ready[2]} of "
                                       f"{spare_count} spares joined the spare pool within {timeout:.0f}s; "
                                       f"see the logs in {data_dir / 'logs'}")
                if stop.wait(0.2):
                    raise KeyboardInterrupt
                status.update(f"waiting for nodes: {ready[0]}/{nodes} Ready, {ready[2]}/{spare_count} spares")
    except ClusterError as exc:
        cluster.stop()
        err.print(f"error: {exc}")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        cluster.stop()
        raise typer.Exit(130) from None
    (data_dir / PIDFILE).write_text(str(os.getpid()))
    ready, gpus, pool = cluster.readiness(http)
    http.close()
    spare_text = f", {pool} spare node{'s' if pool != 1 else ''}" if spare_count else ""
    gpu_text = "real, as NVML reports them" if real_gpus else f"simulated {gpu_model}"
    console.print(f"Reference cluster up: {ready} nodes Ready, {gpus} GPUs ({gpu_text}){spare_text}, "
                  f"profile {profile}, API at {cluster.url}")
    if defects:
        console.print(f"WITH DEFECT(S) {', '.join(defects)} from the defect zoo (docs/DEFECTS.md): this platform "
                      "breaks promises on purpose; drills against it must FAIL.")
    console.print(f"kubeconfig: {cluster.kubeconfig}")
    # No token is printed (terminals are logged and shared): the page asks for it, or reads #token=... .
    admin_token = data_dir / "admin-token"
    console.print(f"Dashboard: {cluster.url}/dashboard", soft_wrap=True, markup=False)
    console.print(f"  it asks for the cluster-admin token: paste the contents of {admin_token} "
                  f"(e.g. from `cat {admin_token}`), or append #token=<that token> to the address (the part after # "
                  "never leaves your browser)", soft_wrap=True, markup=False)
    console.print(f"  (your browser will warn about the cluster's own certificate authority, {cluster.ca_file}; "
                  "trust that file or accept the warning for this loopback address)\n", markup=False, soft_wrap=True)
    console.print("Use it from another terminal:")
    console.print(f"  export KUBECONFIG={cluster.kubeconfig}")
    console.print("  kubectl get nodes")
    console.print("  kubectl get pods -A -o wide\n")
    console.print(f"Logs: {data_dir / 'logs'}.  Stop with Ctrl-C or `firedrill down --data-dir {data_dir}`.")
    console.print(f"Pull a node from a run in another terminal: `firedrill node NODE kill --data-dir {data_dir}` "
                  "(docs/SAFETY.md, a cluster `firedrill up` runs).")
    desk = _oob_desk(cluster, data_dir)
    try:
        checked = time.monotonic()
        while not stop.wait(0.1):
            desk.poll()  # `firedrill node` requests, and faults whose expiry has come
            if time.monotonic() - checked < 1.0:
                continue
            checked = time.monotonic()
            dead = [p.name for p in [cluster.server, cluster.controller_manager, *cluster.agents.values()]
                    if p is not None and not p.alive()]
            if cluster.server is not None and not cluster.server.alive():
                err.print(f"the API server exited; see {cluster.server.log_path}")
                break
            if dead:
                err.print(f"warning: exited: {', '.join(dead)} (a pulled node stays down until restarted)")
                for name in list(cluster.agents):
                    if not cluster.agents[name].alive():
                        del cluster.agents[name]
    finally:
        console.print("stopping the cluster...")
        desk.undo_all()  # a frozen agent cannot stop
        cluster.stop()
        (data_dir / PIDFILE).unlink(missing_ok=True)
        console.print("stopped; objects are kept in the data directory")


@app.command()
def down(
    data_dir: Annotated[Path, typer.Option(help="The data directory given to `firedrill up`.")] = DEFAULT_DATA_DIR,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for a clean stop.")] = 30.0,
) -> None:
    """Stop the cluster that `firedrill up` is running on DATA_DIR."""
    data_dir = data_dir.resolve()
    pid = _running_pid(data_dir)
    if pid is None:
        err.print(f"no running cluster on {data_dir} (no live {PIDFILE} there)")
        raise typer.Exit(1)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _running_pid(data_dir) == pid:
        if time.monotonic() > deadline:
            err.print(f"the cluster (pid {pid}) did not stop within {timeout:.0f}s")
            raise typer.Exit(1)
        time.sleep(0.1)
    console.print(f"stopped the cluster on {data_dir}")


def _oob_desk(cluster: Any, data_dir: Path) -> Any:
    """The supervisor's out-of-band desk over the agents it started (drills.target.oob)."""
    from drills.target.faults import ReferenceFaults
    from drills.target.oob import Desk

    def restart(node: str) -> None:
        agent = cluster.agents.get(node)
        if agent is None or not agent.alive():
            cluster.start_agent(node)
    return Desk(data_dir, ReferenceFaults(lambda node: cluster.agents.get(node), restart), restart)


@app.command(name="node")
def node_command(
    name: Annotated[str, typer.Argument(metavar="NODE", help="The node, as `kubectl get nodes` names it.",
                                        show_default=False)],
    action: Annotated[str, typer.Argument(metavar="ACTION", help="kill (the agent and its pods die), hang (all of "
                                          "it frozen), partition (its heartbeats cut, its pods running) or restore "
                                          "(undo the node's fault; a killed node's agent starts again).",
                                          show_default=False)],
    expire_seconds: Annotated[float | None, typer.Option(min=0.001, help="The fault undoes itself this many seconds "
                                                         "later, done by `firedrill up` whatever becomes of the "
                                                         "caller (a profile's {expire_seconds}).")] = None,
    data_dir: Annotated[Path, typer.Option(help="The data directory given to `firedrill up`.")] = DEFAULT_DATA_DIR,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds to wait for `firedrill up` to answer.")] = 15.0,
) -> None:
    """Pull a node of the cluster `firedrill up` runs, or bring it back: that cluster's out-of-band control (its
    BMC), for a profile's fault.command_template and restore_template when a run drills it from another process.

    `firedrill up` started the node agents, so it is the one that signals them: this command leaves a request in
    its data directory and prints its answer. With --expire-seconds the fault is undone by `firedrill up` at that
    instant, even if the run that asked was killed (docs/SAFETY.md).

    \b
    Example profile lines (examples/embedded/up.yaml):
      command_template: firedrill node {node} kill --expire-seconds {expire_seconds} --data-dir .firedrill/cluster
      restore_template: firedrill node {node} restore --data-dir .firedrill/cluster

    Exit codes: 0 done, 1 refused or the fault did not take (printed), 2 bad input, 4 no `firedrill up` answered.
    """
    from drills.target.oob import OobAction, OobError, ask

    try:
        what = OobAction(action)
    except ValueError:
        err.print(f"error: ACTION must be one of {', '.join(a.value for a in OobAction)}, not {action!r}")
        raise typer.Exit(2) from None
    if what is OobAction.RESTORE and expire_seconds is not None:
        err.print("error: --expire-seconds is for a fault; restore acts at once")
        raise typer.Exit(2)
    data_dir = data_dir.resolve()
    try:
        answer = ask(data_dir, name, what, expire_seconds, timeout=timeout,
                     supervisor_alive=lambda: _running_pid(data_dir) is not None)
    except OobError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(4) from None
    (console if answer.ok else err).print(answer.detail)
    if not answer.ok:
        raise typer.Exit(1)


@app.command(epilog=_defects_epilog())
def run(
    features: Annotated[Path, typer.Option(help="Folder of .feature files: the contract to check.")] = Path("features"),
    kubeconfig: Annotated[Path | None, typer.Option(help="Drill a real cluster through this kubeconfig "
                                                       "(default: start the embedded reference platform).")] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context to use.")] = None,
    namespace: Annotated[str | None, typer.Option(help="Namespace for the drills' pods (overrides the profile's).")] = None,
    reports: Annotated[Path, typer.Option(help="Where run archives go: REPORTS/<run-id>/ and REPORTS/ledger.jsonl.")] = Path("reports"),
    sign_key: Annotated[Path | None, typer.Option(envvar="FIREDRILL_SIGNING_KEY", help="Ed25519 private key (PEM, "
                                                  "mode 0600) that signs the evidence; from `firedrill keygen`. Without it a "
                                                  "throwaway key is used and the run says so.")] = None,
    profile: Annotated[Path | None, typer.Option(help="Target profile YAML: flavor, queue, fault method, safety "
                                                    "(docs/PROFILE.md). Required for a real cluster.")] = None,
    repeat: Annotated[int, typer.Option(min=1, max=100, help="Run each scenario N times; report p50/p95.")] = 1,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check every sentence and value of the features (a "
                                          "mistake: file:line and what to write instead, exit 2) and print the "
                                          "plan, flagging each scenario that could not run on this target (with "
                                          "--profile: its flavor, fault stand-ins, images) and why (exit 3); "
                                          "start, connect to and touch nothing.")] = False,
    keyword: Annotated[str | None, typer.Option("-k", help="Only scenarios matching this pytest -k expression.")] = None,
    scheduler_profile: Annotated[str, typer.Option(help="Embedded platform only: gang or no-gang "
                                                        "(no-gang shows the half-job deadlock).")] = "gang",
    defect: Annotated[list[str] | None, typer.Option("--defect", metavar="NAME", help=(
        "Embedded platform only: s" + DEFECT_HELP[1:] + " A FAIL is then the expected verdict, and the evidence "
        "records the defects."))] = None,
    real_gpus: Annotated[bool, typer.Option("--real-gpus", help="Embedded platform only: " + REAL_GPUS_HELP[0].lower()
                                            + REAL_GPUS_HELP[1:])] = False,
    keep_measuring: Annotated[float, typer.Option(min=0, max=3600, help=(
        "Seconds a node-pull phase that missed its threshold is still waited for, so the evidence holds the "
        "value it took (acceptance day on a cluster with slow timers). Default 0: fail fast, a broken promise "
        "ends its scenario a quarter of the threshold after it (docs/INVARIANTS.md)."))] = 0.0,
    live: Annotated[bool | None, typer.Option("--live/--no-live", help=(
        "Serve a page on 127.0.0.1 that follows the run as it happens: each scenario's steps, the act's instant, "
        "each phase as it is measured against its threshold, report.html's charts filling in, the verdicts, and at "
        "the end the archive and the command that verifies it (docs/LIVE.md). The URL is printed. Default: on "
        "when the output is a terminal and $CI is unset, off otherwise."), show_default=False)] = None,
    live_port: Annotated[int, typer.Option(min=0, max=65535, help="The live view's port on 127.0.0.1 (0: any free "
                                                                  "port).")] = 0,
    live_linger: Annotated[float, typer.Option(min=0, max=3600, help=(
        "Seconds the live view stays up after the run ends, showing its final state (Ctrl-C ends it sooner). "
        "Default 0: it ends with the run (an open page keeps what it shows)."))] = 0.0,
    parallel: Annotated[int, typer.Option(min=1, max=16, help=(
        "Embedded platform only: run independent scenarios N at a time, each on a node pool of its own (an "
        "embedded node group: its own API server, controllers and nodes). The plan (waves, which scenario runs on "
        "which nodes, which run alone and why) is printed first; scenarios that measure the control plane run "
        "alone. One archive, as a serial run's (docs/PARALLEL.md). Default 1: one scenario after another."))] = 1,
) -> None:
    """Perform every scenario of the features against a platform, judge it, and print the verdicts.

    Exit codes: 0 all passed, 1 a promise was broken (FAIL), 2 bad input, 3 inconclusive, 4 harness error,
    5 ABORTED (a condition of the profile's safety.abort_when stopped the run: docs/SAFETY.md).
    """
    from drills.bdd.run import ExitCode, RunOptions, live_by_default, run as run_features

    if kubeconfig is not None and profile is None:
        err.print("error: a real cluster needs --profile FILE (flavor, queue, fault method, safety); "
                  "see docs/PROFILE.md and examples/")
        raise typer.Exit(ExitCode.USAGE)
    if scheduler_profile not in ("gang", "no-gang"):
        err.print(f"error: --scheduler-profile must be gang or no-gang, not {scheduler_profile!r}")
        raise typer.Exit(ExitCode.USAGE)
    if defect and (kubeconfig is not None or context is not None):
        err.print(f"error: --defect {' --defect '.join(defect)}: defects exist only on the reference platform "
                  "(docs/DEFECTS.md); drop --defect to drill your cluster, or drop --kubeconfig to run the "
                  "embedded reference platform with them")
        raise typer.Exit(ExitCode.USAGE)
    defects = _check_defects(defect)
    code = run_features(RunOptions(features, kubeconfig, context, profile, repeat, dry_run, keyword,
                                   scheduler_profile, namespace=namespace, reports=reports, sign_key=sign_key,
                                   defects=defects, real_gpus=real_gpus, keep_measuring=keep_measuring,
                                   live=live_by_default() if live is None else live, live_port=live_port,
                                   live_linger=live_linger, parallel=parallel), console)
    raise typer.Exit(int(code))


@app.command()
def recover(
    run_id: Annotated[str | None, typer.Argument(metavar="[RUN]", help="The run to recover (its id, as `firedrill "
                                                 "run` printed it). Default: every dead run's faults on this cluster.",
                                                 show_default=False)] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Every dead run's faults on this cluster (the default "
                                                         "without RUN).")] = False,
    kubeconfig: Annotated[Path | None, typer.Option(help="The cluster's kubeconfig (default: $KUBECONFIG or "
                                                         "~/.kube/config).")] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context to use.")] = None,
    profile: Annotated[Path | None, typer.Option(help="The target profile the runs used: its fault.timeout_seconds "
                                                      "bounds each restore command (default 120 s).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print each step that would be taken; run none.")] = False,
) -> None:
    """Undo what a run that died mid-drill left on a cluster: from its fault journal, and from the cluster itself.

    Every fault a run injects is written down before it is injected, with its exact undo (docs/SAFETY.md). A run
    that was killed (a CI timeout, an OOM, a lost runner) leaves those entries open, and the next `firedrill run`
    refuses the cluster until they are closed. This command runs each open entry's undo, newest first: the
    profile's restore command, the deletion of the privileged pod, the re-creation of a deleted Node. Then, unless
    RUN is named or a run against the cluster is still going here, it removes what only a Firedrill run leaves on
    the cluster itself, journal or not (a lost CI runner took its journal with it): pods labelled
    firedrill.dev/drill-run, the reference platform's Xid and throttle annotations, the straggler taint. Running
    it twice is harmless. A step only a person can take is printed with what to do, and stays open until its node
    is Ready and schedulable again.

    Exit codes: 0 nothing is left, 1 something still needs undoing (printed), 2 bad input, 4 the cluster could
    not be reached.
    """
    from drills.errors import FiredrillError
    from drills.kube.driver import KubeDriver, KubeError
    from drills.target.journal import journals_for, state_dir, target_key
    from drills.target.marks import cluster_marks
    from drills.target.profile import load_profile
    from drills.target.recover import recover as undo_all, sweep
    from drills.target.raytarget import ray_key
    from drills.target.slurmtarget import slurm_key

    if run_id is not None and all_runs:
        err.print("error: name one RUN or --all, not both")
        raise typer.Exit(2)
    try:
        loaded = load_profile(profile) if profile is not None else None
        timeout = loaded.fault.timeout_seconds if loaded is not None else 120.0
        on_slurm = loaded is not None and loaded.on_slurm
        on_ray = loaded is not None and loaded.on_ray
        server = slurm_key(loaded) if loaded is not None and on_slurm else ray_key(loaded) if loaded is not None \
            and on_ray else KubeDriver.server_of(kubeconfig, context)
        every = list(journals_for(server))
    except FiredrillError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(2) from None
    states = [s for s in every if s.unfinished and (run_id is None or s.run == run_id)]
    where = state_dir() / "journals" / target_key(server)
    cluster = server if on_slurm or on_ray else f"the cluster at {server}"
    if not states and run_id is not None:
        err.print(f"error: no open fault journal of run {run_id} for {cluster} (in {where})")
        raise typer.Exit(2)
    going = [s for s in every if s.running]
    for state in going:
        console.print(f"run {state.run} is still running (pid {state.pid}): it undoes its own faults when it "
                      "ends; not touched, and neither is what it made on the cluster")
    sweeping = run_id is None and not going  # a named run's faults alone, or a run still going: no sweep
    if on_slurm or on_ray:
        assert loaded is not None
        done, swept = _recover_batch(loaded, states, sweeping, dry_run, timeout)
        _recovery_said(done, swept, states, going, where, cluster, dry_run)
        return
    try:
        driver = KubeDriver.connect(kubeconfig, context)
    except FiredrillError as exc:
        err.print(f"error: {exc}" + (f"; the open faults stay in {where}" if states else ""))
        raise typer.Exit(4) from None
    try:
        done = undo_all(driver, states, dry_run=dry_run, timeout=timeout)
        swept = sweep(driver, cluster_marks(driver), dry_run=dry_run) if sweeping else []
    except KubeError as exc:
        err.print(f"error: the cluster at {server} answered {exc}; run `firedrill recover` again once it can be "
                  "read")
        raise typer.Exit(4) from None
    finally:
        driver.close()
    _recovery_said(done, swept, states, going, where, cluster, dry_run)


def _recover_batch(profile: Any, states: list[Any], sweeping: bool, dry_run: bool,
                   timeout: float) -> tuple[list[Any], list[Any]]:
    """A Slurm or Ray cluster's part of ``firedrill recover``: each dead run's restore commands from its journal,
    then (``sweeping``) the dead runs' drill jobs still on the cluster, cancelled or stopped; what was done of
    each."""
    from drills.ray.state import RayError
    from drills.slurm.state import SlurmError
    from drills.target.raytarget import ray_driver, ray_marks, ray_serving_on
    from drills.target.recover import recover as undo_all, sweep
    from drills.target.slurmtarget import serving_on, slurm_driver, slurm_marks

    name, connect, marks, serving = (("Slurm", slurm_driver, slurm_marks, serving_on) if profile.on_slurm else
                                     ("Ray", ray_driver, ray_marks, ray_serving_on))
    try:
        driver = connect(profile)
    except (SlurmError, RayError) as exc:
        err.print(f"error: {exc}" + ("; the open faults stay in their journals" if states else ""))
        raise typer.Exit(4) from None
    try:
        done = undo_all(None, states, dry_run=dry_run, timeout=timeout, serving=serving(driver))
        swept = sweep(None, marks(profile, driver), dry_run=dry_run, timeout=timeout) if sweeping else []
    except (SlurmError, RayError) as exc:
        err.print(f"error: the {name} cluster answered {exc}; run `firedrill recover` again once it can be read")
        raise typer.Exit(4) from None
    finally:
        driver.close()
    return done, swept


def _recovery_said(done: list[Any], swept: list[Any], states: list[Any], going: list[Any], where: Path, cluster: str,
                   dry_run: bool) -> None:
    """What recovery did, each step on its line; the journals settled; exit 1 while something is left."""
    from drills.target.recover import Outcome, settle

    for line in [d.line() for d in done] + [s.line() for s in swept]:
        console.print(line)
    if dry_run:
        return
    settle(states)
    left = [d for d in done if d.outcome is not Outcome.UNDONE] + [s for s in swept if s.outcome is not Outcome.UNDONE]
    if left or going:
        err.print(f"{len(left)} fault(s) still need undoing; run `firedrill recover` again once they are dealt "
                  f"with (journals: {where})")
        raise typer.Exit(1)
    if not done and not swept:
        console.print(f"Nothing to recover: no run left a fault open on {cluster} (journals: {where}), and nothing "
                      "a run leaves is on it")
        return
    console.print(f"Recovered: every fault the dead runs left on {cluster} is undone")


@app.command()
def rbac(
    profile: Annotated[Path, typer.Option(help="Target profile YAML (docs/PROFILE.md): its flavor, namespace and "
                                               "fault method decide what the drills touch.")],
    features: Annotated[Path, typer.Option(help="Folder of .feature files you will run: only their drills' "
                                                "permissions are printed.")] = Path("features"),
    subject: Annotated[str | None, typer.Option(help="Who is granted them: serviceaccount:NAMESPACE:NAME or "
                                                     "user:NAME (default: serviceaccount:<profile namespace>:"
                                                     "firedrill).")] = None,
    namespace: Annotated[str | None, typer.Option(help="The drills' namespace (overrides the profile's, as "
                                                       "`firedrill run --namespace` does).")] = None,
) -> None:
    """Print the least-privilege Role, ClusterRole and bindings the features need on your cluster.

    Every `firedrill run --kubeconfig` checks the same permissions (SelfSubjectAccessReview, as `kubectl auth
    can-i`) before it creates anything, and refuses naming the missing ones. Apply the output with
    `kubectl apply -f -` as a cluster admin (docs/REAL_CLUSTERS.md, step 4).
    Exit codes: 0 printed, 2 bad profile, features or subject.
    """
    import dataclasses

    from drills.bdd.features import FeatureError, load_features
    from drills.bdd.rbac import default_subject, needed, render
    from drills.errors import FiredrillError
    from drills.target.access import Subject
    from drills.target.profile import load_profile

    try:
        loaded = load_profile(profile)
        if namespace:
            loaded = dataclasses.replace(loaded, namespace=namespace)
        infos = load_features(features)
        who = Subject.parse(subject) if subject else default_subject(loaded)
    except FeatureError as exc:
        for line in exc.lines("the features cannot be read"):
            err.print(line)
        raise typer.Exit(2) from None
    except FiredrillError as exc:  # a bad profile or subject: the message lists each problem
        err.print(f"error: {exc}")
        raise typer.Exit(2) from None
    console.print(render(needed(infos, loaded), who, source=f"profile {profile.name}, features {features}"), end="")


@app.command()
def steps(
    markdown: Annotated[bool, typer.Option("--markdown", help="Print docs/STEPS.md (the vocabulary as Markdown).")] = False,
) -> None:
    """List every step sentence a feature file may use."""
    from drills.bdd import steps as _registered  # noqa: F401 - registers the vocabulary
    from drills.scenario.vocabulary import VOCABULARY, markdown as render

    if markdown:
        console.print(render(), end="")
        return
    for d in VOCABULARY:
        console.print(f"{d.keyword:5} {d.readable}")


@app.command()
def queues(
    profile: Annotated[Path, typer.Option(help="Target profile YAML: its flavor, queue, namespace and gpu_resource "
                                               "name the objects (docs/PROFILE.md).")],
    features: Annotated[Path, typer.Option(help="Folder of .feature files whose scenarios size the GPU quota: the "
                                                "largest free capacity a scenario asks for ('at least 4 schedulable "
                                                "GPU nodes with 8 free GPUs each' is 32), else its largest "
                                                "workload.")] = Path("features"),
    gpus: Annotated[int | None, typer.Option(min=1, help="GPU quota to write instead of the one the features "
                                                         "size. Above the cluster's free GPUs, Kueue admits gangs "
                                                         "that then wait for nodes holding GPUs "
                                                         "(docs/QUEUES.md).")] = None,
    apply: Annotated[bool, typer.Option("--apply", help="Also create the objects in the cluster of --kubeconfig; "
                                        "one that exists already is left as it is and reported "
                                        "'unchanged (exists)'.")] = False,
    kubeconfig: Annotated[Path | None, typer.Option(help="The cluster --apply creates the objects in.")] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context to use with --apply.")] = None,
) -> None:
    """Print the queue objects the features need for the profile's flavor, as YAML (Kueue ResourceFlavor,
    ClusterQueue and LocalQueue; a Volcano Queue; KAI queues; none for native), with the GPU quota sized from
    the scenarios (docs/QUEUES.md).

    Exit codes: 0 printed (and applied), 1 the cluster refused an object, 2 bad input, 4 cluster unreachable.
    """
    from drills.bdd.queues import QueuesExit, QueuesOptions, run_queues

    if apply and kubeconfig is None:
        err.print("error: --apply needs --kubeconfig FILE, the cluster to create the queue objects in; without "
                  "--apply the objects are only printed (pipe them to `kubectl apply -f -`)")
        raise typer.Exit(QueuesExit.USAGE)
    if not apply and (kubeconfig is not None or context is not None):
        err.print("error: --kubeconfig and --context are used only with --apply; add --apply to create the "
                  "objects, or drop them to print the objects only")
        raise typer.Exit(QueuesExit.USAGE)
    raise typer.Exit(int(run_queues(QueuesOptions(profile, features, gpus, apply, kubeconfig, context),
                                    console, err)))


@app.command()
def keygen(
    out: Annotated[Path, typer.Option(help="Directory for firedrill-signing.key (private, mode 0600) and "
                                           "firedrill-signing.pub (public).")] = Path(".firedrill/keys"),
) -> None:
    """Make an Ed25519 key pair for signing run archives; refuses to overwrite an existing key."""
    from drills.records.evidence.errors import EvidenceError
    from drills.records.evidence.signing import generate_keypair, keyid_of, load_public_key

    try:
        private, public = generate_keypair(out)
        keyid = keyid_of(load_public_key(public))
    except EvidenceError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(1) from None
    console.print(f"private key: {private} (mode 0600; keep it secret, never commit it)")
    console.print(f"public key:  {public} (publish it; verifiers run `firedrill verify RUN --key {public}`)")
    console.print(f"keyid:       {keyid} (SHA-256 of the DER SubjectPublicKeyInfo)")


@app.command()
def verify(
    run: Annotated[Path, typer.Argument(help="A run directory (reports/<run-id>) or its .tar.gz, or a "
                                             "conformance submission folder (firedrill conformance).")],
    key: Annotated[Path | None, typer.Option(help="The signer's public key (firedrill-signing.pub): also proves "
                                                   "who sealed it. Default: the archive's own public-key.pem, "
                                                   "which proves integrity only.")] = None,
    ledger: Annotated[Path | None, typer.Option(help="The ledger (reports/ledger.jsonl): also check the run's "
                                                      "line and the whole chain.")] = None,
    signer: Annotated[list[Path] | None, typer.Option(
        "--signer", help="A public key that must have signed the run (repeat it: --signer vendor.pub --signer "
                         "customer.pub); a missing or wrong signature is named.")] = None,
) -> None:
    """Check an archive's signatures, file digests and sizes and, with --ledger, the ledger chain.

    With --signer (once per party), every named key must have signed the manifest, as `firedrill witness`
    adds a second party's signature.

    Exit codes: 0 verified, 1 does not verify, 2 cannot read (missing path, not an archive, bad key or ledger file).
    """
    from drills.records.evidence.errors import VerifyReadError
    from drills.records.evidence.verify import verify as verify_archive

    try:
        report = verify_archive(run, key, ledger, tuple(signer or ()))
    except VerifyReadError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(2) from None
    for line in report.lines():
        console.print(line)
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def witness(
    run: Annotated[Path, typer.Argument(help="A sealed run directory (reports/<run-id>).")],
    key: Annotated[Path, typer.Option(help="Your private signing key (from `firedrill keygen`).")],
    vendor_key: Annotated[Path | None, typer.Option(help="The sealer's published public key: checked before you "
                                                          "sign, so you know whose run you countersign.")] = None,
) -> None:
    """Countersign a sealed run as a second party (the customer on acceptance day).

    Checks that the run verifies (with --vendor-key, that the vendor sealed it), then adds your signature to
    its signed manifest, which lists the digest of every file and statement. Nothing else changes, so the
    vendor's signatures and the ledger stay valid. Then anyone can demand both:
    `firedrill verify RUN --signer vendor.pub --signer customer.pub`.

    Exit codes: 0 signed, 1 the run does not verify or this key signed it already, 2 cannot read the key.
    """
    from drills.records.evidence.errors import KeyFileError
    from drills.records.evidence.signing import Signer
    from drills.records.evidence.witness import WitnessError
    from drills.records.evidence.witness import witness as countersign

    try:
        signer = Signer.from_key_file(key)
    except KeyFileError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(2) from None
    try:
        done = countersign(run, signer, vendor_key)
    except KeyFileError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(2) from None
    except WitnessError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(1) from None
    checked = "the vendor's key checked" if done.vendor_checked else \
        "integrity checked with the archive's own key; pass --vendor-key to check who sealed it"
    console.print(f"witnessed run {done.run_id} (verdict {done.verdict or 'unknown'}; {checked}): "
                  f"signed by keyid {done.keyid[:16]}…, {done.signatures} signatures on the manifest")
    console.print(f"check both: firedrill verify {run} --signer VENDOR.pub --signer YOUR.pub")


@app.command()
def archive(
    run: Annotated[Path, typer.Argument(help="A sealed run directory (reports/<run-id>).")],
    out: Annotated[Path | None, typer.Option(help="Where to write <run-id>.tar.gz (default: beside RUN).")] = None,
) -> None:
    """Pack a sealed run directory as <run-id>.tar.gz (deterministic, relative paths) after verifying it.

    Exit codes: 0 packed and verified, 1 the run does not verify (nothing packed), 2 cannot read RUN.
    """
    from drills.records.evidence.archive import make_tarball
    from drills.records.evidence.errors import EvidenceError, VerifyReadError
    from drills.records.evidence.verify import verify as verify_archive

    try:
        report = verify_archive(run)
    except VerifyReadError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(2) from None
    if not report.ok:
        for line in report.lines():
            err.print(line)
        err.print(f"error: {run} does not verify; not packing it")
        raise typer.Exit(1)
    try:
        tarball = make_tarball(run, out)
        packed = verify_archive(tarball)
    except EvidenceError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(2) from None
    console.print(f"wrote {tarball}: {packed.summary()}")
    raise typer.Exit(0 if packed.ok else 1)


@app.command()
def report(
    run: Annotated[str, typer.Argument(help="A run archive folder (reports/<run-id>) or a run id under --reports-dir.")],
    reports_dir: Annotated[Path, typer.Option(help="Where run archives live.")] = Path("reports"),
    output: Annotated[Path | None, typer.Option(help="Write the HTML here instead of the archive's report.html.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite a report.html that a sealed archive's manifest "
                                                        "records, even though `firedrill verify` will then "
                                                        "report the archive as altered.")] = False,
) -> None:
    """Re-render report.html from an archive's record.json (and signer.json, if present).

    Exit codes: 0 written (or already identical), 2 cannot read the archive or refused to overwrite.
    """
    from drills.records.evidence.report import ReportError, find_archive, write_report

    try:
        path, changed = write_report(find_archive(run, reports_dir), output, force=force)
    except ReportError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(2) from None
    console.print(f"{'wrote' if changed else 'unchanged:'} {path}")


@app.command(epilog=_defects_epilog())
def baseline(
    window: Annotated[str, typer.Option(help="How long to observe, e.g. '10 minutes', '24 hours', '60 s'. The run "
                                             "it is compared with must observe exactly as long.")] = "10 minutes",
    slices: Annotated[int, typer.Option(min=2, max=10_000, help="Cut the window into N equal slices; their "
                                        "variation gives the uncertainty (batch means). 10 or more; each slice "
                                        "many training steps long.")] = 10,
    warmup: Annotated[str, typer.Option(help="With a workload mix: how long it runs before the window opens.")] = "5 s",
    mix: Annotated[Path | None, typer.Option(help="Workload mix YAML the harness runs during the window "
                                                  "(docs/CONTRACTS.md); default on the embedded platform: the "
                                                  "built-in mix.")] = None,
    workload: Annotated[str | None, typer.Option(help="A real cluster's own workload, in words (e.g. 'production "
                                                      "training queues, a weekday'): recorded in the method.")] = None,
    profile: Annotated[Path | None, typer.Option(help="Target profile YAML of a real cluster: its leakReport.url or "
                                                      "prometheus.url (docs/PROFILE.md), as `firedrill run` takes "
                                                      "it.")] = None,
    kubeconfig: Annotated[Path | None, typer.Option(help="A real cluster's kubeconfig (needed to read the leak "
                                                         "report from its API server, or to run --mix).")] = None,
    context: Annotated[str | None, typer.Option(help="Kubeconfig context to use.")] = None,
    namespace: Annotated[str | None, typer.Option(help="Namespace for the mix's pods (overrides the profile's).")] = None,
    start: Annotated[str | None, typer.Option(help="Real cluster, no --mix: observe the window that started at this "
                                                   "RFC 3339 instant (the source must keep history, as "
                                                   "Prometheus does).")] = None,
    out: Annotated[Path | None, typer.Option(help="Where to write the signed statement (default "
                                                  "reports/baselines/baseline-<UTC time>.dsse.json); never "
                                                  "overwritten.")] = None,
    sign_key: Annotated[Path | None, typer.Option(envvar="FIREDRILL_SIGNING_KEY", help="Ed25519 private key (PEM, "
                                                  "mode 0600) from `firedrill keygen`; without it a throwaway key "
                                                  "signs and the command says so.")] = None,
    scheduler_profile: Annotated[str, typer.Option(help="Embedded platform only: gang or no-gang.")] = "gang",
    defect: Annotated[list[str] | None, typer.Option("--defect", metavar="NAME", help=(
        "Embedded platform only: s" + DEFECT_HELP[1:]))] = None,
) -> None:
    """Observe a cluster for a window and seal its utilization layers and holes, with the method, as a signed
    baseline statement (docs/CONTRACTS.md).

    Exit codes: 0 sealed, 2 bad input, 3 the window could not be observed, 4 the harness could not run.
    """
    from drills.kinds.baseline.command import BaselineExit, BaselineOptions, parse_span, take_baseline
    from drills.kinds.baseline.errors import BaselineUsageError

    try:
        seconds, warm = parse_span(window, "--window"), parse_span(warmup, "--warmup", zero=True)
    except BaselineUsageError as exc:
        err.print(f"error: {exc}")
        raise typer.Exit(BaselineExit.USAGE) from None
    if scheduler_profile not in ("gang", "no-gang"):
        err.print(f"error: --scheduler-profile must be gang or no-gang, not {scheduler_profile!r}")
        raise typer.Exit(BaselineExit.USAGE)
    options = BaselineOptions(window=seconds, slices=slices, warmup=warm, out=out, mix=mix, workload=workload,
                              profile=profile, kubeconfig=kubeconfig, context=context, start=start,
                              sign_key=sign_key, scheduler_profile=scheduler_profile,
                              defects=_check_defects(defect), namespace=namespace)
    raise typer.Exit(int(take_baseline(options, console, err)))


@app.command()
def compare(
    baseline: Annotated[Path, typer.Argument(help="The signed baseline statement (from `firedrill baseline`).")],
    run: Annotated[Path, typer.Argument(help="A second baseline statement, or a run archive (reports/<run-id>).")],
    clause: Annotated[list[str] | None, typer.Option("--clause", help=(
        "A contract sentence to judge (repeatable): '<allocated|active|effective> utilization improves by at least "
        "N points over the signed baseline' or 'the <hole> hole shrinks by at least N GPU-hours over the signed "
        "baseline'. PASS only if the improvement minus its uncertainty clears N."))] = None,
    key: Annotated[Path | None, typer.Option(help="The signer's public key: also proves who signed both. Default: "
                                                  "each file's own key (integrity only).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Verify both signatures, refuse different methods, and report the change per layer and hole with its
    uncertainty (docs/CONTRACTS.md).

    Exit codes: 0 compared (every clause PASSed), 1 a clause FAILed, 2 bad input, 3 a clause INCONCLUSIVE,
    4 refused: different methods, 5 refused: a signature or digest does not verify.
    """
    from drills.kinds.baseline.command import run_compare

    raise typer.Exit(int(run_compare(baseline, run, clause or [], key, as_json, console, err)))


@app.command()
def conformance(
    run: Annotated[Path, typer.Argument(help="A sealed run archive folder (reports/<run-id>); it must verify.")],
    out: Annotated[Path, typer.Argument(help="The submission folder to write, new or empty, named for the product "
                                             "as the program's v<X.Y>/<dir>/ (e.g. submission/v1.37/acme-gpu).")],
    version: Annotated[str, typer.Option("--version", help="The program's checklist to fill, e.g. v1.37.")] = "v1.37",
    metadata: Annotated[Path | None, typer.Option(help="YAML mapping of PRODUCT.yaml's metadata (vendorName, "
                                                       "platformName, ...); placeholders where absent.")] = None,
    key: Annotated[Path | None, typer.Option(help="The run signer's public key: RUN must be sealed by it.")] = None,
    ledger: Annotated[Path | None, typer.Option(help="The ledger (reports/ledger.jsonl): RUN must be in an intact "
                                                      "chain.")] = None,
    sign_key: Annotated[Path | None, typer.Option(envvar="FIREDRILL_SIGNING_KEY", help="Ed25519 private key (PEM, "
                                                  "mode 0600) that signs the folder's manifest; without it a "
                                                  "throwaway key is used and the command says so.")] = None,
) -> None:
    """Write a CNCF Kubernetes AI Conformance submission folder (PRODUCT.yaml, junit.xml, e2e.log, results.json,
    signed manifest) from a verified run's @conformance:<id> scenarios (docs/CONFORMANCE.md).

    Exit codes: 0 written, 1 RUN does not verify (nothing written), 2 bad input (unknown --version, RUN not a run
    archive, OUT not empty, bad metadata).
    """
    from drills.records.evidence.submission import run_conformance

    raise typer.Exit(int(run_conformance(run, out, version, metadata, key, ledger, sign_key, console, err)))


@app.command()
def trend(
    reports_dir: Annotated[Path, typer.Argument(help="The reports folder: its ledger.jsonl and the archives it names "
                                                     "(<run-id>/ or <run-id>.tar.gz).")] = Path("reports"),
    since: Annotated[str | None, typer.Option(help="Only runs sealed at or after this date or time "
                                                   "(2026-11-01, 2026-11-01T00:00:00Z) or this long ago "
                                                   "('14 days', '36 hours').")] = None,
    baseline_nights: Annotated[int, typer.Option(min=3, max=1000, help="N: the last run(s) are judged against "
                                                 "the N runs before them (at least 3 with a value).")] = 7,
    last: Annotated[int, typer.Option(min=1, max=100, help="K: judge the last K runs; a measure regressed when "
                                                           "each of them is worse.")] = 1,
    html: Annotated[Path | None, typer.Option(help="Where to write the trend page (default REPORTS_DIR/trend.html)."
                                              )] = None,
    key: Annotated[Path | None, typer.Option(help="The signer's public key (firedrill-signing.pub): every archive "
                                                  "must be signed by it. Default: each archive's own key "
                                                  "(integrity only).")] = None,
) -> None:
    """Follow every scenario's measures across the runs of a ledger: verify each archive, print a table per
    scenario, write a self-contained HTML page with one chart per measure, and flag regressions (the last run
    worse than the N before beyond their noise) and flaky scenarios (a verdict flipping at one platform
    fingerprint). The rules and the resilience score: docs/TRENDS.md.

    Exit codes: 0 no regression and nothing flaky (or too little history), 2 bad input, 5 an archive or the
    ledger does not verify (left out), 6 REGRESSED, 7 FLAKY (no regression). When several hold, the first of
    2, 5, 6, 7.
    """
    from drills.records.trend import TrendOptions, run_trend

    raise typer.Exit(int(run_trend(TrendOptions(reports_dir, since, baseline_nights, last, html, key), console, err)))


@app.command()
def version() -> None:
    """Print Firedrill's version."""
    console.print(f"firedrill {__version__}")


def main() -> None:
    app()
