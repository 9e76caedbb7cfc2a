"""A workload mix: what the harness runs on a cluster while it takes a baseline, and how it runs it.

A mix is data (its whole definition enters the baseline's method, so two baselines of different mixes are never
compared) read from a strict YAML file, or the built-in :data:`DEFAULT_MIX`::

    apiVersion: firedrill.dev/v1alpha1      optional; if present, exactly this
    kind: WorkloadMix                        optional; if present, exactly this
    name: default                            required: a name for people
    training:                                training jobs: the canary (docs/WORKLOAD.md), one rank per worker
      - name: train                          a DNS label, unique in the mix
        workers: 2                           ranks, at least 1
        gpusPerWorker: 4                     GPUs each rank holds, at least 1
        computeSeconds: 0.06                 each step: compute (tensor work) ...
        inputSeconds: 0.03                   ... waiting for input (the data pipeline hole) ...
        commSeconds: 0.01                    ... stalled in non-overlapped collectives (the communication hole)
        checkpointEvery: 0                   optional; steps between checkpoints (0: none); default 0
    idle:                                    pods that hold GPUs and run no kernel (a forgotten notebook)
      - name: notebook
        gpus: 2

:class:`MixRunner` submits it on a target (the canary as a Volcano Job, or a batch/v1 Indexed Job on the native
and kueue flavors; idle pods as plain pods), waits until every pod is Running, and deletes it all afterwards.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from drills.kinds.baseline.errors import BaselineUsageError, ObservationError
from drills.kube.driver import POD, RESOURCES, KubeError
from drills.kube.flavors import (RUN_LABEL, TRAINING_JOB_FLAVORS, GangFlavor, VolcanoForm, gang_manifests,
                                 indexed_job, run_selector, valid_dns_label)
from drills.target.connect import Target
from drills.target.profile import API_VERSION
from drills.workloads.canaryjob import CanaryForm, CanaryTraining, canary_job_spec

log = logging.getLogger(__name__)
Obj = dict[str, Any]

__all__ = ["DEFAULT_MIX", "IdlePod", "MixRunner", "TrainingJob", "WorkloadMix", "load_mix", "parse_mix"]

KIND = "WorkloadMix"
PEER_TIMEOUT = 3.0
"""Indexed Job ranks: seconds a rank waits on a lost peer before it exits (as the node-pull drill)."""


@dataclass(frozen=True)
class TrainingJob:
    """A canary training job: ``workers`` ranks of ``gpus_per_worker`` GPUs, each step split into compute,
    input wait and collective stall as asked (the canary measures and logs what each really took)."""

    name: str
    workers: int
    gpus_per_worker: int
    compute_seconds: float
    input_seconds: float = 0.0
    comm_seconds: float = 0.0
    checkpoint_every: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "workers": self.workers, "gpusPerWorker": self.gpus_per_worker,
                "computeSeconds": self.compute_seconds, "inputSeconds": self.input_seconds,
                "commSeconds": self.comm_seconds, "checkpointEvery": self.checkpoint_every}


@dataclass(frozen=True)
class IdlePod:
    """A pod that holds ``gpus`` GPUs and runs no kernel."""

    name: str
    gpus: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gpus": self.gpus}


@dataclass(frozen=True)
class WorkloadMix:
    name: str
    training: tuple[TrainingJob, ...] = ()
    idle: tuple[IdlePod, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The mix as the method records it (every field, defaults written out)."""
        return {"name": self.name, "training": [t.to_dict() for t in self.training],
                "idle": [p.to_dict() for p in self.idle]}

    @property
    def pods(self) -> int:
        return sum(t.workers for t in self.training) + len(self.idle)

    @property
    def gpus(self) -> int:
        return sum(t.workers * t.gpus_per_worker for t in self.training) + sum(p.gpus for p in self.idle)

    def describe(self) -> str:
        parts = [f"{t.name}: {t.workers} x {t.gpus_per_worker} GPUs training (step {t.compute_seconds:g} s compute "
                 f"+ {t.input_seconds:g} s input + {t.comm_seconds:g} s comm)" for t in self.training]
        parts += [f"{p.name}: {p.gpus} GPUs idle" for p in self.idle]
        return f"mix {self.name!r} ({'; '.join(parts) or 'nothing'})"


DEFAULT_MIX = WorkloadMix(
    name="default",
    training=(TrainingJob("train", workers=2, gpus_per_worker=4, compute_seconds=0.06, input_seconds=0.03,
                          comm_seconds=0.01),),
    idle=(IdlePod("notebook", gpus=2),))
