"""The training canary as a job: the workload every training drill runs and reads.

One task ``worker`` of ``workers`` pods, each running the canary image's
entry point (``firedrill-canary train ...``, ``docs/WORKLOAD.md``), in one of
three forms (:class:`CanaryForm`).  What each rank needs comes through
standard Kubernetes means, so the same manifest runs on the reference platform
and on a real cluster:

- ``RANK`` from the pod's ``volcano.sh/task-index`` annotation and the restart
  generation from ``volcano.sh/job-version`` (both set by Volcano's job
  controller); in a batch/v1 Indexed Job from ``batch.kubernetes.io/job-completion-index``
  (one generation: a rank that lost a peer exits after ``--peer-timeout`` and the
  Job controller starts it again); ``POD_IP`` from ``status.podIP`` (downward API);
- ``WORLD_SIZE`` from the drill;
- checkpoints and the file rendezvous on the profile's shared volume
  (``canary.shared_volume``: a ReadWriteMany claim or nfs export on a real
  cluster; the reference platform serves its own nfs), under a directory of
  this run and job alone.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from drills.kube.flavors import JOB_COMPLETION_INDEX_ANNOTATION, WORKER_INDEX_LABEL, GangSpec
from drills.records.verdict import DrillInconclusive
from drills.target.profile import TargetProfile

__all__ = ["MOUNT", "CanaryForm", "CanaryTraining", "canary_job_spec", "gpu_holder", "gpu_taint_toleration"]

MOUNT = "/firedrill"
"""Where the shared volume is mounted in every rank."""
VOLUME = "firedrill-shared"


class CanaryForm(enum.Enum):
    """Which object runs the canary's ranks, and so where each rank reads its rank and generation."""

    VOLCANO_JOB = "volcano-job"
    """A Volcano Job: rank from ``volcano.sh/task-index``, generation from ``volcano.sh/job-version``;
    Volcano restarts the whole job on PodEvicted/PodFailed."""
    INDEXED_JOB = "indexed-job"
    """A batch/v1 Indexed Job: rank from ``batch.kubernetes.io/job-completion-index``, one generation; the Job
    controller replaces the pod of a lost index and the survivors exit on their peer timeout to rejoin."""
    GANG_PODS = "gang-pods"
    """Plain pods of a gang: rank from the ``firedrill.dev/worker-index`` label, one generation, no restarts."""


@dataclass(frozen=True)
class CanaryTraining:
    """What the canary is asked to do each step (its own flags), and how often rank 0 checkpoints."""

    workers: int
    gpus_per_worker: int
    checkpoint_every: int
    compute_seconds: float = 0.1
    input_seconds: float = 0.0
    comm_seconds: float = 0.0
    stall_after: float = 1.0
    peer_timeout: float | None = None
    """``--peer-timeout``: a rank that lost a peer exits after this many seconds (None: the canary's default)."""
    checkpoint_on_sigterm: bool = False
    """``--checkpoint-on-sigterm``: rank 0 checkpoints the last completed step when told to stop (preemption)."""
    payload_bytes: int | None = None
    """``--payload-bytes``: what each rank contributes to each step's all-reduce (None: the canary's default); the
    fabric drill times the collective's bytes on every link, so it sends enough of them to time."""
    checkpoint_seconds: float = 0.0
    """``--checkpoint-seconds``: how long rank 0's every checkpoint write takes (a large model on slow storage: the
    job makes no step meanwhile, a declared pause, not a hang); 0: one write, as fast as the storage goes."""

    def __post_init__(self) -> None:
        if self.workers < 1 or self.gpus_per_worker < 0 or self.checkpoint_every < 0:
            raise ValueError(f"a canary job needs workers >= 1, GPUs >= 0, checkpoint every >= 0 steps "
                             f"(got {self.workers}, {self.gpus_per_worker}, {self.checkpoint_every})")
        if min(self.compute_seconds, self.input_seconds, self.comm_seconds) < 0:
            raise ValueError("canary step times must be >= 0 seconds")
        if self.checkpoint_seconds < 0:
            raise ValueError(f"a canary checkpoint write must take >= 0 seconds (got {self.checkpoint_seconds})")
        if self.peer_timeout is not None and self.peer_timeout <= 0:
            raise ValueError(f"a canary peer timeout must be > 0 seconds (got {self.peer_timeout})")

    @property
    def step_seconds(self) -> float:
        """The step time the canary is asked for (it measures and logs what it really took)."""
        return self.compute_seconds + self.input_seconds + self.comm_seconds


def _field(path: str) -> dict[str, Any]:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


NO_STORAGE = ("the training canary needs storage every rank reaches for its checkpoints and rendezvous; set "
              "canary.shared_volume in the target profile (a ReadWriteMany persistentVolumeClaim or an nfs export; "
              "see docs/PROFILE.md)")


def storage_problem(profile: TargetProfile) -> str | None:
    """Why no training canary can run with ``profile`` (no shared storage), or None."""
    return NO_STORAGE if profile.canary.shared_volume is None else None


