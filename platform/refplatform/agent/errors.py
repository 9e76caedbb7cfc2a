"""Errors of the node agent."""

from refplatform.errors import RefPlatformError

__all__ = ["AgentError", "ContainerSpecError", "WorkloadConfigError"]


class AgentError(RefPlatformError):
    """Root of the node agent's deliberate errors."""


class WorkloadConfigError(AgentError):
    """A pod's workload annotations are invalid (unknown workload, bad number)."""


class ContainerSpecError(WorkloadConfigError):
    """A container of a pod cannot be run as a process (bad env, volume, working directory, executable).

    The message starts with the field it is about (``spec.containers[0].env[2].valueFrom.fieldRef.fieldPath: ...``).
    The pod fails to start like any other bad workload (reason ``StartError``).
    """
