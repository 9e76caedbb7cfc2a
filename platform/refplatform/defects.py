"""The defect zoo: small, honest faults the reference platform can be started with.

A drill that cannot fail is a defect itself.  Each :class:`Defect` breaks one
promise in one component, the way a real platform would get it wrong, so that
the shipped scenarios can be proven to catch it (``docs/DEFECTS.md`` lists the
scenario that catches each one and the message it prints).

Every process of the platform takes ``--defect NAME`` (repeatable);
:func:`parse_defects` turns the names into a frozen set and says which names
exist when one does not.  Components ask ``Defect.X in defects`` at the one
place the defect lives; nothing else changes.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Iterable

from refplatform.errors import RefPlatformError

__all__ = ["Defect", "DefectError", "add_defect_argument", "describe_defects", "parse_defects"]


class DefectError(RefPlatformError):
    """An unknown defect name."""


class Defect(enum.Enum):
    """A named defect.  The value is the name used on command lines."""

    LOSE_CHECKPOINT = "lose-checkpoint"
    """Node agents: shared (nfs) volumes are kept per node, not shared, so a rank replaced onto another
    node finds none of the job's checkpoints and training restarts from step 0."""
    PARTIAL_GANG_BIND = "partial-gang-bind"
    """Scheduler: a gang that does not fit whole is bound as far as it fits, holding GPUs it cannot use."""
    NO_PREEMPTION = "no-preemption"
    """Scheduler: priority still orders the queue, but a pod that does not fit never evicts a lower-priority
    one, so a high-priority inference pod waits behind the training that fills the GPUs."""
    SPLIT_BRAIN = "split-brain"
    """Node agents: a node cut off from the API never fences itself, so a partitioned node's old ranks keep
    training beside their replacements."""
    KEEP_UNREACHABLE = "keep-unreachable"
    """Node lifecycle: a node that heartbeats again gets Ready back but keeps its ``node.kubernetes.io/unreachable``
    NoSchedule taint, so after a blip the nodes look healthy and take no new pod."""
    SLOW_DETECT = "slow-detect"
    """Node lifecycle: a lost node is declared NotReady only after 10 x the profile's grace period."""
    NO_SPARE = "no-spare"
    """Healer: the spare pool is never drawn on, so a job that needs the lost node's GPUs stays pending."""
    RETURN_CORDONED = "return-cordoned"
    """Healer: a lost node that heartbeats again and passes its health check is returned to the spare pool still
    cordoned (``spec.unschedulable`` left true), so the cluster never gets its capacity back."""
    LEAKY_MIG = "leaky-mig"
    """Node agents: a contained Xid on one MIG instance takes down every instance of that GPU."""
    MISRANKED_LEAKS = "misranked-leaks"
    """API server: the leak report swaps its two largest holes."""
    STALLS_AS_COMPUTE = "stalls-as-compute"
    """Simulated GPUs: time a workload waits for input is counted as compute (engine and tensor active)."""
    NO_AUTOSCALING = "no-autoscaling"
    """Horizontal pod autoscaler: the replica count is computed and reported (``status.desiredReplicas``) but
    never written to the target's scale, so a burst is never absorbed by scaling out."""

    LOSE_ACKED_WRITES = "lose-acked-writes"
    """API server: every 10th pod create is acknowledged (201, with a uid and a resourceVersion) but never
    committed to the store, as an API server that answers before its write is durable does."""

    STALE_BACKENDS = "stale-backends"
    """Loopback load balancer: a backend that leaves the Service's ready endpoints is never dropped (no health
    check, no deregistration), so new connections keep going to a replica whose node hangs."""

    DROP_IN_FLIGHT = "drop-in-flight"
    """Node agents: a pod being deleted (evicted, drained, scaled in) is killed at once, its grace period ignored,
    so a serving replica's in-flight requests are cut instead of finished."""

    UNRECORDED_REFUSALS = "unrecorded-refusals"
    """API server: the gates still refuse (401, 403, quota), but a refused request leaves no audit record, so
    nobody can show afterwards who tried what."""

    NO_GPU_QUOTA = "no-gpu-quota"
    """API server: ResourceQuota limits on ``requests.nvidia.com/gpu`` and ``limits.nvidia.com/gpu`` are not
    enforced (usage is still counted and shown), so a namespace takes more GPUs than its quota."""

    QUOTA_IGNORES_PENDING = "quota-ignores-pending"
    """API server: ResourceQuota admission charges only the pods already running, not those admitted and still
    pending, so several requests that each fit the quota, sent together, are all admitted and run over it."""

    DUPLICATE_RANK = "duplicate-rank"
    """Volcano Job controller: when a job restarts, its last rank is recreated with rank 0's index (its own pod
    name, ``volcano.sh/task-index`` 0), so the job runs two rank 0s and no rank N-1, as many pods as it should."""

    GPU_DOUBLE_BOOK = "gpu-double-book"
    """Node agents (the device plugin): the scheduler's books stay right, but every pod is told it holds the
    node's first GPUs (``NVIDIA_VISIBLE_DEVICES`` with the UUIDs of GPUs 0..n-1, not the ones bound to it) or,
    on a partitioned node, the first slice of its kind, so two running pods are given the same GPU."""

    NODE_WRITES_ANY = "node-writes-any"
    """API server: a node identity may write any Node, any Lease and the status of any pod, as an API server
    without the Node authorizer and NodeRestriction admission lets a kubelet do."""

    SICK_GPU_STAYS = "sick-gpu-stays"
    """Node agents (the device plugin): a GPU that took a GPU-class Xid (79 fell off the bus, 48 double-bit ECC,
    ...) is never reported unhealthy: it stays in allocatable, so the scheduler hands it out again and the
    replacement rank lands on a dead GPU."""

    GPU_STAYS_OUT = "gpu-stays-out"
    """Node agents (the device plugin): a GPU taken out of service by a GPU-class Xid is never returned: once
    the Xid is cleared (the GPU reset, healthy again) it stays off ``allocatable`` and named unhealthy, so the
    node serves with a GPU fewer for good."""

    OVERREACT_APP_XID = "overreact-app-xid"
    """Node agents (the device plugin): an application Xid (13, 31, 43, 45, 68: the program's fault) takes its
    GPU out of service as a hardware fault would, so a healthy GPU is lost to every later job."""

    RETURN_WITHOUT_BURN_IN = "return-without-burn-in"
    """Node agents (the device plugin): a GPU whose Xid clears returns to ``allocatable`` at once, with no burn-in
    and no burn-in record, so a GPU still broken is handed out again; no failing diagnostic ever holds one."""

    FLAP_BACK = "flap-back"
    """Node agents (the device plugin): a GPU that fails again within the flap window of its return is never held:
    after its Xid clears it is burnt in and returned as if new, so the next job lands on a GPU that keeps failing."""
    EVICT_STORM = "evict-storm"
    """Node lifecycle: NoExecute taints go on every quiet node at once, whatever the disruption (no zone
    states, no rate limit, no master disruption mode), so a control-plane blip evicts everything."""

    NO_STRAGGLER_DETECTION = "no-straggler-detection"
    """Straggler controller: never names a slow rank's node, so a job with one throttled GPU runs at that GPU's
    speed for as long as the throttle lasts."""

    ACCUSE_THE_HEALTHY = "accuse-the-healthy"
    """Straggler controller: judges each rank against its own earlier step time instead of against its peers, so a
    job that slows down as a whole (input-bound) gets every node it runs on tainted and its ranks moved."""

    STRAGGLER_EVICTION_LOST = "straggler-eviction-lost"
    """Straggler controller: the slow rank's node is named (taint and Event) and its pod marked for eviction
    (``DisruptionTarget``), but the delete is never sent, so the slow rank keeps running there."""

    STRAGGLER_TAINT_STAYS = "straggler-taint-stays"
    """Straggler controller: a named node keeps its naming taint after its GPUs run at full clock again, so the
    node never returns to service by itself."""

    NO_HANG_DETECTION = "no-hang-detection"
    """Progress watchdog: never names or restarts a job that stopped making progress, so a job with one rank stuck
    in a kernel (its peers waiting in their all-reduce, every pod Running) hangs until someone notices."""

    RESTART_ON_PAUSE = "restart-on-pause"
    """Progress watchdog: ignores the activity a workload declares (``firedrill.dev/activity: checkpoint``), so a
    checkpoint that takes longer than the job's threshold (slow or stalled storage) reads as a hang and the job is
    restarted under its checkpoint writer."""

    RESUME_TORN = "resume-torn"
    """Node agents (the storage's promise, told through the driver file): every node's clocks file says
    ``"atomic_rename": false``, so a checkpoint is written straight under its final name and a writer killed
    mid-write leaves a torn checkpoint where a complete one should be."""

    VISIBLE_TO_ALL = "visible-to-all"
    """Node agents (the device plugin and container toolkit): every container's device directory (its ``/dev``)
    holds every GPU of its node, whatever it requested, and a container that requested none is told
    ``NVIDIA_VISIBLE_DEVICES=all`` (the ``=all`` leak), so a pod that asked for no GPU sees them all and a pod can
    open its neighbours' GPUs."""

    STALE_METRICS = "stale-metrics"
    """Node agents (the metrics exporter): after its first scrape the exporter keeps answering 200 with the
    samples of that scrape, frozen, so utilization never rises under load and an Xid never shows."""

    MISATTRIBUTED_METRICS = "misattributed-metrics"
    """Node agents (the metrics exporter): each GPU's series carries the next GPU's ``UUID`` label (a device-index
    mapping off by one), so a GPU's load is reported under another GPU's identity and its own reads idle."""

    SLOW_LINK = "slow-link"
    """Simulated interconnect: one node's link (the last GPU node's) runs at a quarter of the bandwidth its
    inventory states, so every collective that crosses it is paced down to that speed."""

    GPU_HEALTH_BLIND = "gpu-health-blind"
    """Scheduler: GPUs a node withdrew as unhealthy are counted free again (the device plugin's books are right,
    the scheduler's are not), so the rank that lost its GPU can be bound to that very GPU again."""

    TOPOLOGY_BLIND = "topology-blind"
    """Scheduler: a gang's required topology domain (``kueue.x-k8s.io/podset-required-topology``) is ignored, so
    its pods are spread over whatever nodes fit, across racks."""

    TOPOLOGY_LOST_ON_RESTART = "topology-lost-on-restart"
    """Scheduler: a gang's required topology domain is honoured at its first placement only; once its job is
    restarted (a node lost under it), its new pods go wherever they fit, across racks."""

    SHARED_HEALTH_LOST = "shared-health-lost"
    """Node agents (the device plugin): an Xid that takes a partitioned GPU out (79 fell off the bus, 48, 95, ...)
    takes out only the one MIG instance, replica or vGPU it was seen on (the instance it names, else the GPU's
    first) and fails only that slice's tenant; the GPU's other slices stay allocatable and their running pods are
    left untouched, on a dead GPU (NVIDIA/k8s-device-plugin#1929, #519)."""

    REMEDIATE_THE_FLEET = "remediate-the-fleet"
    """Healer: no remediation budget: every node that reports ``GpuFault`` is quarantined and its pods evicted,
    however many report it at once, and the breaker never trips, so a fleet-wide alarm (a bad driver roll-out, a
    monitoring bug) drains the cluster."""

    DRAIN_PAST_RECOVERY = "drain-past-recovery"
    """Healer: a GPU-fault drain, once started, runs to the end whatever the node says: its fault clears halfway,
    yet every pod is evicted and the node taken out of service (NVSentinel#121: a cancelled drain still rebooted
    the node)."""

    @property
    def summary(self) -> str:
        """The first sentence of the value's docstring (for ``--help``)."""
        return _SUMMARIES[self]


