"""API errors as upstream ``Status`` objects.

Every refusal the server makes is an :class:`ApiError` carrying the HTTP code,
the upstream ``reason`` and, for validation, one cause per bad field, so that
the official client raises ``ApiException`` with the same body a real
kube-apiserver would send.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from refplatform.errors import RefPlatformError
from refplatform.resources import ResourceType


@dataclass(frozen=True)
class Cause:
    """One field-level reason for an Invalid or BadRequest answer."""

    field: str
    message: str
    reason: str = "FieldValueInvalid"

    def to_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}


@dataclass
class ApiError(RefPlatformError):
    """A request the server refuses; rendered as a Status with ``code`` and ``reason``."""

    code: int
    reason: str
    message: str
    name: str = ""
    group: str = ""
    kind: str = ""
    causes: list[Cause] = field(default_factory=list)
    retry_after: int | None = None
    why: str = ""
    """A refusal's short reason, for the audit log's ``authorization.k8s.io/reason`` (not sent on its own)."""

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def to_status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [c.to_dict() for c in self.causes]
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        status: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        }
        if details:
            status["details"] = details
        return status


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.group_resource} "{name}" not found', name, rt.group, rt.plural)


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.group_resource} "{name}" already exists',
                    name, rt.group, rt.plural)


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}',
                    name, rt.group, rt.plural)


def invalid(rt: ResourceType, name: str, causes: list[Cause]) -> ApiError:
    summary = ", ".join(f"{c.field}: {c.message}" for c in causes)
    return ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {summary}', name, rt.group, rt.kind,
                    causes)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(user: str, verb: str, rt: ResourceType | None, namespace: str, name: str = "",
              subresource: str = "", why: str = "") -> ApiError:
    """An authorizer's refusal, worded as upstream's (``pods "x" is forbidden: User "u" cannot create resource
    "pods/binding" in API group "" in the namespace "ns"``), with ``: <why>`` after it when there is one."""
    resource = (rt.plural if rt else "resource") + (f"/{subresource}" if subresource else "")
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    denial = f'User "{user}" cannot {verb} resource "{resource}" in API group "{rt.group if rt else ""}"{where}'
    return admission_forbidden(rt, name, denial + (f": {why}" if why else ""), why or denial)


def admission_forbidden(rt: ResourceType | None, name: str, message: str, why: str = "") -> ApiError:
    """A refusal after authorization (quota, NodeRestriction, protected annotations), shaped as upstream's
    ``<resource> "<name>" is forbidden: <message>``."""
    what = rt.group_resource if rt else ""
    subject = f'{what} "{name}" is forbidden' if what and name else f"{what} is forbidden" if what else "forbidden"
    return ApiError(403, "Forbidden", f"{subject}: {message}", name, rt.group if rt else "",
                    rt.plural if rt else "", why=why or message)


def unauthorized(why: str) -> ApiError:
    return ApiError(401, "Unauthorized", f"Unauthorized: {why}", why=why)


def too_large(limit: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge",
                    f"Request entity too large: limit is {limit} bytes")


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_allowed(verb: str, what: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({verb} {what})")


def unsupported_media_type(message: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message)


def resource_not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")


def service_unavailable(message: str) -> ApiError:
    return ApiError(503, "ServiceUnavailable", message)
