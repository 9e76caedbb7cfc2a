"""The node agent: one OS process per simulated node (the reference platform's kubelet).

It registers its Node (capacity, GPU Feature Discovery-style labels), renews
its Lease in ``kube-node-lease`` every heartbeat, runs the pods bound to it as
simulated workloads, reports their status, and serves their logs the way the
kubelet does.  Run it with ``python -m refplatform.agent --help``.

Modules: :mod:`~refplatform.agent.runner` (the :class:`Agent`),
:mod:`~refplatform.agent.heartbeat` (registration, Lease, Ready condition),
:mod:`~refplatform.agent.pods` (list/watch and per-pod reconcile),
:mod:`~refplatform.agent.workload` (simulated workloads on an injected clock),
:mod:`~refplatform.agent.logs` (log files and the log server),
:mod:`~refplatform.agent.gpus` (GPU inventory, NVML or simulated),
:mod:`~refplatform.agent.node` and :mod:`~refplatform.agent.podstatus` (the
object shapes, pure).
"""

from refplatform.agent.errors import AgentError, WorkloadConfigError
from refplatform.agent.runner import Agent, AgentConfig

__all__ = ["Agent", "AgentConfig", "AgentError", "WorkloadConfigError"]
