"""Topology: keep a gang inside one domain of a node label.

Two sources of domains:

- the gang's own request (Kueue's pod-set annotations, :mod:`refplatform.core.topology`): a *required*
  topology confines the gang to one domain of its label (``CONFINE``): placed inside one, or not at all; a
  *preferred* one is tried first and given up when no domain holds the gang;
- otherwise ``SchedulerConfig.topology_key`` (e.g. an NVLink domain label), a preference for every gang.

Domains are tried best fit first: the domain that already holds some of the gang's pods, then the one with
the fewest free GPUs that still holds it (so the larger domains stay whole for larger gangs), then by name.
The ``topology-blind`` defect (``SchedulerConfig.topology_blind``) ignores required requests altogether; the
``topology-lost-on-restart`` one (``SchedulerConfig.topology_lost_on_restart``) ignores them once the job was
restarted, and places the restarted gang first fit in node order, as a scheduler that knows no domains does (a
seeded random tie between empty nodes would land it inside one rack by chance whenever only one rack had room
beside the node the gang kept: the defect must be seen whenever the cluster lets it show).
"""

from __future__ import annotations

import numpy as np

from refplatform.core.framework import ExtensionPoint, Plugin, Session, register_plugin
from refplatform.core.jobs import READY, Job, Task
from refplatform.core.resources import MILLI_PER_GPU
from refplatform.core.state import ClusterState
from refplatform.core.topology import DomainIndex, TopologyRequest


NODE_ORDER_STEP = 1e-7
"""The ``topology-lost-on-restart`` defect's score step between consecutive nodes: more than a tie (1e-9) and, over
ten thousand nodes, less than a thousandth of a point of any other plugin's score."""


@register_plugin
class TopologyPlugin(Plugin):
    name = "topology"

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        if not ssn.state.domain_names and not any(self.request(job) or self._forgot(job) for job in ssn.job_list):
            return
        ssn.add_fn(ExtensionPoint.NODE_GROUPS, self.name, self.groups)
        ssn.add_fn(ExtensionPoint.CONFINE, self.name, self.confine)
        ssn.add_fn(ExtensionPoint.SCORE, self.name, self.score, self.spec.weight)

    def request(self, job: Job) -> TopologyRequest | None:
        """The job's own request as this scheduler honours it (the defects drop a required one)."""
        req = job.topology
        if req is not None and req.required and (self.config.topology_blind or self._forgot(job)):
            return None
        return req

    def _forgot(self, job: Job) -> bool:
        """The ``topology-lost-on-restart`` defect drops this job's required request: it was restarted."""
        req = job.topology
        return (req is not None and req.required and self.config.topology_lost_on_restart
                and job.generation > 0)

    def _index(self, job: Job) -> DomainIndex | None:
        """The domains the job is kept in: its own request's label, else the configured one."""
        req = self.request(job)
        if req is not None:
            return self.ssn.state.domains(req.key)
        st = self.ssn.state
        if not st.domain_names or st.topology_key is None:
            return None
        return DomainIndex(st.topology_key, tuple(st.domain_names), st.domain_id)

    def _home(self, job: Job, index: DomainIndex) -> set[int]:
        """The domains of the job's pods already placed (bound or tentatively allocated)."""
        dom = index.ids
        return {int(dom[t.node]) for t in job.tasks if t.status in READY and t.node >= 0 and dom[t.node] >= 0}

    def groups(self, job: Job) -> list[np.ndarray]:
        pending = job.pending()
        req = self.request(job)
        index = self._index(job)
        if index is None or not pending or (len(pending) < 2 and (req is None or not req.required)):
            return []
        st = self.ssn.state
        free_gpu = index.totals(st.gpu_free_total)
        free_cpu = index.totals(st.cpu_free)
        need_gpu = sum(t.gpu_total for t in pending)
        need_cpu = sum(t.cpu for t in pending)
        home = self._home(job, index)
        fits = [bool(free_gpu[d] >= need_gpu and free_cpu[d] >= need_cpu) for d in range(len(index))]
        # the partial-gang-bind defect also proposes domains too small for the whole gang, last (it keeps what fits)
        candidates = [d for d in range(len(index)) if (fits[d] or self.config.partial_gang_bind)
                      and (not home or d in home or req is None or not req.required)]
        candidates.sort(key=lambda d: (not fits[d], d not in home, free_gpu[d], index.names[d]))
        return [index.mask(d) for d in candidates]

    def confine(self, job: Job) -> str | None:
        """A gang with a required topology that no domain of its label holds: why, naming every domain's room."""
        req = self.request(job)
        if req is None or not req.required:
            return None
        index = self.ssn.state.domains(req.key)
        pending = job.pending()
        gpus = sum(t.gpu_count for t in pending if t.gpu_milli >= MILLI_PER_GPU)
        what = f"its {len(pending)} pending pod{'s' if len(pending) != 1 else ''}" + (f" ({gpus} GPUs)" if gpus else "")
        if not len(index):
            return f"no node carries the label {req.key}, so no single {req.key} domain can hold {what}"
        st = self.ssn.state
        free = index.totals(st.full_free, among=st.schedulable)
        home = sorted(index.names[d] for d in self._home(job, index))
        rooms = ", ".join(f"{name} {int(free[d])}" for d, name in enumerate(index.names))
        where = f" beside its pods already in {', '.join(home)}" if home else ""
        return (f"no single {req.key} domain can hold {what}{where} (free GPUs per domain: {rooms}); "
                "it waits whole rather than cross domains")

    def score(self, task: Task, state: ClusterState, idx: np.ndarray) -> np.ndarray | None:
        if self._forgot(task.job):  # first fit in node order: below any other score's difference, above a tie's
            return idx.astype(np.float64) * -NODE_ORDER_STEP
        index = self._index(task.job)
        if index is None:
            return None
        home = self._home(task.job, index)
        if not home:
            return None
        return np.isin(index.ids[idx], list(home)) * 100.0
