"""The control-plane drill: the API server and scheduler keep their service levels while a node is pulled.

Kubernetes' scalability SLOs (``../shared/reference/slos-and-conformance.md``) are the yardstick: mutating API
calls p99 <= 1 s per (resource, verb), and startup of schedulable stateless pods p99 <= 5 s. clusterloader2
measures them on a calm cluster; this drill measures them while a node dies, and adds the promise every other
number rests on: a write the API acknowledged is still there afterwards.

Steady state before: locust's ``ControlPlaneUser`` (docs/LOAD.md) writes, lists and watches pods that no node
can take (they stay Pending and cost nothing) through the official client, and the drill starts small
schedulable pods at a steady rate. Act: a node is pulled with a fault method. Observe: the load goes on, then
stops. Judge, from the harness's own clients only:

- ``mutating API call p99``: the worst, over create and update, of the nearest-rank p99 latency of the users'
  acknowledged calls (the SLO is per verb);
- ``pod startup p99``: from the drill's create call to the harness's watch seeing the pod Running with every
  container started, over the startup pods not bound to the pulled node (a pod bound to a node that then dies
  cannot start on it: those are counted and shown, not judged); a pod that never started is never;
- ``acknowledged writes lost``: pods whose create the API acknowledged (201) to a load user and that a list
  afterwards does not return. Nothing in the run deletes them (they are never scheduled, so never evicted).
"""

from __future__ import annotations

import logging
import math
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from drills.kube.driver import NODE, POD, KubeDriver, KubeError
from drills.kube.flavors import RUN_LABEL, run_selector
from drills.kube.timeline import wait_for
from drills.load.run import LoadError, LoadRun, LoadSpec, LoadUser, Outcome, Sample, nearest_rank
from drills.load.series import series
from drills.records.verdict import DrillInconclusive, Measurement
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, Permission, grant
from drills.target.profile import FaultMethod, TargetProfile
from drills.target.safety import check_blast_radius, eligible_nodes
from drills.workloads.canaryjob import gpu_holder, gpu_taint_toleration

log = logging.getLogger(__name__)
Obj = dict[str, Any]

MUTATING = ("k8s-create", "k8s-update")
LOAD_LABEL = "firedrill.dev/load"
STARTUP_LABEL = "firedrill.dev/startup"
SETTLE_S = 10.0
"""After the load stops, how long startup pods created near its end may take to be seen Running."""
ROLLBACK_TIMEOUT = 30.0


def kubeconfig_for(driver: KubeDriver, path: Path) -> Path:
    """A kubeconfig file with the driver's own server, CA and credentials, for the load users' process (the
    same identity the harness uses; a token from an exec plugin is written as the token it is now)."""
    cfg = driver.api.configuration
    cluster: Obj = {"server": cfg.host}
    if cfg.ssl_ca_cert:
        cluster["certificate-authority"] = str(cfg.ssl_ca_cert)
    if not cfg.verify_ssl:
        cluster["insecure-skip-tls-verify"] = True
    user: Obj = {}
    token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    if token:
        user["token"] = str(token).split(" ", 1)[-1]
    if cfg.cert_file and cfg.key_file:
        user["client-certificate"], user["client-key"] = str(cfg.cert_file), str(cfg.key_file)
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "firedrill",
           "clusters": [{"name": "target", "cluster": cluster}], "users": [{"name": "firedrill", "user": user}],
           "contexts": [{"name": "firedrill", "context": {"cluster": "target", "user": "firedrill"}}]}
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def worst_p99(samples: tuple[Sample, ...], kinds: tuple[str, ...] = MUTATING) -> tuple[float | None, str]:
    """The worst per-verb nearest-rank p99 latency of answered calls, and a note naming each verb's."""
    parts, worst = [], None
    for kind in kinds:
        values = [s.latency_s for s in samples if s.kind == kind and s.outcome is Outcome.ANSWERED]
        if values:
            p99 = nearest_rank(values, 99)
            parts.append(f"{kind.removeprefix('k8s-')} p99 {p99:.3f} s over {len(values)}")
            worst = p99 if worst is None else max(worst, p99)
    return worst, "; ".join(parts) or "no mutating call was answered"


