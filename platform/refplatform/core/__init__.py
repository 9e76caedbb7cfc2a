"""The pure scheduling core of the reference platform.

Input is a :class:`Snapshot` (nodes, pods, pod groups, queues and an injected
``now``) and a :class:`SchedulerConfig`; output is :class:`Decisions` (binds with
GPU indices, evictions, pod-group phases and conditions, FailedScheduling
reasons).  Nothing here does I/O or reads a clock.  See ``docs/SCHEDULER.md``.

- :func:`schedule` runs one Volcano-style cycle: ``enqueue, allocate, preempt,
  reclaim, backfill``.
- :class:`Placer` places pods one at a time with the same filter and score
  plugins (the trace replay's fast path).

Importing the package loads none of its modules: each name here is loaded from its module on first use (PEP 562).
A node agent reads a few of the core's rules and never schedules; loading the whole core, numpy with it, cost every
agent, API server and harness process about 0.3 s of CPU at start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from refplatform.core.config import (
        DEFAULT_ACTIONS,
        DEFAULT_PLUGINS,
        PLACEMENT_POLICIES,
        PluginSpec,
        Profile,
        SchedulerConfig,
        TieBreak,
    )
    from refplatform.core.decisions import (
        Bind,
        ConditionType,
        Decisions,
        Evict,
        EvictReason,
        FailedScheduling,
        GangCommit,
        Nomination,
        PodGroupCondition,
        PodGroupStatus,
        Reservation,
    )
    from refplatform.core.errors import ConfigError, CoreError, SnapshotError
    from refplatform.core.fragmentation import FragmentationModel, FragmentationTracker, PodShape, TypicalPods
    from refplatform.core.framework import ExtensionPoint, Plugin, Session, register_action, register_plugin
    from refplatform.core.node import Node, Taint, TaintEffect
    from refplatform.core.placer import PLACER_PLUGINS, Placer
    from refplatform.core.pod import (
        NodeSelectorRequirement,
        Pod,
        PodPhase,
        PodRef,
        PreemptionPolicy,
        SelectorOperator,
        Toleration,
        TolerationOperator,
        gpu_model_requirement,
    )
    from refplatform.core.podgroup import DEFAULT_QUEUE, PodGroup, PodGroupPhase
    from refplatform.core.queue import Queue, QueueState
    from refplatform.core.resources import (
        GPU,
        GPU_INDEX_ANNOTATION,
        GPU_MILLI,
        GPU_MODEL_LABEL,
        MILLI_PER_GPU,
        TOPOLOGY_LABEL,
        Quota,
        Resources,
        Usage,
    )
    from refplatform.core.scheduler import schedule
    from refplatform.core.snapshot import Snapshot
    from refplatform.core.state import ClusterState
    from refplatform.core.status import Status, StatusCode
    from refplatform.core.topology import (
        PREFERRED_TOPOLOGY_ANNOTATION,
        REQUIRED_TOPOLOGY_ANNOTATION,
        TopologyMode,
        TopologyRequest,
    )

__all__ = [
    "DEFAULT_ACTIONS", "DEFAULT_PLUGINS", "DEFAULT_QUEUE", "GPU", "GPU_INDEX_ANNOTATION", "GPU_MILLI",
    "GPU_MODEL_LABEL", "MILLI_PER_GPU", "PLACEMENT_POLICIES", "PLACER_PLUGINS", "PREFERRED_TOPOLOGY_ANNOTATION",
    "REQUIRED_TOPOLOGY_ANNOTATION", "TOPOLOGY_LABEL",
    "Bind", "ClusterState", "ConditionType", "ConfigError", "CoreError", "Decisions", "Evict",
    "EvictReason", "ExtensionPoint", "FailedScheduling", "FragmentationModel", "FragmentationTracker",
    "GangCommit", "Node", "NodeSelectorRequirement", "Nomination", "Placer", "Plugin", "PluginSpec", "Pod", "PodGroup",
    "PodGroupCondition", "PodGroupPhase", "PodGroupStatus", "PodPhase", "PodRef", "PodShape", "PreemptionPolicy", "Profile",
    "Queue", "QueueState", "Quota", "Reservation", "Resources", "SchedulerConfig", "SelectorOperator",
    "Session", "Snapshot", "SnapshotError", "Status", "StatusCode", "Taint", "TaintEffect", "TieBreak",
    "Toleration", "TolerationOperator", "TopologyMode", "TopologyRequest", "TypicalPods", "Usage",
    "gpu_model_requirement",
    "register_action", "register_plugin", "schedule",
]

_HOME = {
    **dict.fromkeys(('DEFAULT_ACTIONS', 'DEFAULT_PLUGINS', 'PLACEMENT_POLICIES', 'PluginSpec', 'Profile', 'SchedulerConfig', 'TieBreak'), 'refplatform.core.config'),
    **dict.fromkeys(('Bind', 'ConditionType', 'Decisions', 'Evict', 'EvictReason', 'FailedScheduling', 'GangCommit', 'Nomination', 'PodGroupCondition', 'PodGroupStatus', 'Reservation'), 'refplatform.core.decisions'),
    **dict.fromkeys(('ConfigError', 'CoreError', 'SnapshotError'), 'refplatform.core.errors'),
    **dict.fromkeys(('FragmentationModel', 'FragmentationTracker', 'PodShape', 'TypicalPods'), 'refplatform.core.fragmentation'),
    **dict.fromkeys(('ExtensionPoint', 'Plugin', 'Session', 'register_action', 'register_plugin'), 'refplatform.core.framework'),
    **dict.fromkeys(('Node', 'Taint', 'TaintEffect'), 'refplatform.core.node'),
    **dict.fromkeys(('PLACER_PLUGINS', 'Placer'), 'refplatform.core.placer'),
    **dict.fromkeys(('NodeSelectorRequirement', 'Pod', 'PodPhase', 'PodRef', 'PreemptionPolicy', 'SelectorOperator', 'Toleration', 'TolerationOperator', 'gpu_model_requirement'), 'refplatform.core.pod'),
    **dict.fromkeys(('DEFAULT_QUEUE', 'PodGroup', 'PodGroupPhase'), 'refplatform.core.podgroup'),
    **dict.fromkeys(('Queue', 'QueueState'), 'refplatform.core.queue'),
    **dict.fromkeys(('GPU', 'GPU_INDEX_ANNOTATION', 'GPU_MILLI', 'GPU_MODEL_LABEL', 'MILLI_PER_GPU', 'TOPOLOGY_LABEL', 'Quota', 'Resources', 'Usage'), 'refplatform.core.resources'),
    **dict.fromkeys(('schedule',), 'refplatform.core.scheduler'),
    **dict.fromkeys(('Snapshot',), 'refplatform.core.snapshot'),
    **dict.fromkeys(('ClusterState',), 'refplatform.core.state'),
    **dict.fromkeys(('Status', 'StatusCode'), 'refplatform.core.status'),
    **dict.fromkeys(('PREFERRED_TOPOLOGY_ANNOTATION', 'REQUIRED_TOPOLOGY_ANNOTATION', 'TopologyMode', 'TopologyRequest'), 'refplatform.core.topology'),
}
"""Each exported name -> the module it lives in."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
