"""The pure entry point: ``schedule(snapshot, config) -> Decisions``.

No I/O, no clock: the live controller builds a :class:`Snapshot` from the store
(stamping ``now`` from its own clock) and applies the returned decisions; the
trace replay uses the same plugins through :class:`~refplatform.core.placer.Placer`.
"""

from __future__ import annotations

import refplatform.core.actions  # noqa: F401  (registers actions)
import refplatform.core.plugins  # noqa: F401  (registers plugins)
from refplatform.core.config import SchedulerConfig
from refplatform.core.decisions import Decisions
from refplatform.core.framework import ACTIONS, Session
from refplatform.core.snapshot import Snapshot

DEFAULT_CONFIG = SchedulerConfig()


def schedule(snapshot: Snapshot, config: SchedulerConfig = DEFAULT_CONFIG) -> Decisions:
    """Run one cycle (``config.actions`` in order) and return what to do."""
    ssn = Session(snapshot, config)
    for name in config.actions:
        ACTIONS[name].execute(ssn)
    return ssn.close()