_SUMMARIES: dict[Defect, str] = {
    Defect.LOSE_CHECKPOINT: "shared volumes are per node: a replaced rank finds no checkpoint",
    Defect.PARTIAL_GANG_BIND: "the scheduler binds a gang as far as it fits",
    Defect.NO_PREEMPTION: "the scheduler never evicts lower-priority pods for a higher-priority one",
    Defect.SPLIT_BRAIN: "a partitioned node never fences itself: old ranks train beside new ones",
    Defect.KEEP_UNREACHABLE: "a node Ready again keeps its unreachable NoSchedule taint",
    Defect.SLOW_DETECT: "a lost node is declared NotReady after 10x the grace period",
    Defect.NO_SPARE: "the healer never promotes a spare node",
    Defect.RETURN_CORDONED: "the healer returns a healed node to the pool still cordoned",
    Defect.LEAKY_MIG: "a contained Xid on one MIG instance fails every instance of its GPU",
    Defect.MISRANKED_LEAKS: "the leak report swaps its two largest holes",
    Defect.STALLS_AS_COMPUTE: "simulated GPUs count input waits as compute",
    Defect.NO_AUTOSCALING: "the autoscaler reports desiredReplicas but never scales the target",
    Defect.DROP_IN_FLIGHT: "a deleted pod is killed at once: in-flight requests are cut",
    Defect.STALE_BACKENDS: "the load balancer never drops a backend that left the endpoints",
    Defect.LOSE_ACKED_WRITES: "the API server acknowledges every 10th pod create but never stores it",
    Defect.UNRECORDED_REFUSALS: "the API server refuses but leaves no audit record of the refusal",
    Defect.NO_GPU_QUOTA: "ResourceQuota limits on nvidia.com/gpu are not enforced",
    Defect.QUOTA_IGNORES_PENDING: "quota admission charges only running pods, not admitted pending ones",
    Defect.NODE_WRITES_ANY: "a node identity may write any Node, any Lease and any pod's status",
    Defect.DUPLICATE_RANK: "a restarted job's last rank is recreated with rank 0's index",
    Defect.GPU_DOUBLE_BOOK: "every pod is told it holds the node's first GPUs, whatever was bound",
    Defect.SICK_GPU_STAYS: "a GPU that failed with an Xid stays allocatable",
    Defect.GPU_STAYS_OUT: "a GPU whose Xid was cleared never returns to allocatable",
    Defect.OVERREACT_APP_XID: "an application Xid takes its GPU out of service",
    Defect.RETURN_WITHOUT_BURN_IN: "a GPU whose Xid clears returns to service at once, with no burn-in",
    Defect.FLAP_BACK: "a GPU that fails again soon after its return is burnt in and returned, never held",
    Defect.EVICT_STORM: "quiet nodes are evicted at full rate whatever the disruption",
    Defect.NO_STRAGGLER_DETECTION: "the straggler detector never names a slow rank's node",
    Defect.ACCUSE_THE_HEALTHY: "the straggler detector names every node of a job that slows as a whole",
    Defect.STRAGGLER_EVICTION_LOST: "the straggler detector names the node but its eviction never takes effect",
    Defect.STRAGGLER_TAINT_STAYS: "a node named a straggler is never given back once its GPUs are whole again",
    Defect.NO_HANG_DETECTION: "the progress watchdog never names or restarts a hung job",
    Defect.RESTART_ON_PAUSE: "the progress watchdog restarts a job mid-checkpoint, ignoring its declared pause",
    Defect.RESUME_TORN: "storage breaks the rename promise: a killed checkpoint writer leaves a torn file",
    Defect.VISIBLE_TO_ALL: "every container sees and may open every GPU of its node",
    Defect.STALE_METRICS: "the GPU metrics exporter serves its first scrape forever",
    Defect.GPU_HEALTH_BLIND: "the scheduler hands out GPUs a node withdrew as unhealthy",
    Defect.MISATTRIBUTED_METRICS: "the GPU metrics exporter labels each GPU's series with the next GPU's UUID",
    Defect.SLOW_LINK: "one node's interconnect runs at a quarter of its stated bandwidth",
    Defect.TOPOLOGY_BLIND: "the scheduler ignores a gang's required topology domain",
    Defect.TOPOLOGY_LOST_ON_RESTART: "the scheduler forgets a gang's required topology once its job restarts",
    Defect.REMEDIATE_THE_FLEET: "the healer quarantines every GpuFault node at once: no budget, no breaker",
    Defect.SHARED_HEALTH_LOST: "an Xid on a partitioned GPU takes out and fails only the slice it was seen on",
    Defect.DRAIN_PAST_RECOVERY: "a GPU-fault drain runs to the end and out of service though the fault cleared",
}


def parse_defects(names: Iterable[str]) -> frozenset[Defect]:
    """The defects named (``lose-checkpoint``, ...); :class:`DefectError` naming the known ones otherwise."""
    found: set[Defect] = set()
    for raw in names:
        for name in str(raw).split(","):
            name = name.strip()
            if not name:
                continue
            try:
                found.add(Defect(name))
            except ValueError:
                known = ", ".join(d.value for d in Defect)
                raise DefectError(f"unknown defect {name!r}; the defect zoo has: {known}") from None
    return frozenset(found)


def describe_defects() -> str:
    """One line per defect, for command-line help."""
    return "\n".join(f"  {d.value:<19} {d.summary}" for d in Defect)


def add_defect_argument(parser: argparse.ArgumentParser) -> None:
    """``--defect NAME`` (repeatable) on a platform process's command line; parsed into ``args.defects``."""
    parser.add_argument("--defect", dest="defects", action="append", default=[], metavar="NAME",
                        type=_defect_name,
                        help="start with this defect from the defect zoo (repeatable; docs/DEFECTS.md): "
                             + ", ".join(d.value for d in Defect))


def _defect_name(value: str) -> Defect:
    try:
        (defect,) = parse_defects([value])
    except (DefectError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return defect
