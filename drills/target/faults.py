"""Fault methods: how a node is pulled, how the pull is confirmed, and how it is undone.

On the embedded reference platform a node is an OS process the harness
started (its agent, in its own process group with the pods it runs as child
processes), so the faults are real signals: ``kill`` (SIGKILL to the group:
the node and its pods die), ``hang`` (SIGSTOP to the group: all of it freezes;
SIGCONT thaws it) and ``partition`` (SIGUSR1 to the agent alone: heartbeats
stop, pods keep running; SIGUSR2 heals).  On a real cluster: ``kubelet-stop`` (a privileged
pod on the node stops the kubelet through ``nsenter``), ``delete-node`` (for
KWOK-style nodes) and ``command`` (a user template such as a cloud or IPMI CLI
with ``{node}``).

Every injector returns a :class:`FaultRecord` whose ``confirmed`` says whether
the fault took effect; a drill treats an unconfirmed fault as INCONCLUSIVE.
On a real cluster neither the privileged pod (it cannot report Succeeded once
the kubelet is stopped) nor the command's exit code (a BMC that accepted a
request) is taken as the confirmation: ``kubelet-stop`` and ``command`` are
confirmed by the node itself, its Lease no longer renewed or its Ready
condition leaving True, within ``fault.timeout_seconds``
(:mod:`drills.target.confirm` has the rule).
"""

from __future__ import annotations

import logging
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from drills.errors import FiredrillError
from drills.kube.timeline import SystemClock
from drills.target.access import CLUSTER, Permission, grant
from drills.target.confirm import NodeConfirmation, NodeDownWatch
from drills.target.journal import FaultJournal, Undo, UndoKind, process_start
from drills.target.profile import FaultMethod, FaultSettings, TargetProfile


log = logging.getLogger(__name__)


class FaultError(FiredrillError):
    """A fault could not be injected or undone; the message says which node and why."""


@dataclass
class FaultRecord:
    node: str
    method: FaultMethod
    confirmed: bool
    detail: str = ""
    undo: Callable[[], None] | None = field(default=None, repr=False)
    confirmation: NodeConfirmation | None = None
    """Real clusters: what the node's Lease and Ready condition showed after the fault (the confirmation)."""
    acted_at: float | None = None
    """Real clusters: the harness's monotonic instant the fault action returned (before it was confirmed)."""
    journal_id: str = ""
    """The fault journal's intent for this fault (:mod:`drills.target.journal`), closed when it is undone."""


@dataclass(kw_only=True)
class FaultRecords:
    """The faults a target injected and has not undone yet, and the journal each one's undo is closed in: what the
    Kubernetes target and the Slurm target share of a fault's life after its injection."""

    faults_done: list[FaultRecord] = field(default_factory=list)
    journal: FaultJournal | None = None
    """Where every fault is written down before it is injected and closed when it is undone (``firedrill run``
    opens one per run; :mod:`drills.target.journal`); None: faults are not journaled."""

    def restore(self, record: FaultRecord) -> None:
        """Undo one fault now (before the rollback); raises what its undo raises."""
        if record in self.faults_done:
            self.faults_done.remove(record)
        if record.undo is not None:
            record.undo()
            self._undone(record, "undone by the run")

    def restore_all(self, how: str = "undone by the run's rollback") -> None:
        """Undo every fault (popped newest first); a fault with no undo stays for a person (its journal entry says
        what to do); never raises."""
        while self.faults_done:
            record = self.faults_done.pop()
            if record.undo is None:
                continue
            try:
                record.undo()
            except Exception as exc:  # noqa: BLE001 - rollback must try every fault
                log.warning("could not undo %s on %s: %s", record.method.value, record.node, exc)
            else:
                self._undone(record, how)

    def _undone(self, record: FaultRecord, how: str) -> None:
        if self.journal is not None and record.journal_id:
            self.journal.close(record.journal_id, how)