REFUSAL_STATUSES = (401, 403, 429)
"""Answers that are no measurement of the server's latency: the caller was not let in (unauthenticated,
forbidden, throttled), so the call's time says nothing about how fast the server writes."""


def refusals(samples: tuple[Sample, ...], kinds: tuple[str, ...] = MUTATING) -> list[Sample]:
    """The calls of ``kinds`` the server refused (:data:`REFUSAL_STATUSES`), in the order they were sent."""
    return sorted((s for s in samples if s.kind in kinds and s.status in REFUSAL_STATUSES),
                  key=lambda s: s.start_mono)


def refused_finding(refused: list[Sample], act_mono: float | None) -> str:
    """Why the latency measurement is missing evidence: how many calls were refused, and the first of them."""
    first = refused[0]
    codes = ", ".join(str(c) for c in sorted({s.status for s in refused if s.status is not None}))
    when = f"{first.start_mono - act_mono:+.2f} s from the pull" if act_mono is not None else "before any pull"
    return (f"{len(refused)} mutating call(s) were refused (HTTP {codes}): a refused call is missing evidence, not a "
            f"fast answer, so the mutating p99 rests on the calls that were let in only; the first: {first.kind} "
            f"{first.object_name or ''} ({when}): {first.error}. Give the load users create and update on pods in the "
            "profile's namespace (docs/CONTROL_PLANE.md) and run again")


def acknowledged_creates(samples: tuple[Sample, ...]) -> dict[str, Sample]:
    """Object name -> the answered create that acknowledged it."""
    return {s.object_name: s for s in samples
            if s.kind == "k8s-create" and s.outcome is Outcome.ANSWERED and s.object_name}


def startup_p99(latencies: list[float | None]) -> tuple[float | None, str]:
    """Nearest-rank p99 over startup latencies where None means never started: None when the p99 lands on one."""
    if not latencies:
        return None, "no startup pod was judged"
    never = sum(v is None for v in latencies)
    p99 = nearest_rank([math.inf if v is None else v for v in latencies], 99)
    note = f"{len(latencies)} pods" + (f", {never} never started" if never else "")
    return (None if p99 == math.inf else p99), note


def mutating_series(samples: tuple[Sample, ...], origin: float, bucket_s: float = 1.0) -> list[Obj]:
    """Per bucket of start time (seconds from ``origin``, the pull) of the users' mutating calls: sent, answered,
    failed, lost (sent, never answered) and the nearest-rank p99 latency of the answered ones (None when none was);
    the evidence's latency-over-time chart is drawn from it. Reads and watches are not in it."""
    return series((s for s in samples if s.kind in MUTATING), origin, bucket_s,
                  latency=lambda s: s.latency_s, key="p99_latency_s")


@dataclass
class PodStart:
    name: str
    created: float
    """Harness monotonic clock just before the create call."""
    started: float | None = None
    node: str | None = None


