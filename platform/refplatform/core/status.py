"""Typed results of plugins, modelled on kube-scheduler's framework ``Status``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class StatusCode(Enum):
    """Outcome of one plugin call."""

    SUCCESS = "Success"
    """The plugin agrees; continue."""
    ERROR = "Error"
    """An internal error; the pod is retried next cycle with no other consequence."""
    UNSCHEDULABLE = "Unschedulable"
    """Does not fit now; preemption or reclaim might make room."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    """Does not fit and evicting pods would not help (selector, taint, model mismatch)."""
    WAIT = "Wait"
    """Permit: hold the placement until the gang is complete."""
    SKIP = "Skip"
    """The plugin does not apply to this pod; treated as success."""


@dataclass(frozen=True, slots=True)
class Status:
    code: StatusCode = StatusCode.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code in (StatusCode.SUCCESS, StatusCode.SKIP)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    @classmethod
    def success(cls, plugin: str = "") -> Status:
        return cls(StatusCode.SUCCESS, (), plugin)

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "", resolvable: bool = True) -> Status:
        code = StatusCode.UNSCHEDULABLE if resolvable else StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE
        return cls(code, tuple(reasons), plugin)

    @classmethod
    def wait(cls, *reasons: str, plugin: str = "") -> Status:
        return cls(StatusCode.WAIT, tuple(reasons), plugin)


SUCCESS = Status()
