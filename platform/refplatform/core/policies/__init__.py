"""Placement policies: node scores and the GPU choice inside the chosen node.

The six policies of the FGD paper (Weng et al., USENIX ATC'23), scored as the
authors' kube-scheduler plugins score them (integers 0..100, the framework's
score type), plus our hybrids ``fgd+bestfit``, ``fgd+pack`` and ``fgd+headroom``.  The ``placement`` plugin
(:mod:`refplatform.core.plugins.placement`) picks one by name; see
``docs/SCHEDULER.md``, Placement policies.
"""

from refplatform.core.policies.baselines import (
    BestFitPolicy,
    DotProductPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    RandomPolicy,
)
from refplatform.core.policies.fgd import FGDPolicy
from refplatform.core.policies.policy import PlacementPolicy

__all__ = ["BestFitPolicy", "DotProductPolicy", "FGDPolicy", "GpuClusteringPolicy", "GpuPackingPolicy",
           "PlacementPolicy", "RandomPolicy"]
