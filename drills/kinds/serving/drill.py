"""The serving drill itself: deploy, load, act, observe, judge, roll back (the package docstring says what
it promises)."""

from __future__ import annotations

import logging
import tempfile
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from drills.errors import FiredrillError
from drills.kinds.serving.judge import autoscaler_blind, lost_findings, sla_back
from drills.kinds.serving.manifests import (BURST_SHAPE, DEPLOYMENT, HPA, LOW_PRIORITY, PORT, PRIORITY_CLASS,
                                            QUEUE_METRIC, SERVICE, SERVICE_NAME, Autoscale, ServiceShape, hpa_manifest,
                                            inference_manifests, service_url)
from drills.kinds.serving.replicas import (ENDPOINT_SLICE, SERVED_METRIC, SCRAPE_EVERY, Reading, first_served_by_new,
                                           metric_value, pod_ready, prometheus_readings, queue_crossing,
                                           ready_endpoint_addresses)
from drills.kube.driver import NODE, POD, KubeError
from drills.kube.flavors import RUN_LABEL, run_selector
from drills.kube.timeline import wait_for
from drills.load.run import LoadError, LoadRun, LoadSpec, LoadUser, Outcome, Sample, nearest_rank, totals
from drills.load.series import series
from drills.records.verdict import DrillInconclusive, Measurement, Verdict
from drills.scenario.drill import Drill, register
from drills.target.access import CLUSTER, READ, Permission, grant
from drills.target.faults import FaultRecord
from drills.target.profile import FaultMethod, TargetProfile
from drills.target.safety import check_blast_radius, eligible_nodes
from drills.workloads.canarylog import CanaryEvent
from drills.workloads.training import TrainingRun, training_permissions

log = logging.getLogger(__name__)
Obj = dict[str, Any]

READY_TIMEOUT = 60.0
"""Seconds the service may take to have every replica Ready and an address that answers."""


ROLLBACK_TIMEOUT = 40.0
"""Seconds the rollback waits for the service's pods to be gone (a draining replica takes up to 10 s)."""


BASELINE_MIN_S = 1.0
"""The load runs at least this long before the act, so a steady state can be checked."""


NO_IMAGE = ("the serving drills need the inference canary's image on a real cluster; build it from "
            "drills/inference/Containerfile and set inference.image in the target profile (docs/PROFILE.md)")


