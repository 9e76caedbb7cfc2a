"""The ``placement`` plugin: SCORE and GPU_PICK by ``SchedulerConfig.placement``.

The policies live in :mod:`refplatform.core.policies`; this plugin builds the one the
config names, derives the typical pods FGD needs from the snapshot when the config
gives none, and feeds ``gpu-clustering`` the pods placed and released (RESERVE/UNRESERVE).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from refplatform.core.config import SchedulerConfig
from refplatform.core.errors import ConfigError
from refplatform.core.fragmentation import PodShape, TypicalPods
from refplatform.core.framework import ExtensionPoint, Plugin, Session, register_plugin
from refplatform.core.pod import Pod, SelectorOperator
from refplatform.core.policies import (
    BestFitPolicy,
    DotProductPolicy,
    FGDPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    PlacementPolicy,
    RandomPolicy,
)

FGD_POLICIES = ("fgd", "fgd+bestfit", "fgd+pack", "fgd+headroom")


def pod_gpu_models(pod: Pod, label: str) -> tuple[str, ...]:
    """GPU models a pod is restricted to by selector or required affinity (empty = any)."""
    allowed: set[str] | None = None
    if label in pod.node_selector:
        allowed = {pod.node_selector[label]}
    for req in pod.affinity:
        if req.key == label and req.operator is SelectorOperator.IN:
            allowed = set(req.values) if allowed is None else allowed & set(req.values)
    return tuple(sorted(allowed)) if allowed is not None else ()


def typical_pods_of(pods: Iterable[Pod], label: str) -> TypicalPods:
    return TypicalPods.from_shapes(PodShape.of(p.requests, pod_gpu_models(p, label)) for p in pods)


def make_policy(config: SchedulerConfig, rng: np.random.Generator,
                typical: TypicalPods | None) -> PlacementPolicy:
    name = config.placement
    if name == "random":
        return RandomPolicy(rng)
    if name == "best-fit":
        return BestFitPolicy()
    if name == "dot-product":
        return DotProductPolicy()
    if name == "gpu-packing":
        return GpuPackingPolicy()
    if name == "gpu-clustering":
        return GpuClusteringPolicy()
    if name == "fgd+pack":
        return FGDPolicy(typical, keep_idle_nodes=True)
    if name == "fgd+headroom":
        return FGDPolicy(typical, keep_idle_nodes=True, keep_cpu_headroom=True)
    return FGDPolicy(typical, config.fgd_packing_weight if name == "fgd+bestfit" else None)


@register_plugin
class PlacementPlugin(Plugin):
    name = "placement"

    def on_session_open(self, ssn: Session) -> None:
        typical = self.config.typical_pods
        if self.config.placement in FGD_POLICIES and typical is None:
            pods = [p for p in ssn.snapshot.pods if not p.is_terminal]
            if not pods:
                raise ConfigError(f"the {self.config.placement} policy needs SchedulerConfig.typical_pods "
                                  "or pods in the snapshot")
            typical = typical_pods_of(pods, self.config.gpu_model_label)
        self.policy = make_policy(self.config, ssn.rng, typical)
        if isinstance(self.policy, GpuClusteringPolicy):
            self.policy.start(ssn.state, ssn.tasks.values())
            ssn.add_fn(ExtensionPoint.RESERVE, self.name, self.policy.add)
            ssn.add_fn(ExtensionPoint.UNRESERVE, self.name, self.policy.remove)
        ssn.add_fn(ExtensionPoint.SCORE, self.name, self.policy.score, self.spec.weight)
        ssn.add_fn(ExtensionPoint.GPU_PICK, self.name, self.policy.pick_gpus)
