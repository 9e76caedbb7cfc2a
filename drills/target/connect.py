"""Targets: what a drill acts on.  The embedded reference platform by default, or a real cluster.

``Target`` bundles the one driver, the target profile (flavor, queue, fault
method, safety settings) and the fault injector.  The embedded platform is
the only place the harness touches ``refplatform``, and only to start and
stop it (``refplatform.cluster``), so the drills themselves run the same code
against both.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from drills.errors import FiredrillError
from drills.kube.driver import NODE, POD, RESOURCES, KubeDriver, KubeError
from drills.kube.fingerprint import Fingerprint, fingerprint
from drills.kube.flavors import flavor_apis
from drills.kube.timeline import Timeline
from drills.target.access import (CLUSTER, READ, AccessDenied, AccessUnchecked, Permission, grant, missing_permissions,
                                  refusal)
from drills.target.faults import (CONTROL_PLANE, ClusterFaults, FaultError, FaultRecord, Intend, ReferenceFaults,
                                  no_journal, FaultRecords)
from drills.target.journal import Undo
from drills.target.marks import Mark, annotation_removed, cluster_marks
from drills.target.recover import left_broken, leftovers
from drills.target.gpuhealth import (BREAKER_NAME, BREAKER_NAMESPACE, CLEAR_ANNOTATION, CONFIG_MAP, DIAG_ANNOTATION,
                                    FLEET_ANNOTATION, append_entry, gpu_health, remove_annotation)
from drills.target.throttle import THROTTLE_ANNOTATION, inject_throttle
from drills.target.xid import INJECT_ANNOTATION, clear_xids, inject_xid
from drills.target.profile import FaultMethod, TargetProfile, reference_profile
from drills.target.safety import require_preflight
from drills.target.service import NodeService, describe, not_back, snapshot

log = logging.getLogger(__name__)
NAMESPACE = RESOURCES[("v1", "Namespace")]


class TargetError(FiredrillError):
    """The target cannot be set up (the embedded platform did not start, or the cluster is unusable)."""


@dataclass
class EmbeddedPlatform:
    """The reference platform, started for one run in a temporary data directory and torn down after."""

    nodes: int = 4
    spares: int = 1
    gpus_per_node: int = 8
    scheduler_profile: str = "gang"
    healing_profile: str = "tuned"
    defects: tuple[str, ...] = ()
    """Defects from the zoo (docs/DEFECTS.md) every platform process starts with; none for an honest platform."""
    real_gpus: bool = False
    """Report this machine's GPUs (NVML) instead of simulating them (``--real-gpus``); False: every agent runs with
    ``--simulate-gpus``, so a run behaves the same on a machine with a GPU as on one without."""
    node_prefix: str = "gpu-node"
    """Its nodes are ``<prefix>-0``, ``<prefix>-1``, ...: a ``--parallel`` pool's own names (``p2-gpu-node``)."""
    data_dir: Path | None = None
    cluster: Any = None
    _tmp: Any = field(default=None, repr=False)

    def start(self, timeout: float = 60.0) -> "EmbeddedPlatform":
        from refplatform.cluster import Cluster, ClusterSpec  # the embedded default target

        if self.data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="firedrill-embedded-")
            self.data_dir = Path(self._tmp.name)
        spec = ClusterSpec(self.data_dir, nodes=self.nodes, gpus_per_node=self.gpus_per_node,
                           scheduler_profile=self.scheduler_profile, profile=self.healing_profile,
                           spares=self.spares, defects=self.defects, real_gpus=self.real_gpus,
                           node_prefix=self.node_prefix)
        self.cluster = Cluster(spec)
        try:
            self.cluster.start()
            self.cluster.wait_ready(timeout)  # every node Ready and the spares enrolled (tainted) in the pool
        except Exception as exc:
            self.stop()
            raise TargetError(f"the embedded reference platform did not start: {exc}") from None
        return self

    @property
    def kubeconfig(self) -> Path:
        return Path(self.cluster.kubeconfig)

    def faults(self, intend: Intend = no_journal) -> ReferenceFaults:
        cluster = self.cluster
        return ReferenceFaults(lambda node: cluster.agents.get(node), self.restart_node,
                               lambda: [cluster.server] if cluster.server is not None else [], intend)

    def restart_node(self, node: str) -> None:
        """Bring a pulled node's agent back (the rollback of ``kill``)."""
        old = self.cluster.agents.get(node)
        if old is not None and old.alive():
            return
        self.cluster.start_agent(node)

    def start_partitioned_node(self, name: str, gpus: int, gpu_model: str, config: dict[str, Any],
                               timeout: float = 30.0) -> Path:
        """Start an extra reference node whose GPUs are partitioned by ``config`` (docs/PARTITIONING.md:
        the agent's ``--partition-config``), and wait until it is Ready.  Returns the config file's path.

        Raises :class:`TargetError` naming the node and the agent's last log lines when the agent refuses
        the config (exit code 2) or the node is not Ready within ``timeout``."""
        import yaml

        if self.cluster is None or self.data_dir is None:
            raise TargetError("the embedded platform is not started")
        path = Path(self.data_dir) / f"partition-{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        proc = self.cluster.start_agent(name, gpus=gpus, gpu_model=gpu_model, extra=("--partition-config", str(path)))
        deadline = time.monotonic() + timeout
        with self.cluster.http_client() as http:
            while True:
                if not proc.alive():
                    self.cluster.agents.pop(name, None)
                    raise TargetError(f"the agent of partitioned node {name} exited "
                                      f"(code {proc.popen.poll()}): {proc.tail(8).strip() or 'no log'}")
                try:
                    answer = http.get(f"/api/v1/nodes/{name}", timeout=2)
                    node = answer.json() if answer.status_code == 200 else {}
                except Exception:  # noqa: BLE001 - not answering yet: keep polling until the deadline
                    node = {}
                if any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (node.get("status") or {}).get("conditions") or []):
                    return path
                if time.monotonic() >= deadline:
                    self.remove_node(name)
                    raise TargetError(f"partitioned node {name} was not Ready within {timeout:g} s: "
                                      f"{proc.tail(8).strip() or 'no log'}")
                time.sleep(0.1)

    def remove_node(self, name: str, driver: Any = None) -> None:
        """Stop a node's agent and delete its Node and Lease (the rollback of :meth:`start_partitioned_node`)."""
        if self.cluster is None:
            return
        proc = self.cluster.agents.pop(name, None)
        if proc is not None:
            proc.stop()
        with self.cluster.http_client() as http:
            http.delete(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
            http.delete(f"/api/v1/nodes/{name}")

    def restore_roles(self, timeout: float = 10.0) -> None:
        """After a scenario: the spare pool as the platform started (a pulled node that returned to the pool
        works again, the spare promoted for it goes back), so every scenario finds the racks the first one
        did; a node still quarantined at ``timeout`` is logged and left as it is."""
        if self.cluster is None:
            return
        try:
            if not self.cluster.restore_roles(timeout):
                log.warning("the spare pool was not restored: a node was still quarantined after %g s", timeout)
        except Exception as exc:  # noqa: BLE001 - a rollback step: the next scenario's steady state judges it
            log.warning("the spare pool was not restored: %s", exc)

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def kubeconfig_secrets(path: Path) -> list[str]:
    """The credentials a kubeconfig holds (tokens, passwords, client keys); none when it cannot be read (the
    drill that needs it says so itself)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return []
    found: list[str] = []
    for entry in (doc.get("users") or []) if isinstance(doc, dict) else []:
        user = entry.get("user") if isinstance(entry, dict) else None
        if isinstance(user, dict):
            found += [str(user[k]) for k in ("token", "password", "client-key-data") if user.get(k)]
    return found


@dataclass
class Target(FaultRecords):
    """Everything a drill needs: the driver (and its timeline), the profile, how to pull a node."""

    driver: KubeDriver
    profile: TargetProfile
    embedded: EmbeddedPlatform | None = None
    fingerprint: Fingerprint | None = None
    warnings: list[str] = field(default_factory=list)
    access_checked: int | None = None
    """How many permissions the API server confirmed before the run (None: not asked: the embedded platform, or a
    server without SelfSubjectAccessReview, which a warning names)."""
    keep_measuring: float = 0.0
    """Seconds a phase that missed its threshold is still waited for, so the evidence holds its value
    (``firedrill run --keep-measuring``); 0: fail fast, a grace of a quarter of the threshold."""
    annotated: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """The reference platform's annotation faults standing (an Xid, a throttle, a failing diagnostic, a fleet
    fault), by (node, annotation): their journal intents ("" when the run keeps no journal)."""
    service_noted_at: float = 0.0
    """When (epoch s) the scenario began: burn-ins since then are its own (:meth:`settle_gpus`)."""
    burn_ins_forgotten: dict[str, float] = field(default_factory=dict)
    """Per node, when (epoch s) the newest burn-in whose history :meth:`settle_gpus` had forgotten began."""
    xids_cleared: dict[str, tuple[float, float]] = field(default_factory=dict)
    """When (the harness's monotonic and wall clocks) each node's Xid injections were last removed: the GPU's repair, from
    which its way back (burn-in, return) is judged."""
    touched: set[str] = field(default_factory=set)
    """The nodes (and ``control-plane``) faulted since the scenario began, undone or not: its blast radius, which
    the abort guard does not judge (:mod:`drills.scenario.guard`); cleared when a scenario begins."""
    service_before: dict[str, NodeService] = field(default_factory=dict)
    """Each node's service when the scenario began (:mod:`drills.target.service`): what "back in service" means."""
    service_at_first: dict[str, NodeService] = field(default_factory=dict)
    """Each node's service when the run's first scenario began: a later scenario that finds the cluster short
    names the nodes an earlier one never gave back."""

    @property
    def journal_key(self) -> str:
        """What the fault journals call this cluster: its API server's address."""
        return self.driver.host

    def service_now(self) -> dict[str, NodeService]:
        """Every node's service as it stands (raises KubeError when the API server does not answer)."""
        return snapshot(self.driver.list(NODE), self.profile.gpu_resource)

    def stop_watches(self) -> None:
        """Stop every watch the drills opened through the driver."""
        self.driver.stop_watches()

    def note_service(self) -> None:
        """Read every node's service as the scenario begins (the first scenario's reading is kept too)."""
        self.service_noted_at = self.timeline.clock.wall()
        self.service_before = self.service_now()
        if not self.service_at_first:
            self.service_at_first = self.service_before

    def not_given_back(self) -> str:
        """The nodes in service when the run's first scenario began that are not now, each with what keeps it out
        (``gpu-node-2: cordoned (spec.unschedulable)``); "" when none, or when they cannot be read."""
        if not self.service_at_first:
            return ""
        try:
            now = snapshot(self.driver.list(NODE), self.profile.gpu_resource)
        except KubeError:
            return ""
        return describe(not_back(self.service_at_first, now))

    def intend(self, what: str, node: str, method: FaultMethod, undo: tuple[Undo, ...],
               expires_in: float | None = None) -> str:
        """Write down a fault about to be injected (an :class:`drills.target.faults.Intend`); its intent id."""
        if self.journal is None:
            return ""
        return self.journal.intend_fault(what, node, method, undo, expires_in)

    def inject_xid(self, node: str, entry: dict[str, Any]) -> None:
        """The reference platform's Xid (an entry in the Node's annotation, which its agent applies: the GPU out of
        service while it stands), written down first (:mod:`drills.target.xid`)."""
        where = f"GPU {entry.get('gpu')}" + ("" if entry.get("instance") is None else
                                             f" instance {entry.get('instance')}")
        self._annotate(node, INJECT_ANNOTATION, f"Xid {entry.get('xid')} on {where} of node {node}",
                       lambda: inject_xid(self.driver, node, entry))

    def clear_xids(self, node: str) -> None:
        """Every GPU of the node repaired (the annotation removed: the platform may return them after their
        burn-in); its journal entries closed."""
        clear_xids(self.driver, node)
        self.xids_cleared[node] = (self.timeline.clock.mono(), self.timeline.clock.wall())
        self._annotation_gone(node, INJECT_ANNOTATION)

    def inject_diag(self, node: str, gpu: int, entry_id: str) -> None:
        """The reference platform's burn-in diagnostic of GPU ``gpu`` fails while this stands, written down
        first."""
        self._annotate(node, DIAG_ANNOTATION, f"every burn-in of GPU {gpu} of node {node} fails",
                       lambda: append_entry(self.driver, node, DIAG_ANNOTATION,
                                            {"id": entry_id, "gpu": gpu, "result": "fail"}))

    def inject_health(self, node: str, entry: dict[str, Any]) -> None:
        """The node reports a fatal GPU fault (``reason``, ``message``) until ``until`` (epoch s), written down
        first: it ends by itself should the run die."""
        self._annotate(node, FLEET_ANNOTATION, f"node {node} reports a fatal GPU fault ({entry.get('reason')}) "
                                               f"until {entry.get('until')} (epoch s)",
                       lambda: append_entry(self.driver, node, FLEET_ANNOTATION, entry))

    def clear_gpus(self, node: str, gpus: list[int]) -> None:
        """A person's clear of the GPUs the platform holds out: they go through their burn-in again."""
        self.driver.patch(NODE, node, {"metadata": {"annotations": {
            CLEAR_ANNOTATION: ",".join(str(g) for g in sorted(set(gpus)))}}})

    def reset_remediation(self) -> bool:
        """A person's reset of the healer's tripped breaker (its ConfigMap deleted); whether one was there."""
        if self.driver.find(CONFIG_MAP, BREAKER_NAME, BREAKER_NAMESPACE) is None:
            return False
        self.driver.delete(CONFIG_MAP, BREAKER_NAME, BREAKER_NAMESPACE)
        return True

    def settle_gpus(self, nodes: list[str] | None = None, timeout: float = 15.0) -> None:
        """The GPUs of ``nodes`` (None: every node whose Xids this scenario removed or that its faults touched) left
        as the scenario found them, where the node's agent publishes its GPUs' way back (``firedrill.dev/gpu-health``:
        the reference platform's agents, embedded or the kubelets of a test cluster): each burn-in waited for, a
        GPU held out cleared, and the flap history of each GPU burnt in since the scenario began forgotten (a
        person's ``firedrill.dev/clear-gpus``), so the next scenario's fault on one of them is a first failure,
        not a flap of this one. A node whose agent publishes nothing (a real cluster's health system) is left
        alone. Never raises."""
        todo = sorted(set(self.xids_cleared) | (self.touched - {CONTROL_PLANE})) if nodes is None else nodes
        for node in todo:
            self.xids_cleared.pop(node, None)
        clock = self.timeline.clock
        since = self.service_noted_at
        for node in todo:
            deadline, cleared_held = clock.mono() + timeout, False
            try:
                while True:
                    record = gpu_health(self.driver.get(NODE, node))
                    held = sorted(g for g, s in record.gpus.items() if s.state == "held")
                    if held and not cleared_held:
                        self.clear_gpus(node, held)
                        cleared_held = True
                    if not record.gpus or clock.mono() >= deadline:
                        break
                    time.sleep(0.2)
                floor = self.burn_ins_forgotten.get(node)
                mine = [b for b in record.burn_ins if b.started >= since and (floor is None or b.started > floor)]
                if mine:  # each burn-in's history forgotten once (the drill's rollback and the scenario's both settle)
                    self.clear_gpus(node, sorted({b.gpu for b in mine}))
                    self.burn_ins_forgotten[node] = max(b.started for b in mine)
                    while clock.mono() < deadline and CLEAR_ANNOTATION in (
                            self.driver.get(NODE, node)["metadata"].get("annotations") or {}):
                        time.sleep(0.1)
            except KubeError as exc:
                log.warning("could not settle the GPUs of %s: %s", node, exc)

    def clear_annotation(self, node: str, annotation: str) -> None:
        """One of the reference platform's annotation faults removed from the node; its journal entries closed.
        A node that is gone (a drill's own, removed in its rollback) took its annotation with it."""
        try:
            if annotation == INJECT_ANNOTATION:
                self.clear_xids(node)
                return
            remove_annotation(self.driver, node, annotation)
        except KubeError as exc:
            if exc.code != 404:
                raise
            self._annotation_gone(node, annotation, "the node was removed, and its annotation with it")
            return
        self._annotation_gone(node, annotation)

    def inject_throttle(self, node: str, entry: dict[str, Any]) -> None:
        """The reference platform's throttle of a GPU or of the input (:mod:`drills.target.throttle`), written down
        first."""
        if "speed" in entry:
            what = f"GPU {entry.get('gpu')} of node {node} slowed to {entry.get('speed')}"
        elif entry.get("hang"):
            what = f"the processes on GPU {entry.get('gpu')} of node {node} hung in a kernel"
        elif "storage_stall_until" in entry:
            what = f"the checkpoint storage of node {node} stalled until {entry['storage_stall_until']} (epoch s)"
        else:
            what = f"the input on node {node} delayed {entry.get('input_delay_s')} s a step"
        self._annotate(node, THROTTLE_ANNOTATION, what, lambda: inject_throttle(self.driver, node, entry))

    def clear_throttle(self, node: str) -> None:
        """Every throttle of the node removed; its journal entries closed."""
        self.clear_annotation(node, THROTTLE_ANNOTATION)

    def _annotate(self, node: str, annotation: str, what: str, act: Callable[[], None]) -> None:
        intent = "" if self.journal is None else self.journal.intend(
            f"{what} (Node annotation {annotation})", node, "annotation", (annotation_removed(node, annotation),))
        self.annotated.setdefault((node, annotation), []).append(intent)
        self.touched.add(node)
        act()

    def _annotation_gone(self, node: str, annotation: str, why: str = "the annotation removed") -> None:
        for intent in self.annotated.pop((node, annotation), []):
            if self.journal is not None and intent:
                self.journal.close(intent, f"undone by the run: {why}")

    def identify(self) -> Fingerprint:
        """What the target is (server version, GPU models, driver and flavor CRD versions), for the evidence."""
        groups = self.driver.request("GET", "/apis").get("groups") or []
        wanted = flavor_apis(self.profile.flavor)
        served = {g["name"]: [v["version"] for v in g.get("versions") or []] for g in groups if g.get("name") in wanted}
        self.fingerprint = fingerprint(self.driver.version(), self.driver.list(NODE), served,
                                       gpu_resource=self.profile.gpu_resource)
        return self.fingerprint

    def secrets(self) -> list[str]:
        """Credentials of the target that must never appear in evidence (tokens, passwords, key material)."""
        cfg = self.driver.api.configuration
        found = [str(v).split(" ", 1)[-1] for v in (cfg.api_key or {}).values() if v]
        found += [v for v in (getattr(cfg, "password", None), getattr(cfg, "username", None)) if v]
        for path in (getattr(cfg, "key_file", None),):
            if path and Path(path).exists():
                found.append(Path(path).read_text(errors="replace").strip())
        if self.embedded is not None and self.embedded.cluster is not None:
            found += self.embedded.cluster.secrets()  # every identity's token: admin, components, nodes, tenants
        governance = self.profile.governance  # the governance drill's own identities on a real cluster
        for kubeconfig in (governance.tenant_kubeconfig, governance.node_kubeconfig):
            if kubeconfig:
                found += kubeconfig_secrets(Path(kubeconfig).expanduser())
        return [s for s in found if len(s) >= 8]

    def preflight(self, now: datetime | None = None) -> None:
        """Refuse to drill an already degraded cluster (when the profile says so); keep warnings otherwise.
        ``now``: the clock a deletion is judged stuck against (default: the current time).

        Of the pods only those being deleted can be damage (stuck Terminating), so every pod's metadata is read
        (less than half of a full list of a large cluster's pods) and only those are read whole."""
        deleting = [p["metadata"] for p in self.driver.list_metadata(POD)
                    if (p.get("metadata") or {}).get("deletionTimestamp")]
        pods = [self.driver.find(POD, m["name"], m.get("namespace")) or {"metadata": m} for m in deleting]
        self.warnings = require_preflight(self.driver.list(NODE), pods, self.profile.safety,
                                          gpu_resource=self.profile.gpu_resource, now=now)

    @property
    def defects(self) -> tuple[str, ...]:
        """The zoo's defects the embedded platform runs with (docs/DEFECTS.md); none on a real cluster."""
        return self.embedded.defects if self.embedded is not None else ()

    @property
    def timeline(self) -> Timeline:
        return self.driver.timeline

    @property
    def description(self) -> str:
        if self.embedded is not None:
            defects = self.embedded.defects
            broken = f", WITH DEFECT{'S' if len(defects) > 1 else ''} {', '.join(defects)}" if defects else ""
            return (f"embedded reference platform ({self.embedded.nodes} nodes + {self.embedded.spares} spare, "
                    + ("this machine's real GPUs, " if self.embedded.real_gpus else
                       f"{self.embedded.gpus_per_node} simulated GPUs each, ")
                    + f"{self.embedded.scheduler_profile} scheduler, "
                    f"{self.embedded.healing_profile} healing{broken}) at {self.driver.host}")
        return f"cluster at {self.driver.host} ({self.profile.flavor.value})"

    def pull(self, node: str, method: FaultMethod, run_id: str = "", asked: FaultMethod | None = None) -> FaultRecord:
        """Inject a fault on ``node``; the record says whether it was confirmed and how to undo it.  ``asked``: the
        fault the scenario names, which a fault command's ``{fault}`` says (None: the configured method)."""
        if self.embedded is not None:
            injector: ReferenceFaults | ClusterFaults = self.embedded.faults(self.intend)
        else:
            injector = ClusterFaults(self.driver, run_id, self.profile.fault, intend=self.intend, asked=asked)
        self.touched.add(node)  # before the act: the guard must not judge the node as it goes down
        record = injector.inject(node, method)
        self.faults_done.append(record)
        return record

    def hang_control_plane(self) -> FaultRecord:
        """Stop the embedded platform's API server (SIGSTOP; :meth:`restore` or the rollback continues it): the
        control plane is unreachable for nodes and controllers alike.  Raises FaultError on a real cluster: the
        harness signals only processes it started."""
        if self.embedded is None:
            raise FaultError("stopping the control plane is a reference-platform fault: on a real cluster the "
                             "harness never signals processes it did not start")
        self.touched.add(CONTROL_PLANE)
        record = self.embedded.faults(self.intend).hang_control_plane()
        self.faults_done.append(record)
        return record

    def restore_all(self, how: str = "undone by the run's rollback") -> None:
        """Undo every fault this target injected (rollback), newest first, and the reference platform's
        annotations still standing; never raises."""
        super().restore_all(how)
        for node, annotation in list(self.annotated):  # the reference platform's injections still standing
            try:
                self.clear_annotation(node, annotation)
            except Exception as exc:  # noqa: BLE001 - rollback must try every fault
                log.warning("could not remove %s from %s: %s", annotation, node, exc)

    def restore_roles(self) -> None:
        """The embedded platform's spare pool as it started (:meth:`EmbeddedPlatform.restore_roles`); a real
        cluster's nodes are never touched beyond the faults' own undo."""
        if self.embedded is not None:
            self.embedded.restore_roles()

    def close(self) -> None:
        self.restore_all()
        self.driver.close()
        if self.embedded is not None:
            self.embedded.stop()


def embedded_target(scheduler_profile: str = "gang", nodes: int = 4, spares: int = 1,
                    profile: TargetProfile | None = None, defects: tuple[str, ...] = (),
                    real_gpus: bool = False, node_prefix: str = "gpu-node") -> Target:
    platform = EmbeddedPlatform(nodes=nodes, spares=spares, scheduler_profile=scheduler_profile,
                                defects=tuple(defects), real_gpus=real_gpus, node_prefix=node_prefix).start()
    profile = profile or reference_profile()
    try:
        driver = KubeDriver.connect(platform.kubeconfig, timeline=Timeline())
        target = Target(driver, profile, platform)
        if driver.find(NAMESPACE, profile.namespace) is None:
            driver.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": profile.namespace}})
        target.identify()
    except FiredrillError:
        platform.stop()
        raise
    return target


@dataclass(frozen=True)
class AccessCheck:
    """The permissions a run needs, asked of the API server before anything else, and how to grant them."""

    permissions: list[Permission]
    grant_command: str


class LeftBroken(TargetError):
    """An earlier run against this cluster died with faults it never undid (its fault journal says so)."""


def cluster_target(kubeconfig: Path | None, context: str | None, profile: TargetProfile,
                   access: AccessCheck | None = None, recover_command: str | None = None) -> Target:
    """Connect to a real cluster, check the identity may do what the run needs (``access``: one
    SelfSubjectAccessReview per permission, before any other request), identify the cluster and check it is
    healthy enough to drill (raises otherwise).  With ``recover_command`` (a run's), first refuse a cluster that a
    dead run's fault journal says may still carry its faults (:class:`LeftBroken`, naming them and that command)."""
    target = Target(KubeDriver.connect(kubeconfig, context, timeline=Timeline()), profile)
    unchecked = marks_unread = ""
    try:
        if access is not None:
            try:
                missing = missing_permissions(target.driver, access.permissions)
            except AccessUnchecked as exc:
                unchecked = str(exc)
            else:
                if missing:
                    raise AccessDenied(refusal(missing, access.grant_command), missing)
                target.access_checked = len(access.permissions)
        if target.driver.find(NAMESPACE, profile.namespace) is None:
            raise TargetError(f"namespace {profile.namespace!r} (from the target profile) does not exist on the "
                              f"cluster at {target.driver.host}; create it, or pass --namespace")
        target.identify()
        if recover_command is not None:
            found = leftovers(target.driver.host, target.driver)
            marks, marks_unread = ([], "") if any(f.running for f in found) else _marks(target.driver)
            if found or marks:
                raise LeftBroken(left_broken(found, recover_command, marks))
        target.preflight()
    except FiredrillError:
        target.driver.close()
        raise
    target.warnings += [w for w in (unchecked, marks_unread) if w]
    return target


def _marks(driver: KubeDriver) -> tuple[list[Mark], str]:
    """What a dead run left on the cluster itself (:mod:`drills.target.marks`), and a warning when the identity
    may not read it (not a refusal: the journals were read)."""
    try:
        return cluster_marks(driver), ""
    except KubeError as exc:
        if exc.code not in (401, 403):
            raise
        return [], (f"what an earlier run may have left on the cluster (drill-labelled pods, drill annotations and "
                    f"taints on Nodes) was not checked: {exc}")


def run_permissions(profile: TargetProfile) -> list[Permission]:
    """What every run on a real cluster asks of the API, whatever its scenarios: the namespace check, the
    pre-flight reads (Nodes, and Pods in every namespace), the fingerprint, and every scenario's invariant watch
    (its pods, their logs and Nodes)."""
    ns = profile.namespace
    out = grant(ns, "", "namespaces", ("get",), f"connect: the profile's namespace {ns} must exist")
    out += grant(CLUSTER, "", "nodes", READ, "pre-flight health, free capacity, the fingerprint, the invariant "
                                             "watch (which node a pod runs on)")
    out += grant(CLUSTER, "", "pods", ("list",), "pre-flight (pods stuck terminating) and free capacity (GPUs "
                                                 "held by pods in every namespace)")
    out += grant(ns, "", "pods", READ, "the invariant watch over the drills' pods")
    out += grant(ns, "", "pods", ("get",), "the workloads' own logs: their truth", subresource="log")
    if profile.leak_report.url is None and profile.leak_report.prometheus_url is None:
        out += grant(CLUSTER, "firedrill.dev", "leakreport", ("list",), "the run's leak report in the evidence (the "
                                                                        "API server's path; set leakReport.url or "
                                                                        "prometheus.url for another source)")
    return out