@register
@dataclass
class ServingDrill(Drill):
    kind: ClassVar[str] = "serving"
    slurm_absent: ClassVar[str] = ("Slurm runs batch jobs and has no Service, no replicas of a server and no "
                                   "autoscaler, so requests answered through a fault and replicas added under load "
                                   "have nothing to act on there")

    @classmethod
    def unsupported(cls, profile: TargetProfile, *, reference: bool) -> str | None:
        if profile.inference.image is None and not reference:
            return NO_IMAGE
        return None

    @classmethod
    def permissions(cls, profile: TargetProfile) -> list[Permission]:
        ns, why = profile.namespace, "serving"
        out = grant(ns, "", "pods", READ, why)
        out += grant(ns, "apps", "deployments", ("create", "delete"), f"{why}: the inference canary")
        out += grant(ns, "", "services", ("get", "create", "delete"), f"{why}: the inference canary's Service")
        out += grant(ns, "autoscaling", "horizontalpodautoscalers", ("get", "create", "patch", "delete"),
                     f"{why}: scaling out and in, and whether the autoscaler could read its metric")
        out += grant(ns, "discovery.k8s.io", "endpointslices", ("list",), f"{why}: why no request was answered")
        out += grant(CLUSTER, "", "nodes", ("list", "patch"), f"{why}: draining a replica's node (cordon, uncordon)")
        out += grant(ns, "", "pods", ("create",), f"{why}: draining a replica's node", subresource="eviction")
        out += grant(CLUSTER, "scheduling.k8s.io", "priorityclasses", ("create", "delete"),
                     f"{why}: the low class of the training that shares the cluster")
        return out + training_permissions(profile, f"{why}: training that shares the cluster")

    name: str = ""
    service_name: str = ""
    replicas: int = 0
    shape: ServiceShape = field(default_factory=ServiceShape)
    pods: dict[str, Obj] = field(default_factory=dict)
    url: str | None = None
    load: LoadRun | None = None
    load_started: float | None = None
    act_mono: float | None = None
    cordoned: str | None = None
    pulled: FaultRecord | None = None
    """The fault that pulled a replica's node: the rollback undoes it before it waits for the replicas to go (a
    hung or dead node confirms no deletion until it is back)."""
    samples: tuple[Sample, ...] = ()
    autoscale: Autoscale | None = None
    users: int = 0
    retries: int = 0
    burst_load: LoadRun | None = None
    jump_mono: float | None = None
    end_mono: float | None = None
    serving_before: set[str] = field(default_factory=set)
    """Replicas (pod names) that were Ready when the load jumped."""
    readings: list[Reading] = field(default_factory=list)
    ready_series: list[tuple[float, int]] = field(default_factory=list)
    """(harness monotonic instant, Ready replicas) at each change, for the evidence's scale events."""
    training: TrainingRun | None = None
    """Low-priority canary training sharing the cluster (it runs the canary and follows its log)."""
    low_class: str | None = None
    burst_samples: list[Sample] = field(default_factory=list)
    burst_end_mono: float | None = None
    burst_locust: int = 0
    """Locust's own request total of the burst's users (their process ends with the burst)."""
    _scraper: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _tmp: tempfile.TemporaryDirectory[str] | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)

    # ------------------------------------------------------------- steady state
    def deploy(self, replicas: int, gpus: int, autoscale: Autoscale | None = None) -> None:
        """Create the service (with its autoscaler) and wait until every replica is Ready and the service has an
        address."""
        profile, driver = self.target.profile, self.target.driver
        self.name, self.replicas, self.autoscale = f"infer-{self.run_id}"[:40], replicas, autoscale
        image = profile.inference.image or (profile.canary_image if self.target.embedded is not None else None)
        if image is None:
            raise DrillInconclusive(NO_IMAGE)
        if autoscale is not None:
            self.shape = BURST_SHAPE
        driver.watch(POD, profile.namespace, label_selector=f"{run_selector(self.run_id)},app={self.name}",
                     on_event=self._on_pod)
        manifests = inference_manifests(self.name, self.run_id, profile.namespace, image, replicas,
                                        gpus, profile.gpu_resource, self.shape, command=profile.inference.command,
                                        warmup_s=autoscale.warmup_s if autoscale else 0.0)
        if profile.inference.url is not None:  # the customer's route points at a Service of a fixed name
            manifests[1]["metadata"]["name"] = SERVICE_NAME
            self.url = profile.inference.url.rstrip("/")
        self.service_name = manifests[1]["metadata"]["name"]
        if autoscale is not None:
            manifests.append(hpa_manifest(self.name, self.run_id, profile.namespace, replicas, autoscale))
        for obj in manifests:
            try:
                driver.create(obj)
            except KubeError as exc:
                if obj["kind"] == "HorizontalPodAutoscaler" and exc.code == 404:
                    raise DrillInconclusive("the cluster serves no autoscaling/v2 HorizontalPodAutoscaler; a burst "
                                            "cannot be absorbed by scaling out here") from None
                raise
        self.target.timeline.action("serving deployed", target=self.name, replicas=replicas, gpus=gpus)
        if not self._wait(lambda: len(self._ready()) >= replicas, READY_TIMEOUT):
            raise DrillInconclusive(f"the inference service {self.name} did not have {replicas} Ready replicas within "
                                    f"{READY_TIMEOUT:g} s, so there is no steady state to disturb; pods: "
                                    f"{self._pod_summary()}")
        clock = self.target.timeline.clock
        deadline = clock.mono() + READY_TIMEOUT
        while self.url is None:
            svc = driver.find(SERVICE, self.service_name, profile.namespace) or {}
            self.url = service_url(svc)
            if self.url is None:
                if clock.mono() >= deadline:
                    raise DrillInconclusive(
                        f"Service {profile.namespace}/{self.service_name} (type LoadBalancer) got no address within "
                        f"{READY_TIMEOUT:g} s: the cluster has no load-balancer controller, or it is slow. Install "
                        "one (MetalLB, a cloud's) so status.loadBalancer.ingress is set, or set inference.url in the "
                        "target profile to a route to Service firedrill-inference (docs/PROFILE.md, Inference)")
                self.pause(0.2)
        self.result.details["service"] = {"name": self.name, "replicas": replicas, "gpus_per_replica": gpus,
                                          "url": self.url, "nodes": sorted(self._nodes())}
        if autoscale is not None:
            self.result.details["service"]["autoscale"] = {
                "max_replicas": autoscale.max_replicas, "metric": QUEUE_METRIC,
                "waiting_per_replica": autoscale.waiting_per_replica, "warmup_s": autoscale.warmup_s}
            self._scraper = threading.Thread(target=self._scrape_loop, name="replica-metrics", daemon=True)
            self._scraper.start()

    def _scrape_loop(self) -> None:
        """Read every running replica's own /metrics (its queue and served count) until the drill ends."""
        clock = self.target.timeline.clock
        while not self._stop.wait(SCRAPE_EVERY):
            with self._cond:
                pods = [(p["metadata"]["name"], (p.get("status") or {}).get("podIP")) for p in self.pods.values()
                        if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get(
                            "deletionTimestamp")]
            read_any = False
            for name, ip in pods:
                if not ip:
                    continue
                try:
                    with urllib.request.urlopen(f"http://{ip}:{PORT}/metrics", timeout=0.5) as resp:
                        text = resp.read().decode("utf-8", "replace")
                except (OSError, urllib.error.URLError):
                    continue
                read_any = True
                reading = Reading(clock.mono(), name, metric_value(text, QUEUE_METRIC),
                                  metric_value(text, SERVED_METRIC))
                with self._cond:
                    self.readings.append(reading)
            prometheus = self.target.profile.leak_report.prometheus_url
            if not read_any and pods and prometheus is not None:
                found = prometheus_readings(prometheus, self.target.profile.namespace, self.name, clock.mono())
                with self._cond:
                    self.readings.extend(found)

    def start_load(self, users: int, retries: int, timeout_s: float = 10.0) -> None:
        """Start locust's inference users against the service (until the drill stops them)."""
        assert self.url is not None, "deploy the service first"
        self._tmp = tempfile.TemporaryDirectory(prefix=f"firedrill-load-{self.run_id}-")
        spec = LoadSpec(host=self.url, out_dir=Path(self._tmp.name), users=users, spawn_rate=float(users),
                        duration_s=3600.0, retries=retries, request_timeout_s=timeout_s,
                        max_tokens=self.shape.max_tokens, run_id=self.run_id, user_classes=(LoadUser.INFERENCE,),
                        keep_alive=False)
        try:
            self.load = LoadRun(spec)
        except LoadError as exc:
            raise DrillInconclusive(f"the load generator could not start: {exc}") from None
        self.load_started = self.target.timeline.clock.mono()
        self.users, self.retries = users, retries
        self.target.timeline.action("load started", target=self.url, users=users, retries=retries)
        self.result.details["load"] = {"users": users, "retries": retries, "retry_on": "no status line, 429, 503",
                                       "silent_timeout_s": timeout_s,
                                       "command": self.load.portable_command()}

    def _let_load_run(self, seconds: float) -> None:
        assert self.load is not None and self.load_started is not None, "start the load first"
        clock = self.target.timeline.clock
        remaining = self.load_started + seconds - clock.mono()
        if remaining > 0:
            self.pause(remaining)
        if self.load.proc.poll() is not None:
            raise DrillInconclusive(f"the load generator exited early (code {self.load.proc.returncode}); "
                                    f"see {self.load.spec.out_dir / 'locust.log'}")
        self._check_steady_state()

    def _check_steady_state(self) -> None:
        """Before any act: the service must have answered the users, or the act proves nothing (INCONCLUSIVE,
        saying what the users saw and what the Service's EndpointSlices list)."""
        assert self.load is not None
        try:
            sent = [s for s in self.load.samples() if s.kind == "inference"]
        except LoadError:
            return
        if not sent or any(s.outcome is Outcome.ANSWERED for s in sent):
            return
        first = next((s.error for s in sent if s.error), "no answer")
        ready = ready_endpoint_addresses(self.target.driver.list(
            ENDPOINT_SLICE, self.target.profile.namespace,
            label_selector=f"kubernetes.io/service-name={self.service_name}"))
        with self._cond:
            ips = sorted((p.get("status") or {}).get("podIP") or "?" for p in self._ready())
        where = (f"Service {self.target.profile.namespace}/{self.service_name} has no ready endpoint in its "
                 f"EndpointSlices although {len(ips)} replica(s) are Ready (pod IPs {', '.join(ips)}); the cluster "
                 "published none of them, so nothing could reach a replica" if not ready else
                 f"its EndpointSlices list {len(ready)} ready endpoint(s) ({', '.join(ready)})")
        raise DrillInconclusive(f"the service answered none of the {len(sent)} requests sent before the act "
                                f"(first error: {first}), so the act would prove nothing: {where}")

    # ----------------------------------------------------------------- act
    def _victim_node(self) -> tuple[str, list[Obj]]:
        with self._cond:
            ready = sorted(self._ready(), key=lambda p: p["metadata"]["name"])
            if not ready:
                raise DrillInconclusive(f"no replica of {self.name} is Ready; pods: {self._pod_summary()}")
            node = ready[0]["spec"]["nodeName"]
            on_node = [p for p in self.pods.values() if (p.get("spec") or {}).get("nodeName") == node]
        if self.target.embedded is None:
            all_nodes = self.target.driver.list(NODE)
            chosen = [n for n in eligible_nodes(all_nodes, self.target.profile.safety) if n["metadata"]["name"] == node]
            if not chosen:
                raise DrillInconclusive(f"node {node} (of replica {ready[0]['metadata']['name']}) is not eligible for "
                                        f"faults: it lacks the allow label {self.target.profile.safety.allow_label} "
                                        "or is a control-plane node")
            check_blast_radius(chosen, all_nodes, self.target.profile.safety, self.target.profile.gpu_resource)
        return node, on_node

    def drain(self, after_s: float) -> None:
        """After ``after_s`` of load: cordon the node of one replica and evict the drill's pods on it (Eviction API),
        as ``kubectl drain`` does; the rollback uncordons it."""
        self._let_load_run(max(after_s, BASELINE_MIN_S))
        node, on_node = self._victim_node()
        driver = self.target.driver
        driver.patch(NODE, node, {"spec": {"unschedulable": True}})
        self.cordoned = node
        self.act_mono = self.target.timeline.clock.mono()
        self.target.timeline.action("drain", target=node, pods=[p["metadata"]["name"] for p in on_node])
        for pod in on_node:
            meta = pod["metadata"]
            body = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": meta["name"], "namespace": meta.get("namespace")}}
            try:
                driver.request("POST", POD.path(meta.get("namespace"), meta["name"], "eviction"), body)
            except KubeError as exc:
                raise DrillInconclusive(f"could not evict {meta['name']} from {node}: {exc}") from None
        self.result.details["act"] = {"kind": "drain", "node": node,
                                      "evicted": sorted(p["metadata"]["name"] for p in on_node)}

    def pull(self, after_s: float, method: FaultMethod) -> None:
        """After ``after_s`` of load: pull the node of one replica with a fault method."""
        self._let_load_run(max(after_s, BASELINE_MIN_S))
        node, _ = self._victim_node()
        record = self.pulled = self.target.pull(node, method, self.run_id)
        self.result.details["act"] = {"kind": "pull", "node": node, "method": method.value,
                                      "confirmed": record.confirmed, "detail": record.detail}
        if not record.confirmed:
            self.result.inconclusive(f"the {method.value} fault on {node} could not be confirmed ({record.detail}); "
                                     "no service level is claimed")
        clock = self.target.timeline.clock
        self.act_mono = record.acted_at if record.acted_at is not None else clock.mono()

    def burst(self, factor: int, after_s: float) -> None:
        """After ``after_s`` of load, the load jumps to ``factor`` times its users: a second locust process with
        the extra users, all arriving at once, with the same retry policy."""
        assert self.load is not None and self.url is not None, "start the load first"
        self._let_load_run(max(after_s, BASELINE_MIN_S))
        extra = self.users * (factor - 1)
        spec = LoadSpec(host=self.url, out_dir=self.load.spec.out_dir / "burst", users=extra,
                        spawn_rate=float(extra), duration_s=3600.0, retries=self.retries,
                        request_timeout_s=self.load.spec.request_timeout_s,
                        max_tokens=self.shape.max_tokens, run_id=f"{self.run_id}b", user_classes=(LoadUser.INFERENCE,),
                        keep_alive=False)
        with self._cond:
            self.serving_before = {p["metadata"]["name"] for p in self._ready()}
        try:
            self.burst_load = LoadRun(spec)
        except LoadError as exc:
            raise DrillInconclusive(f"the burst's load generator could not start: {exc}") from None
        self.jump_mono = self.act_mono = self.target.timeline.clock.mono()
        self.target.timeline.action("load jumped", target=self.url, users=self.users * factor)
        self.result.details["act"] = {"kind": "burst", "factor": factor, "users_before": self.users,
                                      "users_after": self.users * factor, "serving_before": sorted(self.serving_before)}

    def scale_in_after(self, window_s: float) -> None:
        """Shorten the autoscaler's scale-down stabilization window (upstream's default is 300 s)."""
        if self.autoscale is None:
            raise ValueError("no autoscaled service in this scenario; write 'an inference service of ... scaling "
                             "out to ...' first")
        self.target.driver.patch(HPA, self.name, {"spec": {"behavior": {"scaleDown": {
            "stabilizationWindowSeconds": int(round(window_s))}}}}, self.target.profile.namespace)
        self.result.details["service"].setdefault("autoscale", {})["scale_down_window_s"] = window_s

    def share_with_training(self, workers: int, gpus: int, every: int) -> None:
        """Low-priority canary training fills idle GPUs: a PriorityClass below the default, and the canary job at
        it, checkpointing every ``every`` steps and, when told to stop (preempted), at its last completed step."""
        driver = self.target.driver
        self.low_class = f"firedrill-low-{self.run_id}"
        driver.create({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                       "metadata": {"name": self.low_class, "labels": {RUN_LABEL: self.run_id}},
                       "value": LOW_PRIORITY, "preemptionPolicy": "Never",
                       "description": "Firedrill: training that fills idle GPUs and yields to inference"})
        self.training = TrainingRun(self.target, self.result, self.run_id)
        self.training.start_canary(workers, gpus, every, priority_class=self.low_class, checkpoint_on_sigterm=True)
        self.result.details["training"] = {"workers": workers, "gpus_per_worker": gpus, "checkpoint_every": every,
                                           "priority_class": self.low_class, "priority": LOW_PRIORITY}

    def end_burst(self, after_s: float) -> None:
        """``after_s`` after the jump, the extra users leave (each finishes the request it is in)."""
        if self.burst_load is None or self.jump_mono is None:
            raise ValueError("no burst in this scenario; write 'the load jumps to ... times its users ...' first")
        remaining = self.jump_mono + after_s - self.target.timeline.clock.mono()
        if remaining > 0:
            self.pause(remaining)
        self.burst_load.stop()
        try:
            outcome = self.burst_load.wait(timeout_s=self.burst_load.deadline_s())
        except LoadError as exc:
            raise DrillInconclusive(f"the burst's load generator's results could not be read: {exc}") from None
        self.burst_samples = [s for s in outcome.samples if s.kind == "inference"]
        self.burst_locust = outcome.locust.requests
        self.burst_load = None
        self.burst_end_mono = self.target.timeline.clock.mono()
        self.target.timeline.action("burst ended", target=self.url or "", users=self.users)
        self.result.details.setdefault("burst", {})["ended_s"] = round(self.burst_end_mono - self.jump_mono, 3)

    def go_on(self, seconds: float) -> None:
        """Keep the load going ``seconds`` after the act, then stop it (each user finishes the request it is in)."""
        assert self.load is not None, "start the load first"
        clock = self.target.timeline.clock
        start = next((t for t in (self.burst_end_mono, self.act_mono) if t is not None), clock.mono())
        remaining = start + seconds - clock.mono()
        if remaining > 0:
            self.pause(remaining)
        self.end_mono = clock.mono()
        loads = [run for run in (self.load, self.burst_load) if run is not None]
        for run in loads:
            run.stop()
        samples: list[Sample] = list(self.burst_samples)
        locust_total = self.burst_locust
        for run in loads:
            try:
                outcome = run.wait(timeout_s=run.deadline_s())
            except LoadError as exc:
                raise DrillInconclusive(f"the load generator's results could not be read: {exc}") from None
            samples += [s for s in outcome.samples if s.kind == "inference"]
            locust_total += outcome.locust.requests
        self._stop.set()
        self.samples = tuple(sorted(samples, key=lambda s: s.start_mono))
        self.target.timeline.action("load stopped", target=self.url or "", sent=len(self.samples))
        self._record(locust_total)

    def live_details(self) -> dict[str, Any]:
        """While the load runs: the requests' per-second series so far (from the act, or from the load's start before
        it) and the Ready replica changes, as :meth:`_record` will record them at the end."""
        if self.samples or self.load is None:
            return {}
        origin = self.act_mono if self.act_mono is not None else self.load_started
        runs = [run for run in (self.load, self.burst_load) if run is not None]
        try:
            samples = [*self.burst_samples, *(s for run in runs for s in run.samples())]
        except LoadError:
            return {}
        samples = [s for s in samples if s.kind == "inference"]
        if origin is None or not samples:
            return {}
        return {"series": series(samples, origin),
                "replicas_ready": [{"t": round(t - origin, 3), "ready": n} for t, n in list(self.ready_series)]}

    # ------------------------------------------------------------- judge
    def _record(self, locust_requests: int) -> None:
        samples, act = self.samples, self.act_mono
        t = totals(samples)
        before = [s for s in samples if act is not None and s.end_mono < act]
        self.result.details["requests"] = {"sent": t.sent, "answered": t.answered, "failed": t.failed,
                                           "lost": t.lost, "retried": sum(s.attempts > 1 for s in samples),
                                           "locust_total": locust_requests}
        origin = act if act is not None else (self.load_started or 0.0)
        self.result.details["series"] = series(samples, origin)
        self.result.details["replicas_ready"] = [{"t": round(t - origin, 3), "ready": n} for t, n in self.ready_series]
        if not any(s.outcome is Outcome.ANSWERED for s in before):
            self.result.inconclusive(f"no request was answered before the act ({len(before)} sent), so the service "
                                     "was not serving and the act proves nothing")
        answered = [s.ttft_s for s in samples if s.outcome is Outcome.ANSWERED and s.ttft_s is not None]
        self.result.measure(Measurement("p99 time to first token", nearest_rank(answered, 99) if answered else None,
                                        "s", note="" if answered else "no request was answered"))
        self.result.measure(Measurement("error rate", 100.0 * t.error_rate if t.sent else None, "%",
                                        note=f"{t.sent - t.answered} of {t.sent} requests not answered"))
        self.result.measure(Measurement("requests lost", float(t.lost) if t.sent else None, "requests",
                                        note=f"of {t.sent} sent"))
        for finding in lost_findings(samples, act):
            self.result.findings.append(finding)

    def measure_new_replica(self) -> None:
        """``time to a new replica serving``: from the replicas' mean queue crossing the autoscaler's threshold
        (their own /metrics, read by the harness) to the first request served by a replica that was not
        serving when the load jumped (its own served count)."""
        name = "time to a new replica serving"
        if self.autoscale is None or self.jump_mono is None:
            raise ValueError("no autoscaled service and burst in this scenario; write 'an inference service of ... "
                             "scaling out to ...' and 'the load jumps to ... times its users ...' before this step")
        with self._cond:
            readings = list(self.readings)
        if not readings:
            self.result.inconclusive(
                "the harness read no replica's own /metrics (http://<podIP>:8000/metrics): it cannot reach the "
                "pods' IPs from where it runs. Run it where pod IPs are routable, or set prometheus.url in the target "
                "profile to a Prometheus that scrapes the replicas (docs/PROFILE.md, Inference)")
            return
        crossed = queue_crossing(readings, self.jump_mono, self.autoscale.waiting_per_replica)
        if crossed is None:
            self.result.inconclusive(f"the replicas' queue never rose above {self.autoscale.waiting_per_replica} "
                                     "waiting requests per replica after the jump, so scaling out was never due; "
                                     "make the burst larger")
            return
        served = first_served_by_new([r for r in readings if r.mono >= crossed], self.serving_before)
        self.result.details.setdefault("burst", {})["queue_crossed_s"] = round(crossed - self.jump_mono, 3)
        if served is None:
            self.result.measure(Measurement(name, None, "s", note=f"no new replica served before the load stopped "
                                            f"({(self.end_mono or crossed) - crossed:.1f} s after the crossing)"))
            self._autoscaler_could_scale()
            return
        self.result.details["burst"]["first_new_replica"] = served[1]
        self.result.measure(Measurement(name, served[0] - crossed, "s", note=f"replica {served[1]}"))

    def _autoscaler_could_scale(self) -> None:
        """No new replica served: a FAIL, unless the HPA says it could not read its metric at all (its
        ``ScalingActive`` condition False): then the cluster lacks a prerequisite of the scenario (a metrics API),
        nothing it measures about absorbing the burst is the platform's doing, and the scenario ends INCONCLUSIVE
        here, quoting the HPA and naming what the cluster needs. A FAIL already found stands."""
        try:
            hpa = self.target.driver.find(HPA, self.name, self.target.profile.namespace)
        except KubeError as exc:
            self.result.findings.append(f"the HorizontalPodAutoscaler {self.name} could not be read ({exc}), so "
                                        "whether it could read its metric is unknown")
            return
        blind = autoscaler_blind(hpa, QUEUE_METRIC)
        if blind is None:
            return
        self.result.details.setdefault("burst", {})["autoscaler"] = (hpa or {}).get("status")
        why = (f"no new replica served, and {blind}; the scenario cannot tell whether this platform absorbs a "
               "burst until its autoscaler can read the queue")
        if self.result.verdict is Verdict.FAIL:
            self.result.findings.append(why)
            return
        raise DrillInconclusive(why)

    def measure_sla_back(self, ttft_s: float) -> None:
        """``time until the SLA holds again``: from the jump (or the pull) to the start of the last unbroken run of one-second
        buckets whose p99 TTFT is within ``ttft_s`` and whose requests were all answered."""
        name = "time until the SLA holds again"
        origin = self.jump_mono if self.jump_mono is not None else self.act_mono
        if origin is None:
            raise ValueError("no act in this scenario; write 'the load jumps to ...' or 'the node of one replica is "
                             "pulled ...' first")
        back = sla_back(self.samples, origin, self.end_mono or origin, ttft_s)
        self.result.measure(Measurement(name, back, "s", note="" if back is not None else
                                        f"the last second of the run still missed p99 TTFT <= {ttft_s:g} s"))

    def measure_training(self, timeout: float = 0.0) -> None:
        """From the training canary's own log: where it resumed after the burst (it must be the step rank 0 stopped
        at when preempted: the checkpoint it wrote on SIGTERM, or the periodic one it had just written,
        :meth:`CanaryLog.preemption`), how long after the burst's end, and the GPU-seconds of work it must redo. Waits up
        to ``timeout`` for a preempted training to resume (the log keeps being followed after the load stops)."""
        if self.training is None:
            raise ValueError("no training shares the cluster in this scenario; write 'low-priority canary training "
                             "of ... fills the idle GPUs ...' first")
        log_ = self.training.canary
        spec = self.training.spec
        assert spec is not None

        def resumed() -> bool:
            stop = log_.preemption()
            return stop is not None and bool(log_.resumptions(exclude={ln.uid for ln in log_.snapshot()
                                                                       if ln.mono <= stop.mono}))
        clock = self.target.timeline.clock
        deadline = clock.mono() + timeout
        while log_.preemption() is not None and not resumed() and clock.mono() < deadline:  # never preempted: no wait
            self.pause(0.2)
        stop = log_.preemption()
        resume_name, lost_name = "training resume after the burst", "training GPU-seconds lost"
        if stop is None:
            note = "the training was never preempted (rank 0 of it neither checkpointed nor exited on SIGTERM)"
            self.result.measure(Measurement(resume_name, None, "s", note=note))
            self.result.measure(Measurement(lost_name, None, "GPU-s", note=note))
            return
        stopped_at = stop.step or 0
        old = {ln.uid for ln in log_.snapshot() if ln.mono <= stop.mono}
        found = log_.resumptions(exclude=old)
        self.result.details["training"]["preempted_at_step"] = stopped_at
        if not found:
            note = f"no rank resumed after the preemption at step {stopped_at} (the canary's own log)"
            self.result.measure(Measurement(resume_name, None, "s", note=note))
            self.result.measure(Measurement(lost_name, None, "GPU-s", note=note))
            return
        r = found[0]
        self.result.details["training"]["resumed_from_step"] = r.from_step
        if r.from_step != stopped_at:
            self.result.fail(f"training resumed from step {r.from_step}, but step {stopped_at} was checkpointed when "
                             f"it was preempted (rank {r.rank}, pod {r.pod}; the canary's own log)")
        origin = self.burst_end_mono if self.burst_end_mono is not None else (self.jump_mono or 0.0)
        self.result.measure(Measurement(resume_name, max(0.0, r.first_step.mono - origin), "s",
                                        note=f"resumed from step {r.from_step} (rank {r.rank})"))
        done = max((ln.step or 0 for ln in log_.of(CanaryEvent.STEP) if ln.uid in old), default=0)
        step_s = log_.median_step_seconds() or 0.0
        gpus = spec.workers * spec.gpus_per_worker
        self.result.measure(Measurement(lost_name, max(0, done - r.from_step) * step_s * gpus, "GPU-s",
                                        note=f"{max(0, done - r.from_step)} step(s) of {step_s:.3f} s on {gpus} "
                                             f"GPUs to redo: reached step {done}, resumed from {r.from_step}"))

    # ------------------------------------------------------------- watches and helpers
    def _on_pod(self, event: str, obj: Obj) -> None:
        with self._cond:
            if event == "DELETED":
                self.pods.pop(obj["metadata"]["name"], None)
            else:
                self.pods[obj["metadata"]["name"]] = obj
            ready = len(self._ready())
            if not self.ready_series or self.ready_series[-1][1] != ready:
                self.ready_series.append((self.target.timeline.clock.mono(), ready))
            self._cond.notify_all()

    def _ready(self) -> list[Obj]:
        return [p for p in self.pods.values() if pod_ready(p)]

    def _nodes(self) -> set[str]:
        return {(p.get("spec") or {}).get("nodeName", "") for p in self._ready()}

    def _pod_summary(self) -> str:
        return ", ".join(f"{n}={(p.get('status') or {}).get('phase')}@{(p.get('spec') or {}).get('nodeName')}"
                         for n, p in sorted(self.pods.items())) or "none"

    def _wait(self, predicate: Any, timeout: float) -> bool:
        """Wait for ``predicate``; a halted scenario ends the wait (ScenarioHalted)."""
        return wait_for(self._cond, predicate, timeout, self.target.timeline.clock, check=self.result.raise_if_halted)

    def rollback(self) -> None:
        """Stop the load, undo the pull of a pulled node, uncordon a drained node, delete the service, its
        autoscaler and its pods."""
        self._stop.set()
        for run in (self.load, self.burst_load):
            if run is not None:
                run.stop()
                run.__exit__(None, None, None)
        driver, ns = self.target.driver, self.target.profile.namespace
        if self.pulled is not None:
            try:
                self.target.restore(self.pulled)
            except (FiredrillError, OSError) as exc:  # a KubeError or a FaultError: the rest must still run
                log.warning("could not undo the %s fault on %s: %s", self.pulled.method.value, self.pulled.node, exc)
            self.pulled = None
        if self.cordoned is not None:
            driver.patch(NODE, self.cordoned, {"spec": {"unschedulable": False}})
        if self.name:
            for res, name in [*([(HPA, self.name)] if self.autoscale is not None else []),
                              (SERVICE, self.service_name or self.name), (DEPLOYMENT, self.name)]:
                try:
                    driver.delete(res, name, ns)
                except KubeError as exc:
                    if exc.code != 404:
                        log.warning("could not delete %s %s: %s", res.kind, name, exc)
            # the next scenario needs the GPUs back: wait (bounded) for the replicas to be gone
            if not self._wait(lambda: not self.pods, ROLLBACK_TIMEOUT):
                log.warning("replicas of %s still there %g s after the rollback: %s", self.name, ROLLBACK_TIMEOUT,
                            self._pod_summary())
        if self.training is not None:
            self.training.rollback()
        if self.low_class is not None:
            try:
                driver.delete(PRIORITY_CLASS, self.low_class)
            except KubeError as exc:
                if exc.code != 404:
                    log.warning("could not delete PriorityClass %s: %s", self.low_class, exc)
        if self._tmp is not None:
            self._tmp.cleanup()