@register
@dataclass
class ControlPlaneDrill(Drill):
    kind: ClassVar[str] = "control-plane"
    measures_control_plane: ClassVar[str] = ("it measures the API server's and scheduler's latency SLOs: another "
                                             "scenario's work on the same machine would be measured with them")

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        why = "control-plane load (its users write, update, list and watch pods with the harness's identity)"
        out = grant(profile.namespace, "", "pods", ("get", "list", "watch", "create", "patch", "delete"), why)
        return out + grant(CLUSTER, "", "nodes", ("list",), "control plane: choosing the node to pull")

    load: LoadRun | None = None
    load_started: float | None = None
    rate: float = 0.0
    _gpus: int = 0
    """GPUs each started pod asks for (0: a ``sleep`` pod)."""
    _seconds: int = 0
    """How long each started GPU pod runs (0: until the rollback)."""
    starts: dict[str, PodStart] = field(default_factory=dict)
    pulled: str | None = None
    act_mono: float | None = None
    samples: tuple[Sample, ...] = ()
    _stop: threading.Event = field(default_factory=threading.Event)
    _starter: threading.Thread | None = None
    _tmp: tempfile.TemporaryDirectory[str] | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)

    # ------------------------------------------------------------- steady state
    def start_load(self, users: int) -> None:
        """Locust's control-plane users, writing, listing and watching Pending pods through the official client."""
        self._tmp = tempfile.TemporaryDirectory(prefix=f"firedrill-cp-{self.run_id}-")
        out = Path(self._tmp.name)
        kubeconfig = (self.target.embedded.kubeconfig if self.target.embedded is not None
                      else kubeconfig_for(self.target.driver, out / "kubeconfig"))
        spec = LoadSpec(host=self.target.driver.host, out_dir=out / "load", users=users, spawn_rate=float(users),
                        duration_s=3600.0, user_classes=(LoadUser.CONTROL_PLANE,), kubeconfig=kubeconfig,
                        namespace=self.target.profile.namespace, k8s_object="pod", run_id=self.run_id,
                        request_timeout_s=5.0)
        try:
            self.load = LoadRun(spec, check_host=False)
        except LoadError as exc:
            raise DrillInconclusive(f"the load generator could not start: {exc}") from None
        self.load_started = self.target.timeline.clock.mono()
        self.target.timeline.action("control-plane load started", users=users)
        self.result.details["load"] = {"users": users, "object": "pod (Pending: no node matches its selector)",
                                       "command": self.load.portable_command()}

    def start_pods(self, per_second: int, gpus: int = 0, seconds: int = 0) -> None:
        """Start small schedulable pods (``sleep`` in the profile's canary image) at a steady rate, each timed from
        its create call to the harness's watch seeing it Running with every container started. With ``gpus``, each
        asks for that many GPUs and is a GPU workload that says which it was given and ends after ``seconds``
        (:func:`~drills.workloads.canaryjob.gpu_holder`), so the GPUs of pods placed while a node dies are checked
        too (docs/INVARIANTS.md)."""
        self.rate = float(per_second)
        self._gpus, self._seconds = gpus, seconds
        driver, ns = self.target.driver, self.target.profile.namespace
        driver.watch(POD, ns, label_selector=f"{RUN_LABEL}={self.run_id},{STARTUP_LABEL}=true", on_event=self._on_pod)
        self._starter = threading.Thread(target=self._start_loop, name="pod-starter", daemon=True)
        self._starter.start()
        self.result.details["startup"] = {"per_second": per_second, "image": self.target.profile.canary_image,
                                          "gpus_each": gpus, "seconds_each": seconds or None}

    def _start_loop(self) -> None:
        clock, driver = self.target.timeline.clock, self.target.driver
        profile = self.target.profile
        ns, image = profile.namespace, profile.canary_image
        container = (gpu_holder(profile, self._gpus, seconds=self._seconds) if self._gpus
                     else {"name": "main", "image": image, "command": ["sleep", "3600"]})
        n, begin = 0, clock.mono()
        while not self._stop.is_set():
            name = f"start-{self.run_id}-{n}"
            body = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": ns,
                                 "labels": {RUN_LABEL: self.run_id, STARTUP_LABEL: "true"}},
                    "spec": {"terminationGracePeriodSeconds": 0, "restartPolicy": "Never", "containers": [container]}}
            if self._gpus:
                body["spec"]["tolerations"] = list(gpu_taint_toleration(profile.gpu_resource))
            created = clock.mono()
            try:
                driver.create(body)
                with self._cond:
                    self.starts.setdefault(name, PodStart(name, created))
            except KubeError as exc:
                log.warning("startup pod %s was refused: %s", name, exc)
            n += 1
            self._stop.wait(max(0.0, begin + n / self.rate - clock.mono()))

    def _on_pod(self, event: str, obj: Obj) -> None:
        if event == "DELETED":
            return
        status = obj.get("status") or {}
        started = status.get("phase") == "Running" and bool(status.get("containerStatuses")) and all(
            (c.get("state") or {}).get("running") for c in status.get("containerStatuses") or [])
        now = self.target.timeline.clock.mono()
        with self._cond:
            name = obj["metadata"]["name"]
            start = self.starts.setdefault(name, PodStart(name, now))
            start.node = (obj.get("spec") or {}).get("nodeName") or start.node
            if started and start.started is None:
                start.started = now
            self._cond.notify_all()

    def _let_load_run(self, seconds: float) -> None:
        assert self.load is not None and self.load_started is not None, "start the control-plane load first"
        remaining = self.load_started + seconds - self.target.timeline.clock.mono()
        if remaining > 0:
            self.pause(remaining)
        if self.load.proc.poll() is not None:
            raise DrillInconclusive(f"the load generator exited early (code {self.load.proc.returncode}); "
                                    f"see {self.load.spec.out_dir / 'locust.log'}")

    # ----------------------------------------------------------------- act
    def pull(self, after_s: float, method: FaultMethod) -> None:
        """After ``after_s`` of load, pull one eligible GPU node (the first by name that takes pods)."""
        self._let_load_run(after_s)
        nodes = self.target.driver.list(NODE)
        candidates = sorted((n for n in eligible_nodes(nodes, self.target.profile.safety)
                             if not (n.get("spec") or {}).get("unschedulable")
                             and not any(t.get("effect") == "NoSchedule" and t.get("key") != self.target.profile.
                                         gpu_resource for t in (n.get("spec") or {}).get("taints") or [])),
                            key=lambda n: n["metadata"]["name"])
        if not candidates:
            raise DrillInconclusive("no node is eligible to be pulled (allow label, Ready, schedulable)")
        node = candidates[0]
        if self.target.embedded is None:
            check_blast_radius([node], nodes, self.target.profile.safety, self.target.profile.gpu_resource)
        self.pulled = node["metadata"]["name"]
        record = self.target.pull(self.pulled, method, self.run_id)
        clock = self.target.timeline.clock
        self.act_mono = record.acted_at if record.acted_at is not None else clock.mono()
        self.result.details["act"] = {"kind": "pull", "node": self.pulled, "method": method.value,
                                      "confirmed": record.confirmed, "detail": record.detail}
        if not record.confirmed:
            self.result.inconclusive(f"the {method.value} fault on {self.pulled} could not be confirmed "
                                     f"({record.detail}); no service level is claimed")

    def go_on(self, seconds: float) -> None:
        """Keep the load going ``seconds`` after the act, stop it, let the last startup pods start, and judge."""
        assert self.load is not None, "start the control-plane load first"
        clock = self.target.timeline.clock
        start = self.act_mono if self.act_mono is not None else clock.mono()
        remaining = start + seconds - clock.mono()
        if remaining > 0:
            self.pause(remaining)
        self._stop.set()
        if self._starter is not None:
            self._starter.join(10)
        self.load.stop()
        try:
            outcome = self.load.wait(timeout_s=self.load.deadline_s())
        except LoadError as exc:
            raise DrillInconclusive(f"the load generator's results could not be read: {exc}") from None
        self.samples = outcome.samples
        self.target.timeline.action("control-plane load stopped", sent=outcome.totals.sent)
        self._wait(lambda: all(s.started is not None or s.node == self.pulled for s in self.starts.values()),
                   SETTLE_S)
        self._judge()

    def live_details(self) -> dict[str, Any]:
        """While the load runs: the mutating calls' per-second series so far (from the pull, or from the load's start
        before it), as :meth:`_judge` will record it at the end."""
        if self.samples or self.load is None:
            return {}
        origin = self.act_mono if self.act_mono is not None else self.load_started
        try:
            samples = self.load.samples()
        except LoadError:
            return {}
        return {"series": mutating_series(samples, origin)} if origin is not None and samples else {}

    # ------------------------------------------------------------- judge
    def _judge(self) -> None:
        samples = self.samples
        worst, note = worst_p99(samples)
        self.result.measure(Measurement("mutating API call p99", worst, "s", note=note))
        failed = [s for s in samples if s.kind in MUTATING and s.outcome is not Outcome.ANSWERED]
        with self._cond:
            starts = list(self.starts.values())
        on_pulled = [s for s in starts if s.node is not None and s.node == self.pulled and s.started is None]
        judged = [s for s in starts if s not in on_pulled]
        p99, snote = startup_p99([None if s.started is None else s.started - s.created for s in judged])
        if on_pulled:
            snote += f"; {len(on_pulled)} bound to the pulled node {self.pulled} and not judged"
        self.result.measure(Measurement("pod startup p99", p99, "s", note=snote))
        acked = acknowledged_creates(samples)
        found = {p["metadata"]["name"] for p in self.target.driver.list(
            POD, self.target.profile.namespace, label_selector=f"{LOAD_LABEL}={self.run_id}")}
        missing = sorted(set(acked) - found, key=lambda n: acked[n].start_mono)
        self.result.measure(Measurement("acknowledged writes lost", float(len(missing)), "writes",
                                        note=f"of {len(acked)} creates acknowledged"))
        act = self.act_mono
        for name in missing[:3]:
            s = acked[name]
            when = f"{s.start_mono - act:+.2f} s from the pull" if act is not None else "before any pull"
            self.result.findings.append(f"pod {name} was acknowledged (HTTP {s.status}, {when}) but is not in the "
                                        "API afterwards")
        if len(missing) > 3:
            self.result.findings.append(f"... and {len(missing) - 3} more acknowledged pod(s) missing")
        self.result.details["requests"] = {
            "mutating": sum(s.kind in MUTATING for s in samples), "mutating_not_answered": len(failed),
            "reads": sum(s.kind in ("k8s-list", "k8s-watch") for s in samples),
            "acknowledged_creates": len(acked), "acknowledged_missing": missing,
            "startup_pods": len(starts), "startup_on_pulled_node": len(on_pulled)}
        origin = act if act is not None else (self.load_started or 0.0)
        self.result.details["series"] = mutating_series(samples, origin)
        refused = refusals(samples)
        if refused:  # the latency promise cannot be judged on the calls the server never let in
            self.result.details["requests"]["mutating_refused"] = len(refused)
            self.result.inconclusive(refused_finding(refused, act))
        if len(failed) > len(refused):
            self.result.findings.append(f"{len(failed)} mutating call(s) were not answered, e.g. "
                                        f"{failed[0].kind} {failed[0].object_name or ''}: {failed[0].error}")

    # ------------------------------------------------------------- helpers
    def _wait(self, predicate: Any, timeout: float) -> bool:
        """Wait for ``predicate``; a halted scenario ends the wait (ScenarioHalted)."""
        return wait_for(self._cond, predicate, timeout, self.target.timeline.clock, check=self.result.raise_if_halted)

    def rollback(self) -> None:
        """Stop the load and the starter, delete every pod the run made (load users' and startup pods)."""
        self._stop.set()
        if self.load is not None:
            self.load.stop()
            self.load.__exit__(None, None, None)
        driver, ns = self.target.driver, self.target.profile.namespace
        for selector in (f"{LOAD_LABEL}={self.run_id}", run_selector(self.run_id)):
            try:
                for pod in driver.list(POD, ns, label_selector=selector):
                    try:
                        driver.delete(POD, pod["metadata"]["name"], ns)
                    except KubeError as exc:
                        if exc.code != 404:
                            log.warning("could not delete pod %s: %s", pod["metadata"]["name"], exc)
            except KubeError as exc:
                log.warning("could not list the run's pods (%s): %s", selector, exc)
        if self._tmp is not None:
            self._tmp.cleanup()
