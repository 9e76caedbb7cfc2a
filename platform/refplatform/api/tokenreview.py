"""``POST /apis/authentication.k8s.io/v1/tokenreviews``: who does a bearer token stand for?

As upstream's TokenReview: the caller sends ``{"apiVersion": "authentication.k8s.io/v1", "kind":
"TokenReview", "spec": {"token": "..."}}`` and gets the object back with ``status.authenticated`` and, when
true, ``status.user`` (``username``, ``groups``, ``extra: {firedrill.dev/role: [role]}``; a node identity
also ``firedrill.dev/node: [node]``).  A node agent uses it to check a caller of its own endpoints (it
may cache the answer).  Only cluster-admin, controller and node identities may ask (upstream: whoever may
``create tokenreviews``, such as ``system:auth-delegator``).  The token itself is never echoed back nor
written to the audit log.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from refplatform.api import errors as E
from refplatform.api.audit import AuditNote
from refplatform.api.auth import Identity, Role, TokenAuthenticator
from refplatform.resources import ResourceType, Scope

PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
TOKENREVIEWS = ResourceType("authentication.k8s.io", "v1", "tokenreviews", "tokenreview", "TokenReview",
                            Scope.CLUSTER)
"""Not in the served registry (nothing is stored): named here for refusals and the audit log."""
REVIEWERS = (Role.CLUSTER_ADMIN, Role.CONTROLLER, Role.NODE)


def review(request: Request, who: Identity, raw: bytes, authenticator: TokenAuthenticator | None,
           note: AuditNote) -> dict[str, Any]:
    note.rt, note.verb = TOKENREVIEWS, "create"
    if request.method != "POST":
        raise E.method_not_allowed(request.method, TOKENREVIEWS.group_resource)
    if who.role not in REVIEWERS:
        raise E.forbidden(who.user, "create", TOKENREVIEWS, "", "", "",
                          "only cluster-admin, controller and node identities may review tokens")
    note.reason = f"{who.role.value} reviews a token"
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        raise E.bad_request("the body must be a JSON TokenReview") from None
    token = (body.get("spec") or {}).get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise E.invalid(TOKENREVIEWS, "", [E.Cause("spec.token", "Required value", "FieldValueRequired")])
    status: dict[str, Any] = {"authenticated": False}
    if authenticator is not None:
        try:
            found = authenticator.authenticate(f"Bearer {token}")
        except E.ApiError as exc:
            status["error"] = exc.message
        else:
            extra = {"firedrill.dev/role": [found.role.value]}
            if found.node:
                extra["firedrill.dev/node"] = [found.node]
            status = {"authenticated": True, "user": {"username": found.user, "groups": list(found.groups),
                                                      "extra": extra}}
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {},
            "spec": {}, "status": status}
