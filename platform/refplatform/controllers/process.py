"""The controller-manager process: ``python -m refplatform.controllers``.

Starts the chosen controllers over shared informers and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from refplatform import core
from refplatform.client import RestClient
from refplatform.core.disruption import DisruptionPolicy
from refplatform.core.remediation import RemediationBudget, RemediationError
from refplatform.controllers.autoscaler import HorizontalPodAutoscalerController
from refplatform.controllers.batchjob import JobController
from refplatform.controllers.disruptionbudget import DisruptionController
from refplatform.controllers.deployment import DeploymentController, ReplicaSetController
from refplatform.controllers.endpoints import EndpointsController
from refplatform.controllers.healer import HealerController
from refplatform.controllers.health import HealthProber
from refplatform.controllers.kubestate import KubeStateMetrics
from refplatform.controllers.loadbalancer import LoadBalancerController
from refplatform.controllers.manager import Controller, ControllerManager
from refplatform.controllers.namespacedefaults import RootCAPublisher, ServiceAccountController
from refplatform.controllers.nodelifecycle import NodeLifecycleController
from refplatform.controllers.scheduler import SchedulerController
from refplatform.controllers.tainteviction import TaintEvictionController
from refplatform.controllers.vcjob import VolcanoJobController
from refplatform.controllers.straggler import StragglerController
from refplatform.controllers.progress import ProgressController
from refplatform.defects import Defect, add_defect_argument
from refplatform.profiles import DEFAULT_PROFILE, PROFILES, get_profile
from refplatform.profiles import Profile as HealingProfile

log = logging.getLogger("refplatform.controllers")


def _scheduler(client: RestClient, args: argparse.Namespace) -> Controller:
    """The scheduler writes as its own identity (``--scheduler-token-file``) when given one; it reads through
    the shared informers."""
    config = core.SchedulerConfig(profile=core.Profile(args.scheduler_profile), placement=args.placement,
                                  partial_gang_bind=Defect.PARTIAL_GANG_BIND in args.defects,
                                  no_preemption=Defect.NO_PREEMPTION in args.defects,
                                  topology_blind=Defect.TOPOLOGY_BLIND in args.defects,
                                  topology_lost_on_restart=Defect.TOPOLOGY_LOST_ON_RESTART in args.defects,
                                  gpu_health_blind=Defect.GPU_HEALTH_BLIND in args.defects)
    writer = getattr(args, "scheduler_client", None) or client
    return SchedulerController(writer, config)


def profile_of(args: argparse.Namespace) -> HealingProfile:
    """The profile named by ``--profile``, with any timer given on the command line overriding it."""
    base = get_profile(args.profile)
    overrides = {k: v for k, v in (("node_monitor_grace_period", args.node_monitor_grace_period),
                                   ("node_monitor_period", args.node_monitor_period),
                                   ("default_toleration_seconds", args.default_toleration_seconds),
                                   ("quarantine", args.quarantine)) if v is not None}
    for name in ("node_eviction_rate", "secondary_node_eviction_rate", "unhealthy_zone_threshold",
                 "large_cluster_size_threshold", "remediation_share", "remediation_min_nodes", "remediation_window",
                 "drain_interval"):
        if getattr(args, name, None) is not None:
            overrides[name] = getattr(args, name)
    return replace(base, **overrides) if overrides else base


def disruption_of(profile: HealingProfile, *, storm: bool = False) -> DisruptionPolicy:
    """The node lifecycle controller's disruption flags from the profile (``storm``: the evict-storm defect).
    Raises ValueError naming the flag when one is out of range."""
    return DisruptionPolicy(profile.node_eviction_rate, profile.secondary_node_eviction_rate,
                            profile.unhealthy_zone_threshold, profile.large_cluster_size_threshold,
                            settle=profile.heartbeat, handled=not storm)


def budget_of(profile: HealingProfile, *, unlimited: bool = False) -> RemediationBudget:
    """The healer's remediation budget from the profile (``unlimited``: the remediate-the-fleet defect).
    Raises RemediationError naming the setting when one is out of range."""
    return RemediationBudget(profile.remediation_share, profile.remediation_min_nodes, profile.remediation_window,
                             unlimited=unlimited)


def _prober(profile: HealingProfile, args: argparse.Namespace) -> HealthProber:
    return HealthProber(profile.health_check_timeout, interval=min(0.25, profile.node_monitor_period * 2 + 0.05),
                        token=getattr(args, "controller_token", None))


def _nodelifecycle(client: RestClient, args: argparse.Namespace) -> Controller:
    profile = profile_of(args)
    return NodeLifecycleController(client, grace=profile.node_monitor_grace_period,
                                   monitor_period=profile.node_monitor_period, prober=_prober(profile, args),
                                   slow_detect=Defect.SLOW_DETECT in args.defects,
                                   disruption=disruption_of(profile, storm=Defect.EVICT_STORM in args.defects),
                                   keep_unreachable=Defect.KEEP_UNREACHABLE in args.defects)


def _tainteviction(client: RestClient, args: argparse.Namespace) -> Controller:
    return TaintEvictionController(client, default_toleration_seconds=profile_of(args).default_toleration_seconds)


def _vcjob(client: RestClient, args: argparse.Namespace) -> Controller:
    return VolcanoJobController(client, duplicate_rank=Defect.DUPLICATE_RANK in args.defects)


def _autoscaler(client: RestClient, args: argparse.Namespace) -> Controller:
    period = args.horizontal_pod_autoscaler_sync_period
    return HorizontalPodAutoscalerController(
        client, period if period is not None else profile_of(args).hpa_sync_period,
        no_autoscaling=Defect.NO_AUTOSCALING in args.defects)


def _healer(client: RestClient, args: argparse.Namespace) -> Controller:
    profile = profile_of(args)
    spares = [n.strip() for n in (args.spare_nodes or "").split(",") if n.strip()]
    return HealerController(client, spares=spares, grace=profile.node_monitor_grace_period,
                            prober=_prober(profile, args),
                            quarantine=profile.quarantine, quarantine_after=profile.quarantine_after,
                            no_spare=Defect.NO_SPARE in args.defects,
                            return_cordoned=Defect.RETURN_CORDONED in args.defects,
                            budget=budget_of(profile, unlimited=Defect.REMEDIATE_THE_FLEET in args.defects),
                            drain_interval=profile.drain_interval,
                            drain_past_recovery=Defect.DRAIN_PAST_RECOVERY in args.defects)


FACTORIES: dict[str, Callable[[RestClient, argparse.Namespace], Controller]] = {
    "scheduler": _scheduler,
    "nodelifecycle": _nodelifecycle,
    "tainteviction": _tainteviction,
    "vcjob": _vcjob,
    "healer": _healer,
    "deployment": lambda client, args: DeploymentController(client),
    "replicaset": lambda client, args: ReplicaSetController(client),
    "endpoints": lambda client, args: EndpointsController(client),
    "loadbalancer": lambda client, args: LoadBalancerController(
        client, stale_backends=Defect.STALE_BACKENDS in args.defects),
    "autoscaler": _autoscaler,
    "straggler": lambda client, args: StragglerController(
        client, no_detection=Defect.NO_STRAGGLER_DETECTION in args.defects,
        accuse_by_history=Defect.ACCUSE_THE_HEALTHY in args.defects,
        eviction_lost=Defect.STRAGGLER_EVICTION_LOST in args.defects,
        taint_stays=Defect.STRAGGLER_TAINT_STAYS in args.defects),
    "progress": lambda client, args: ProgressController(
        client, no_detection=Defect.NO_HANG_DETECTION in args.defects,
        ignore_activity=Defect.RESTART_ON_PAUSE in args.defects),
    "job": lambda client, args: JobController(client),
    "disruption": lambda client, args: DisruptionController(client),
    "serviceaccount": lambda client, args: ServiceAccountController(client),
    "root-ca-cert-publisher": lambda client, args: RootCAPublisher(client, args.ca_file),
    "kube-state-metrics": lambda client, args: KubeStateMetrics(args.metrics_address),
}
"""Every controller this process can run, by name (``--controllers`` picks among them)."""
DEFAULT_CONTROLLERS = tuple(n for n in FACTORIES if n != "kube-state-metrics")
"""The reference platform's own; the kube-state-metrics stand-in is for an API server that serves no KSM series."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m refplatform.controllers",
        description="Run the reference platform's controllers (scheduler, node lifecycle, taint eviction, "
                    "Volcano jobs, batch/v1 Jobs, healer, Deployments and ReplicaSets, Service endpoints, the loopback load "
                    "balancer, each namespace's default ServiceAccount and kube-root-ca.crt) against its API server.")
    p.add_argument("--api", required=True, metavar="URL", help="API server URL, e.g. https://127.0.0.1:6443")
    p.add_argument("--token-file", type=Path,
                   help="file holding the controllers' bearer token (the embedded cluster's: "
                        "system:kube-controller-manager)")
    p.add_argument("--scheduler-token-file", type=Path,
                   help="file holding the scheduler's own bearer token (system:kube-scheduler): its binds, "
                        "evictions, status writes and Events go out as that identity (default: --token-file's)")
    p.add_argument("--ca-file", type=Path, help="CA certificate that signed the API server's certificate")
    p.add_argument("--controllers", default=",".join(DEFAULT_CONTROLLERS),
                   help=f"comma-separated controllers to run (default: {', '.join(DEFAULT_CONTROLLERS)}; also "
                        f"{', '.join(n for n in FACTORIES if n not in DEFAULT_CONTROLLERS)})")
    p.add_argument("--scheduler-profile", choices=[p.value for p in core.Profile], default=core.Profile.GANG.value,
                   help="gang: all-or-nothing gangs (default); no-gang: bind pods one by one (the deadlock baseline)")
    p.add_argument("--placement", choices=sorted(core.PLACEMENT_POLICIES), default="best-fit",
                   help="node choice among those that fit (default best-fit)")
    p.add_argument("--profile", choices=sorted(PROFILES), default=DEFAULT_PROFILE,
                   help="healing timers (see refplatform.profiles): tuned (grace 3 s, toleration 0 s, quarantine "
                        "and spares; default) or k8s-defaults (grace 50 s, toleration 300 s)")
    p.add_argument("--node-monitor-grace-period", type=float, metavar="SECONDS",
                   help="override the profile: a Lease older than this makes the node Ready=Unknown")
    p.add_argument("--node-monitor-period", type=float, metavar="SECONDS",
                   help="override the profile: longest wait between looks at the Leases")
    p.add_argument("--default-toleration-seconds", type=float, metavar="SECONDS",
                   help="override the profile: tolerationSeconds of the implicit not-ready/unreachable tolerations")
    p.add_argument("--node-eviction-rate", type=float, metavar="NODES_PER_S",
                   help="override the profile: nodes per second tainted NoExecute in a healthy zone "
                        "(tuned 10, upstream 0.1)")
    p.add_argument("--secondary-node-eviction-rate", type=float, metavar="NODES_PER_S",
                   help="override the profile: the same in a partially disrupted zone of more than "
                        "--large-cluster-size-threshold nodes (0.01 as upstream)")
    p.add_argument("--unhealthy-zone-threshold", type=float, metavar="FRACTION",
                   help="override the profile: the not-Ready fraction (of more than 2 nodes) that puts a zone in "
                        "partial disruption (0.55 as upstream)")
    p.add_argument("--large-cluster-size-threshold", type=int, metavar="NODES",
                   help="override the profile: a partially disrupted zone of at most this many nodes stops "
                        "evicting (50 as upstream)")
    p.add_argument("--remediation-share", type=float, metavar="FRACTION",
                   help="override the profile: the share of the pool (working and spare nodes) the healer may "
                        "quarantine for a GpuFault within the remediation window (0.25); one more trips the breaker")
    p.add_argument("--remediation-min-nodes", type=int, metavar="NODES",
                   help="override the profile: the remediation budget is at least this many nodes (1)")
    p.add_argument("--remediation-window", type=float, metavar="SECONDS",
                   help="override the profile: the remediation budget's sliding window (600)")
    p.add_argument("--drain-interval", type=float, metavar="SECONDS",
                   help="override the profile: the pause between two evictions of a GPU-fault drain (1); the drain "
                        "stops if the node's GpuFault clears first")
    p.add_argument("--quarantine", action=argparse.BooleanOptionalAction, default=None,
                   help="override the profile: whether the healer quarantines lost nodes (out-of-service taint)")
    p.add_argument("--horizontal-pod-autoscaler-sync-period", type=float, metavar="SECONDS",
                   help="override the profile: seconds between looks at each HorizontalPodAutoscaler "
                        "(tuned 1, k8s-defaults 15 as upstream)")
    p.add_argument("--spare-nodes", metavar="NAME,...", default="",
                   help="nodes the healer enrolls in the spare pool (label firedrill.dev/spare=true, "
                        "taint firedrill.dev/spare:NoSchedule)")
    p.add_argument("--metrics-address", default="127.0.0.1:0", metavar="HOST:PORT",
                   help="where the kube-state-metrics controller serves /metrics (loopback only; default: a free "
                        "port, logged)")
    add_defect_argument(p)
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s controllers %(levelname)s %(name)s %(message)s")
    names = [n.strip() for n in args.controllers.split(",") if n.strip()]
    unknown = [n for n in names if n not in FACTORIES]
    if unknown:
        print(f"error: unknown controller(s) {', '.join(unknown)}; known: {', '.join(FACTORIES)}", file=sys.stderr)
        return 2
    try:
        disruption_of(profile_of(args))
        budget_of(profile_of(args))
    except (ValueError, RemediationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.defects:
        logging.getLogger("refplatform.controllers").warning(
            "running with defect(s) from the zoo: %s", ", ".join(sorted(d.value for d in args.defects)))
    try:
        token = args.token_file.read_text().strip() if args.token_file else None
        scheduler_token = args.scheduler_token_file.read_text().strip() if args.scheduler_token_file else None
    except OSError as exc:
        print(f"error: cannot read a token file: {exc}", file=sys.stderr)
        return 2
    args.controller_token = token
    client = RestClient(args.api, token, ca_file=args.ca_file, maxsize=16, user_agent="refplatform-controllers")
    args.scheduler_client = RestClient(args.api, scheduler_token, ca_file=args.ca_file, maxsize=16,
                                       user_agent="refplatform-scheduler") if scheduler_token else None
    manager = ControllerManager(client, [FACTORIES[n](client, args) for n in names])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: manager.stop())
    manager.start()
    manager.wait()
    client.close()
    if args.scheduler_client is not None:
        args.scheduler_client.close()
    return 0
