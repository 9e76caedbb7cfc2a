"""Clocks for the node agent: the wall clock, and a virtual one for tests.

Simulated workloads never sleep and never read the time themselves; the agent
asks them to advance to ``clock.now()``, so a test drives them by moving a
:class:`VirtualClock` forward.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "SystemClock", "VirtualClock", "micro_time", "rfc3339", "rfc3339_millis", "rfc3339_nano"]


class Clock(Protocol):
    """Tells the current UTC time (an aware datetime)."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class VirtualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 11, 30, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += timedelta(seconds=seconds)
        return self._now


def rfc3339(t: datetime) -> str:
    """Kubernetes ``Time``: seconds precision, ``Z``."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: datetime) -> str:
    """Kubernetes ``MicroTime`` (Lease renewTime): microseconds, ``Z``."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_millis(t: datetime) -> str:
    """Log-line timestamps: milliseconds, ``Z``."""
    t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def rfc3339_nano(t: datetime) -> str:
    """The kubelet's ``timestamps=true`` prefix (RFC 3339 with nanoseconds)."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
