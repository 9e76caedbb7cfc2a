"""Hollow nodes: many simulated nodes in one process, for measuring the control plane at scale.

In the spirit of kubemark's hollow nodes, a :class:`~refplatform.hollow.fleet.HollowFleet` stands in for
a thousand node agents without a thousand processes:

- every node is real to the API server: its own Node (capacity, GPU labels, Ready condition) and its own
  Lease in ``kube-node-lease``, renewed on the profile's heartbeat by the same
  :class:`refplatform.agent.heartbeat.NodeHeartbeat` the agents use, the renewals of all nodes spread over
  the interval (:mod:`refplatform.hollow.heartbeats`) so they never stampede;
- every node writes as itself, ``system:node:<node>`` with its own token, so the API server's node
  authorizer and NodeRestriction checks apply to each write exactly as they do to an agent's;
- the pods bound to the fleet's nodes are seen through ONE shared watch and moved to ``Running`` through
  ``pods/<name>/status`` (:mod:`refplatform.hollow.kubelet`); no process runs for a pod.

Start it with ``python -m refplatform.hollow --api URL --node-tokens-file F --ca-file F --nodes 1000``, or
from a running :class:`refplatform.cluster.Cluster` with :func:`refplatform.hollow.launch.start_hollow`.
"""

from refplatform.hollow.errors import HollowError

__all__ = ["HollowError"]