"""The mix ``firedrill baseline`` runs on the embedded platform without ``--mix``: one training job of 2 x 4
GPUs that waits on input 30 % and on collectives 10 % of each step, and a 2-GPU pod doing nothing."""

_TOP = ("apiVersion", "kind", "name", "training", "idle")
_TRAINING = ("name", "workers", "gpusPerWorker", "computeSeconds", "inputSeconds", "commSeconds", "checkpointEvery")
_IDLE = ("name", "gpus")


def parse_mix(doc: Any, where: str) -> WorkloadMix:
    """A mix from its YAML document; :class:`BaselineUsageError` lists every problem with its field path."""
    problems: list[str] = []

    def unknown(d: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
        for key in d:
            if key not in allowed:
                problems.append(f"{path}{key}: unknown field (allowed: {', '.join(allowed)})")

    def whole(d: Mapping[str, Any], key: str, path: str, minimum: int, default: int | None = None) -> int:
        value = d.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            problems.append(f"{path}{key}: {value!r} is not a whole number of at least {minimum}")
            return minimum
        return value

    def seconds(d: Mapping[str, Any], key: str, path: str, default: float | None = None) -> float:
        value = d.get(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            problems.append(f"{path}{key}: {value!r} is not a number of seconds of 0 or more")
            return 0.0
        return float(value)

    def name(d: Mapping[str, Any], path: str, seen: set[str]) -> str:
        value = d.get("name")
        if not isinstance(value, str) or not valid_dns_label(value) or len(value) > 20:
            problems.append(f"{path}name: {value!r} is not a DNS label of at most 20 characters (a-z, 0-9, '-')")
            return "x"
        if value in seen:
            problems.append(f"{path}name: {value!r} is used twice; names are unique in a mix")
        seen.add(value)
        return value

    if not isinstance(doc, Mapping):
        raise BaselineUsageError(f"{where}: a workload mix is a YAML mapping (name, training, idle)")
    unknown(doc, _TOP, "")
    if "apiVersion" in doc and doc["apiVersion"] != API_VERSION:
        problems.append(f"apiVersion: {doc['apiVersion']!r}, expected {API_VERSION}")
    if "kind" in doc and doc["kind"] != KIND:
        problems.append(f"kind: {doc['kind']!r}, expected {KIND}")
    mix_name = doc.get("name")
    if not isinstance(mix_name, str) or not mix_name.strip():
        problems.append("name: required, a name for people")
    seen: set[str] = set()
    training: list[TrainingJob] = []
    idle: list[IdlePod] = []
    for key, into in (("training", training), ("idle", idle)):
        items = doc.get(key, [])
        if not isinstance(items, list):
            problems.append(f"{key}: a list")
            continue
        for i, item in enumerate(items):
            path = f"{key}[{i}]."
            if not isinstance(item, Mapping):
                problems.append(f"{key}[{i}]: a mapping")
                continue
            if key == "training":
                unknown(item, _TRAINING, path)
                job = TrainingJob(name(item, path, seen), whole(item, "workers", path, 1),
                                  whole(item, "gpusPerWorker", path, 1), seconds(item, "computeSeconds", path),
                                  seconds(item, "inputSeconds", path, 0.0), seconds(item, "commSeconds", path, 0.0),
                                  whole(item, "checkpointEvery", path, 0, 0))
                if job.compute_seconds + job.input_seconds + job.comm_seconds <= 0:
                    problems.append(f"{path}computeSeconds: a step of 0 s; give the step some time")
                training.append(job)
            else:
                unknown(item, _IDLE, path)
                idle.append(IdlePod(name(item, path, seen), whole(item, "gpus", path, 1)))
    if not training and not idle:
        problems.append("training, idle: the mix runs nothing; list at least one training job or idle pod")
    if problems:
        raise BaselineUsageError(f"{where}: not a workload mix ({len(problems)} problem(s)): " + "; ".join(problems)
                                 + " (docs/CONTRACTS.md, 'Workload mix')")
    return WorkloadMix(str(mix_name).strip(), tuple(training), tuple(idle))


def load_mix(path: Path) -> WorkloadMix:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BaselineUsageError(f"--mix {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BaselineUsageError(f"--mix {path}: not YAML ({exc})") from None
    return parse_mix(doc, f"--mix {path}")


VOLCANO_JOB = RESOURCES[("batch.volcano.sh/v1alpha1", "Job")]
BATCH_JOB = RESOURCES[("batch/v1", "Job")]


class MixRunner:
    """Runs a mix on a target for one baseline; every object carries the run label, so :meth:`stop` finds it all."""

    def __init__(self, target: Target, mix: WorkloadMix, run_id: str, *, mono: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.target, self.mix, self.run_id = target, mix, run_id
        self._mono, self._sleep = mono, sleep
        self._jobs: list[tuple[Any, str]] = []
        self._pods: list[str] = []

    def _pods_now(self) -> list[Obj]:
        return self.target.driver.list(POD, self.target.profile.namespace, label_selector=run_selector(self.run_id))

    def _training(self, job: TrainingJob) -> list[Obj]:
        profile = self.target.profile
        if profile.flavor is GangFlavor.VOLCANO:
            form, resource = CanaryForm.VOLCANO_JOB, VOLCANO_JOB
            training = CanaryTraining(job.workers, job.gpus_per_worker, job.checkpoint_every,
                                      compute_seconds=job.compute_seconds, input_seconds=job.input_seconds,
                                      comm_seconds=job.comm_seconds)
        elif profile.flavor in TRAINING_JOB_FLAVORS:
            form, resource = CanaryForm.INDEXED_JOB, BATCH_JOB
            training = CanaryTraining(job.workers, job.gpus_per_worker, job.checkpoint_every,
                                      compute_seconds=job.compute_seconds, input_seconds=job.input_seconds,
                                      comm_seconds=job.comm_seconds, peer_timeout=PEER_TIMEOUT)
        else:
            raise BaselineUsageError(f"a workload mix runs training as a Volcano Job (flavor volcano) or a batch/v1 "
                                     f"Indexed Job (native, kueue); flavor {profile.flavor.value} has none yet")
        spec = canary_job_spec(f"{job.name}-{self.run_id}", self.run_id, profile, training, form=form)
        self._jobs.append((resource, spec.name))
        return ([indexed_job(spec, profile.flavor)] if form is CanaryForm.INDEXED_JOB
                else gang_manifests(spec, profile.flavor, VolcanoForm.JOB))

    def _idle(self, pod: IdlePod) -> Obj:
        profile = self.target.profile
        name = f"{pod.name}-{self.run_id}"
        self._pods.append(name)
        gpus = {profile.gpu_resource: str(pod.gpus)}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": profile.namespace, "labels": {RUN_LABEL: self.run_id},
                             "annotations": {"firedrill.dev/workload": "idle"}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "idle", "image": profile.canary_image,
                    "resources": {"limits": gpus, "requests": gpus}}]}}

    def start(self, timeout: float = 90.0) -> None:
        """Submit the mix and wait until every pod of it is Running; :class:`ObservationError` otherwise."""
        manifests: list[Obj] = []
        for job in self.mix.training:
            manifests += self._training(job)
        manifests += [self._idle(p) for p in self.mix.idle]
        for obj in manifests:
            self.target.driver.create(obj)
        deadline = self._mono() + timeout
        while True:
            pods = self._pods_now()
            running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
            if len(running) >= self.mix.pods:
                return
            if self._mono() >= deadline:
                states = ", ".join(f"{p['metadata']['name']} {(p.get('status') or {}).get('phase', 'Pending')}"
                                   for p in pods) or "no pod"
                raise ObservationError(f"the {self.mix.describe()} was not Running whole within {timeout:g} s "
                                       f"({len(running)} of {self.mix.pods} pods Running: {states}); the cluster "
                                       f"needs {self.mix.gpus} free GPUs in the shapes the mix asks for")
            self._sleep(0.25)

    def not_running(self) -> list[str]:
        """Pods of the mix that are not Running now (a rank that crashed, a pod evicted): said in the baseline."""
        pods = self._pods_now()
        out = [f"{p['metadata']['name']} {(p.get('status') or {}).get('phase', 'Pending')}" for p in pods
               if (p.get("status") or {}).get("phase") != "Running"]
        if len(pods) < self.mix.pods:
            out.append(f"{self.mix.pods - len(pods)} pod(s) of the mix are gone")
        return out

    def stop(self, timeout: float = 60.0) -> None:
        """Delete everything the mix made and wait until its pods are gone; never raises."""
        ns = self.target.profile.namespace
        try:
            for resource, name in self._jobs:
                self.target.driver.delete(resource, name, ns)
            for obj in self._pods_now():
                self.target.driver.delete(POD, obj["metadata"]["name"], ns, grace_seconds=0)
            deadline = self._mono() + timeout
            while self._pods_now():
                if self._mono() >= deadline:
                    log.warning("pods of baseline mix %s still exist %g s after it was stopped", self.run_id, timeout)
                    return
                self._sleep(0.25)
        except KubeError as exc:
            log.warning("could not delete everything of baseline mix %s: %s", self.run_id, exc)

