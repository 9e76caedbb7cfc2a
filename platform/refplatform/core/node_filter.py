"""The :class:`NodeFilter` protocol: what a filter plugin registers at ``ExtensionPoint.FILTER``.

It lives below :mod:`refplatform.core.framework` so that modules the framework
uses (:mod:`refplatform.core.pending`) can name it without importing the framework.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from refplatform.core.jobs import Task
from refplatform.core.state import ClusterState

__all__ = ["NodeFilter"]


class NodeFilter(Protocol):
    """A vectorised predicate over all nodes of a :class:`ClusterState`."""

    name: str

    def mask(self, task: Task, state: ClusterState) -> np.ndarray: ...

    def explain(self, task: Task, state: ClusterState) -> list[tuple[str, np.ndarray]]: ...