class Intend(Protocol):
    """Writes down, durably, a fault about to be injected: ``(what, node, method, undo, expires_in=None) -> intent
    id`` (:meth:`drills.target.journal.FaultJournal.intend_fault`, through the target); called just before the
    action.  ``expires_in``: the fault undoes itself on the target's side after that many seconds."""

    def __call__(self, what: str, node: str, method: FaultMethod, undo: tuple[Undo, ...],
                 expires_in: float | None = None) -> str: ...


def no_journal(what: str, node: str, method: FaultMethod, undo: tuple[Undo, ...],
               expires_in: float | None = None) -> str:
    """An :data:`Intend` that writes nothing (a fault injected outside a run: tests, ``firedrill up`` tooling)."""
    return ""


class NodeProcess(Protocol):
    """What the embedded platform exposes about a node agent it started."""

    def alive(self) -> bool: ...

    def signal(self, sig: int) -> None: ...

    def signal_group(self, sig: int) -> None: ...

    def kill(self) -> None: ...

    @property
    def pid(self) -> int: ...


def _process_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


CONTROL_PLANE = "control-plane"
"""The name a fault on the control plane itself is recorded under (its records' ``node``)."""


class ReferenceFaults:
    """Faults on the embedded platform: signals to agent processes this harness started."""

    def __init__(self, agents: Callable[[str], NodeProcess | None], restart: Callable[[str], None],
                 control_plane: Callable[[], list[NodeProcess]] | None = None, intend: Intend = no_journal) -> None:
        self._agents = agents
        self._restart = restart
        self._control_plane = control_plane
        self.intend = intend

    def hang_control_plane(self) -> FaultRecord:
        """SIGSTOP the API server's process group (this harness started it): the control plane is unreachable for
        the nodes and for the controllers, which keep running on what they saw last (as when etcd or the API
        server is down); every node and pod lives on.  SIGCONT undoes it."""
        procs = [p for p in (self._control_plane() if self._control_plane is not None else []) if p.alive()]
        if not procs:
            raise FaultError("the embedded platform's API server is not running as a process this harness started; "
                             "cannot stop the control plane")
        what = "SIGSTOP process groups " + ", ".join(str(p.pid) for p in procs)
        intent = self.intend(f"hang the control plane: {what}", CONTROL_PLANE, FaultMethod.HANG,
                             (_signal_undo(procs, signal.SIGCONT),))
        for proc in procs:
            proc.signal_group(signal.SIGSTOP)
        stopped = all(_process_state(p.pid) == "T" or _wait_state(p.pid, "T") for p in procs)

        def undo() -> None:
            for proc in procs:
                proc.signal_group(signal.SIGCONT)
        return FaultRecord(CONTROL_PLANE, FaultMethod.HANG, stopped, what, undo=undo, journal_id=intent)

    def inject(self, node: str, method: FaultMethod) -> FaultRecord:
        if not method.reference_only:
            raise FaultError(f"fault method {method.value!r} is for real clusters; on the reference platform use "
                             "kill, hang or partition")
        proc = self._agents(node)
        if proc is None or not proc.alive():
            raise FaultError(f"node {node} has no running agent started by this harness; cannot pull it")
        if method is FaultMethod.KILL:
            what = f"SIGKILL process group {proc.pid}"
            intent = self.intend(f"kill node {node}: {what}", node, method, (Undo(
                UndoKind.BY_HAND, note=f"start node {node}'s agent again (the embedded platform restarts it; "
                                       "it ends with its run)"),))
            proc.kill()  # the whole process group: the agent and its pods
            return FaultRecord(node, method, not proc.alive(), what, undo=lambda: self._restart(node),
                               journal_id=intent)
        if method is FaultMethod.HANG:
            what = f"SIGSTOP process group {proc.pid}"
            intent = self.intend(f"hang node {node}: {what}", node, method, (_signal_undo([proc], signal.SIGCONT),))
            proc.signal_group(signal.SIGSTOP)
            stopped = _process_state(proc.pid) == "T" or _wait_state(proc.pid, "T")
            return FaultRecord(node, method, stopped, what, undo=lambda: proc.signal_group(signal.SIGCONT),
                               journal_id=intent)
        what = f"SIGUSR1 pid {proc.pid} (partition)"
        intent = self.intend(f"partition node {node}: {what}", node, method,
                             (_signal_undo([proc], signal.SIGUSR2, group=False),))
        proc.signal(signal.SIGUSR1)
        return FaultRecord(node, method, proc.alive(), what, undo=lambda: proc.signal(signal.SIGUSR2),
                           journal_id=intent)


