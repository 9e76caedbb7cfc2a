"""Errors of the node agent."""

from refplatform.errors import RefPlatformError

__all__ = ["AgentError", "WorkloadConfigError"]


class AgentError(RefPlatformError):
    """Root of the node agent's deliberate errors."""


class WorkloadConfigError(AgentError):
    """A pod's workload annotations are invalid (unknown workload, bad number)."""