def canary_job_spec(name: str, run_id: str, profile: TargetProfile, training: CanaryTraining, *,
                    steps_total: int = 0, form: CanaryForm = CanaryForm.VOLCANO_JOB,
                    priority_class: str | None = None) -> GangSpec:
    """The GangSpec of a canary training job on ``profile``'s cluster (render it with ``gang_manifests`` for
    a Volcano Job or gang pods, ``indexed_job`` for a batch/v1 Indexed Job; ``form`` says which).
    ``steps_total``: every rank exits 0 after that step (0: trains until stopped)."""
    volume = profile.canary.shared_volume
    if volume is None:
        raise DrillInconclusive(NO_STORAGE)
    root = f"{MOUNT}/{run_id}/{name}"
    args = ["train", "--compute-seconds", f"{training.compute_seconds:g}",
            "--input-seconds", f"{training.input_seconds:g}", "--comm-seconds", f"{training.comm_seconds:g}",
            "--checkpoint-every", str(training.checkpoint_every), "--stall-after", f"{training.stall_after:g}",
            "--checkpoint-dir", f"{root}/checkpoints", "--rendezvous-dir", f"{root}/rendezvous",
            "--steps-total", str(steps_total)]
    if training.peer_timeout is not None:
        args += ["--peer-timeout", f"{training.peer_timeout:g}"]
    if training.checkpoint_on_sigterm:
        args.append("--checkpoint-on-sigterm")
    if training.payload_bytes is not None:
        args += ["--payload-bytes", str(training.payload_bytes)]
    if training.checkpoint_seconds > 0:
        args += ["--checkpoint-seconds", f"{training.checkpoint_seconds:g}"]
    if form is CanaryForm.VOLCANO_JOB:
        rank = _field("metadata.annotations['volcano.sh/task-index']")
        generation = _field("metadata.annotations['volcano.sh/job-version']")
    elif form is CanaryForm.INDEXED_JOB:
        rank, generation = _field(f"metadata.annotations['{JOB_COMPLETION_INDEX_ANNOTATION}']"), {"value": "0"}
    else:
        rank, generation = _field(f"metadata.labels['{WORKER_INDEX_LABEL}']"), {"value": "0"}
    env = ({"name": "WORLD_SIZE", "value": str(training.workers)}, {"name": "RANK", **rank},
           {"name": "FIREDRILL_GENERATION", **generation}, {"name": "POD_IP", **_field("status.podIP")})
    return GangSpec(name=name, run_id=run_id, workers=training.workers, gpus_per_worker=training.gpus_per_worker,
                    image=profile.canary_image, namespace=profile.namespace, queue=profile.queue,
                    priority_class=priority_class,
                    gpu_resource=profile.gpu_resource, command=profile.canary.command, args=tuple(args), env=env,
                    volumes=({"name": VOLUME, **volume},),
                    volume_mounts=({"name": VOLUME, "mountPath": MOUNT},),
                    tolerations=gpu_taint_toleration(profile.gpu_resource) if training.gpus_per_worker else ())


def gpu_holder(profile: TargetProfile, gpus: int, *, seconds: int = 0, name: str = "main",
               input_seconds: float = 0.0) -> dict[str, Any]:
    """A container that holds ``gpus`` of the profile's GPU resource as a training job of one rank would: the
    canary (``train``, a world of 1, no checkpoints, a step a second) logs its ``start`` line with the devices it
    was given, so the invariant watch (docs/INVARIANTS.md) judges the GPUs of pods that are not training jobs of
    their own (a governance drill's higher-class pods, a control-plane drill's started pods). ``seconds``: it
    exits 0 after that many steps (0: it runs until its pod is deleted); ``input_seconds``: each step first waits
    that long on its input, the GPU idle (a load that comes and goes, for the telemetry drill)."""
    args = ["train", "--compute-seconds", "1", "--checkpoint-every", "0", "--steps-total", str(seconds)]
    if input_seconds:
        args[3:3] = ["--input-seconds", f"{input_seconds:g}"]
    container: dict[str, Any] = {"name": name, "image": profile.canary_image, "command": list(profile.canary.command),
                                 "args": args}
    if gpus:
        container["resources"] = {"limits": {profile.gpu_resource: str(gpus)}}
    return container


def gpu_taint_toleration(gpu_resource: str) -> tuple[dict[str, Any], ...]:
    """Tolerate a ``<gpu_resource>:NoSchedule`` taint (``nvidia.com/gpu=present:NoSchedule`` is common on GPU
    nodes): the toleration Kubernetes' ExtendedResourceToleration admission plugin adds to a pod that requests
    the resource, written here so the ranks land on such nodes on a cluster without that plugin too, as the
    free-capacity count (``drills.kinds.gang.drill.free_gpus_per_node``) assumes.  NoSchedule only, like the plugin."""
    return ({"key": gpu_resource, "operator": "Exists", "effect": "NoSchedule"},)