def _signal_undo(procs: list[NodeProcess], sig: int, group: bool = True) -> Undo:
    """The journal's undo of a signal fault: ``sig`` to each process (group), named by pid and start time."""
    how = "process group" if group else "process"
    return Undo(UndoKind.SIGNAL, pids=tuple((p.pid, process_start(p.pid)) for p in procs), signal=int(sig),
                note=f"send {signal.Signals(sig).name} to the {how} of pid " + ", ".join(str(p.pid) for p in procs))


def _wait_state(pid: int, state: str, attempts: int = 50) -> bool:
    """SIGSTOP takes effect asynchronously; give the kernel up to half a second to show it."""
    for _ in range(attempts):
        if _process_state(pid) == state:
            return True
        time.sleep(0.01)
    return False


def kubelet_stop_pod(node: str, run_id: str, image: str = "busybox:1.36") -> dict[str, Any]:
    """The privileged pod that stops the kubelet on ``node`` (and is deleted on rollback)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"firedrill-kubelet-stop-{node}"[:63].rstrip("-"), "namespace": "kube-system",
                     "labels": {"firedrill.dev/drill-run": run_id, "firedrill.dev/fault": "kubelet-stop"}},
        "spec": {"nodeName": node, "hostPID": True, "restartPolicy": "Never",
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "stop-kubelet", "image": image,
                                 "securityContext": {"privileged": True},
                                 "command": ["nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net",
                                             "--pid", "--", "systemctl", "stop", "kubelet"]}]},
    }


def run_command(command: str, node: str, timeout: float) -> FaultRecord:
    """Run a fault (or restore) command made from the profile's template, without a shell."""
    argv = shlex.split(command)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FaultError(f"fault command {command!r} for node {node} failed to run: {exc}") from None
    return FaultRecord(node, FaultMethod.COMMAND, proc.returncode == 0,
                       f"{command} -> rc {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}")


def run_site_command(driver: Any, profile: TargetProfile, faults_done: list[FaultRecord], node: str, *, what: str,
                     act: str, command: str, restore: str | None, by_hand: str, intend: Intend = no_journal,
                     expires_in: float | None = None) -> tuple[FaultRecord, str]:
    """Inject a fault with one of the profile's own commands (an Xid, a hang) on ``node``: behind the same
    blast-radius check as a node fault, written down first (its undo: ``restore``, else ``by_hand``), joined to
    ``faults_done`` before its outcome is judged so its restore runs on every exit path. Returns the record and
    the blast radius in words; raises :class:`FaultError` naming ``what`` (the fault: "Xid 79") when nothing was
    (or may have been) injected. ``act`` says it in the journal ("inject Xid 79"); ``expires_in``: the command
    undoes itself after that many seconds (the journal records when)."""
    from drills.kube.driver import NODE
    from drills.target.safety import SafetyError, check_blast_radius

    nodes = driver.list(NODE)
    chosen = [n for n in nodes if (n.get("metadata") or {}).get("name") == node] or [{"metadata": {"name": node}}]
    try:
        radius = check_blast_radius(chosen, nodes, profile.safety, profile.gpu_resource)
    except SafetyError as exc:
        raise FaultError(f"the {what} is not injected: {exc}") from None
    intent = intend(f"{act} on node {node}: {command}", node, FaultMethod.COMMAND,
                    (Undo(UndoKind.COMMAND, argv=tuple(shlex.split(restore))),) if restore is not None else
                    (Undo(UndoKind.BY_HAND, note=by_hand),), expires_in=expires_in)
    try:
        ran = run_command(command, node, profile.fault.timeout_seconds)
    except FaultError as exc:
        raise FaultError(f"the {what} injection command could not run: {exc}") from None
    record = FaultRecord(node, FaultMethod.COMMAND, ran.confirmed, f"{what}: {ran.detail}", journal_id=intent)
    if restore is not None:
        record.undo = _restorer(restore, node, profile.fault.timeout_seconds)
    faults_done.append(record)
    if not record.confirmed:
        raise FaultError(f"the {what} injection command failed: {ran.detail}")
    return record, radius.describe()


