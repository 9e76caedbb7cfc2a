"""Topology: keep a gang inside one node group (``SchedulerConfig.topology_key``,
e.g. an NVLink domain or a rack) when one can hold it; otherwise co-locate softly."""

from __future__ import annotations

import numpy as np

from refplatform.core.framework import ExtensionPoint, Plugin, Session, register_plugin
from refplatform.core.jobs import READY, Job, Task
from refplatform.core.state import ClusterState


@register_plugin
class TopologyPlugin(Plugin):
    name = "topology"

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        if not ssn.state.domain_names:
            return
        ssn.add_fn(ExtensionPoint.NODE_GROUPS, self.name, self.groups)
        ssn.add_fn(ExtensionPoint.SCORE, self.name, self.score, self.spec.weight)

    def _domains_of(self, job: Job) -> set[int]:
        dom = self.ssn.state.domain_id
        return {int(dom[t.node]) for t in job.tasks if t.status in READY and t.node >= 0 and dom[t.node] >= 0}

    def groups(self, job: Job) -> list[np.ndarray]:
        pending = job.pending()
        if len(pending) < 2:
            return []
        st = self.ssn.state
        dom = st.domain_id
        labelled = dom >= 0
        free_gpu = np.bincount(dom[labelled], weights=st.gpu_free_total[labelled], minlength=len(st.domain_names))
        free_cpu = np.bincount(dom[labelled], weights=st.cpu_free[labelled], minlength=len(st.domain_names))
        need_gpu = sum(t.gpu_total for t in pending)
        need_cpu = sum(t.cpu for t in pending)
        home = self._domains_of(job)
        candidates = [d for d in range(len(st.domain_names))
                      if free_gpu[d] >= need_gpu and free_cpu[d] >= need_cpu]
        candidates.sort(key=lambda d: (d not in home, free_gpu[d], st.domain_names[d]))
        return [dom == d for d in candidates]

    def score(self, task: Task, state: ClusterState, idx: np.ndarray) -> np.ndarray | None:
        home = self._domains_of(task.job)
        if not home:
            return None
        return np.isin(state.domain_id[idx], list(home)) * 100.0
