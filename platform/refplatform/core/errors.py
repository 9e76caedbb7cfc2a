"""Errors of the pure scheduling core.

Every deliberate failure of :mod:`refplatform.core` is a :class:`CoreError`,
itself a :class:`refplatform.errors.RefPlatformError`.  Programming errors
(``TypeError``, ``KeyError`` on internal tables) are not wrapped.
"""

from __future__ import annotations

from refplatform.errors import RefPlatformError


class CoreError(RefPlatformError):
    """Root of the scheduling core's deliberate errors."""


class ConfigError(CoreError):
    """A :class:`~refplatform.core.config.SchedulerConfig` names an unknown action,
    plugin or placement policy, or carries an out-of-range value."""


class SnapshotError(CoreError):
    """A snapshot is inconsistent: duplicate names, impossible requests
    (e.g. a GPU share of 1000 milli or more), a GPU index that does not exist."""