def _restorer(command: str, node: str, timeout: float) -> Callable[[], None]:
    """The undo of a fault injected by a site command: run its restore command; FaultError when that fails."""
    def restore() -> None:
        record = run_command(command, node, timeout)
        if not record.confirmed:
            raise FaultError(f"restore command for {node} failed: {record.detail}")
    return restore


LEASE_NAMESPACE = "kube-node-lease"


def watch_node_down(driver: Any, node: str, watch: NodeDownWatch, deadline: float, timeout: float,
                    clock: Any, poll: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> NodeConfirmation:
    """Read the Node and its Lease every ``poll`` seconds until ``watch`` confirms the node went down or the
    harness clock passes ``deadline`` (then: unconfirmed, saying what the node did instead)."""
    from drills.kube.driver import NODE, RESOURCES, KubeError

    lease_res = RESOURCES[("coordination.k8s.io/v1", "Lease")]
    while True:
        try:
            node_obj = driver.find(NODE, node)
            lease = driver.find(lease_res, node, LEASE_NAMESPACE)
        except KubeError:  # the API did not answer: no observation, so nothing concluded from it
            node_obj = lease = None
            got = None
        else:
            got = watch.observe(node_obj, lease, clock.mono())
        if got is not None:
            return got
        now = clock.mono()
        if now >= deadline:
            return watch.unconfirmed(now, timeout)
        sleep(min(poll, max(deadline - now, 0.0)))


def _baseline(driver: Any, node: str, clock: Any) -> NodeDownWatch:
    from drills.kube.driver import NODE, RESOURCES

    lease = driver.find(RESOURCES[("coordination.k8s.io/v1", "Lease")], node, LEASE_NAMESPACE)
    return NodeDownWatch(node, driver.find(NODE, node), lease, clock.mono())


class ClusterFaults:
    """Faults on a real cluster, through the one driver (and a user command for ``command``).

    ``kubelet-stop`` and ``command`` are confirmed by the node (:func:`watch_node_down`): its Lease stops
    being renewed, or its Ready condition leaves True, within ``fault.timeout_seconds`` of the fault's start.
    """

    def __init__(self, driver: Any, run_id: str, settings: FaultSettings, clock: Any = None,
                 poll: float = 0.5, intend: Intend = no_journal, asked: FaultMethod | None = None) -> None:
        self.driver = driver
        self.asked = asked
        """The fault the scenario names: what a fault command's ``{fault}`` says."""
        self.run_id = run_id
        self.settings = settings
        self.intend = intend
        self.timeout = settings.timeout_seconds
        timeline = getattr(driver, "timeline", None)
        self.clock = clock or getattr(timeline, "clock", None) or SystemClock()
        self.poll = poll

    def inject(self, node: str, method: FaultMethod) -> FaultRecord:
        from drills.kube.driver import NODE, POD, resource_for

        if method.reference_only:
            raise FaultError(f"fault method {method.value!r} only exists on the reference platform; on a real "
                             "cluster use kubelet-stop, delete-node or command")
        if method is FaultMethod.DELETE_NODE:
            saved = self.driver.get(NODE, node)
            meta = {k: v for k, v in saved["metadata"].items() if k in ("name", "labels", "annotations")}
            manifest = {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": saved.get("spec", {})}
            intent = self.intend(f"delete Node {node}", node, method,
                                 (Undo(UndoKind.RECREATE, object_kind="Node", name=node, manifest=manifest),))
            self.driver.delete(NODE, node)
            gone = self.driver.find(NODE, node) is None
            return FaultRecord(node, method, gone, f"deleted Node {node}", undo=lambda: self.driver.create(manifest),
                               journal_id=intent)
        deadline = self.clock.mono() + self.timeout
        watch = _baseline(self.driver, node, self.clock)
        restore = self.settings.restore_for(node, self.asked)
        restore_undo = (Undo(UndoKind.COMMAND, argv=tuple(shlex.split(restore))),) if restore else ()
        if method is FaultMethod.KUBELET_STOP:
            pod = kubelet_stop_pod(node, self.run_id)
            undo = (Undo(UndoKind.DELETE, api_version="v1", object_kind="Pod", name=pod["metadata"]["name"],
                         namespace="kube-system"),) + (restore_undo or (Undo(
                             UndoKind.BY_HAND, note=f"start the kubelet on node {node} again (systemctl start "
                                                    "kubelet on the host): the profile has no restore_template"),))
            intent = self.intend(f"stop the kubelet of node {node} (privileged pod {pod['metadata']['name']})",
                                 node, method, undo)
            self.driver.create(pod)
            acted = self.clock.mono()
            confirmation = watch_node_down(self.driver, node, watch, deadline, self.timeout, self.clock, self.poll)
            phase = ((self.driver.find(POD, pod["metadata"]["name"], "kube-system") or {}).get("status")
                     or {}).get("phase", "")

            def cleanup() -> None:
                self.driver.delete(resource_for(pod), pod["metadata"]["name"], "kube-system", grace_seconds=0)
                if restore:
                    run_command(restore, node, self.timeout)
            detail = (f"privileged pod ran 'systemctl stop kubelet' on {node}; {confirmation.detail} (the pod's "
                      f"phase, the platform's word only: {phase or 'none'})"
                      + ("" if self.settings.restore_template else
                         "; restart the kubelet on the node by hand after the drill"))
            return FaultRecord(node, method, confirmation.confirmed, detail, undo=cleanup,
                               confirmation=confirmation, acted_at=acted, journal_id=intent)
        command = self.settings.command_for(node, self.asked)
        expire = self.settings.expire_seconds
        intent = self.intend(f"{method.value} on node {node}: {command}", node, method, restore_undo or (Undo(
            UndoKind.BY_HAND, note=f"undo '{command}' on node {node} by hand: the profile has no "
                                   "restore_template" + ("" if expire is None else
                                                         f" (it undoes itself {expire:g} s after it acted)")),),
                             expires_in=expire)
        record = run_command(command, node, self.timeout)
        record.acted_at = self.clock.mono()
        record.journal_id = intent
        if restore:
            record.undo = lambda: run_command(restore, node, self.timeout) and None
        if not record.confirmed:  # the command itself failed: nothing to wait for
            record.detail = f"the fault command failed: {record.detail}"
            return record
        record.confirmation = watch_node_down(self.driver, node, watch, deadline, self.timeout, self.clock,
                                              self.poll)
        record.confirmed = record.confirmation.confirmed
        record.detail = f"{record.detail}; {record.confirmation.detail}"
        return record


def fault_permissions(method: FaultMethod, profile: TargetProfile) -> list[Permission]:
    """What pulling a node with ``method`` asks of the API on a real cluster: every method reads the Node and
    its Lease to confirm the fault; ``kubelet-stop`` runs a pod in kube-system, ``delete-node`` deletes and
    recreates the Node."""
    why = f"the {method.value} fault (confirmed by the node's Lease and Ready condition)"
    out = grant(CLUSTER, "", "nodes", ("get",), why)
    out += grant(LEASE_NAMESPACE, "coordination.k8s.io", "leases", ("get",), why)
    if method is FaultMethod.KUBELET_STOP:
        out += grant("kube-system", "", "pods", ("get", "create", "delete"),
                     "the kubelet-stop fault's privileged pod on the node")
    elif method is FaultMethod.DELETE_NODE:
        out += grant(CLUSTER, "", "nodes", ("delete", "create"), "the delete-node fault (and the Node's re-creation)")
    return out
