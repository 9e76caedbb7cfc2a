"""The node agent: one OS process per simulated node (the reference platform's kubelet).

It registers its Node (capacity, GPU Feature Discovery-style labels), renews
its Lease in ``kube-node-lease`` every heartbeat, runs the pods bound to it (a
container with a ``command`` as a real child process, one without as a
simulated workload), reports their status, and serves their logs the way the
kubelet does.  Run it with ``python -m refplatform.agent --help``.

Faults it simulates on itself: SIGUSR1 / SIGUSR2 start / heal a network
partition (every API call fails, pods keep running); after SIGSTOP / SIGCONT it
notices the freeze and resyncs.  ``GET /healthz`` on its loopback port says
whether it is healthy, and ``GET /metrics`` serves DCGM-exporter-style GPU
metrics (Prometheus text format).  The training workload and its job contract are
described in ``docs/WORKLOAD.md``.

Modules: :mod:`~refplatform.agent.runner` (the :class:`Agent`),
:mod:`~refplatform.agent.heartbeat` (registration, Lease, Ready condition, health),
:mod:`~refplatform.agent.pods` (list/watch and per-pod reconcile),
:mod:`~refplatform.agent.workload` (simulated workloads on an injected clock),
:mod:`~refplatform.agent.runtime` (real processes: spawn, logs, signals, exit codes),
:mod:`~refplatform.agent.podenv` (a container's environment: ``$(VAR)``, ``fieldRef``, ``PATH``; pure),
:mod:`~refplatform.agent.volumes` (emptyDir, hostPath, nfs as directories and rewritten paths),
:mod:`~refplatform.agent.podip` (loopback pod IPs from the node's range; pure),
:mod:`~refplatform.agent.device` (the simulated GPU driver socket and what it observes),
:mod:`~refplatform.agent.canarylog` (the canary's log lines read into the platform's claims; pure),
:mod:`~refplatform.agent.gang` (the job contract: ranks, gang counts, the fenced checkpoint patch; pure),
:mod:`~refplatform.agent.jobs` (one peer poll per job, checkpoint records, fencing),
:mod:`~refplatform.agent.partition` (the partition gate in front of every API call),
:mod:`~refplatform.agent.events` (the pods' Events: Started, Resumed, Fenced, Killing; best effort),
:mod:`~refplatform.agent.freeze` (noticing a SIGSTOP),
:mod:`~refplatform.agent.logs` (log files, the log server and ``/healthz``),
:mod:`~refplatform.agent.metrics` (the ``/metrics`` collector: DCGM-style gauges computed at scrape time),
:mod:`~refplatform.agent.gpus` (GPU inventory, NVML or simulated),
:mod:`~refplatform.agent.gpuhealth` (a GPU's way back: burn-in, flapping, a person's clear, on the agent's clock),
:mod:`~refplatform.agent.node` and :mod:`~refplatform.agent.podstatus` (the
object shapes, pure).
"""

from refplatform.agent.errors import AgentError, WorkloadConfigError
from refplatform.agent.runner import Agent, AgentConfig

__all__ = ["Agent", "AgentConfig", "AgentError", "WorkloadConfigError"]
