"""Self reviews answer from the gates: what a tenant is told it may do is what the gates let it do."""

from __future__ import annotations

import pytest

from refplatform.api.accessreview import access, rules
from refplatform.api.auth import Identity, Role
from refplatform.api.gates import Attributes, decide
from refplatform.resources import REGISTRY

TENANT = Identity("tenant-a", Role.TENANT, frozenset({"team-a"}))
NODE = Identity("system:node:n0", Role.NODE, node="n0")


def _ask(who: Identity, verb: str, resource: str, group: str = "", namespace: str = "team-a", name: str = "",
         subresource: str = "") -> dict:
    return access(who, {"resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                               "namespace": namespace, "name": name, "subresource": subresource}})


@pytest.mark.parametrize(("who", "question", "allowed"), [
    (TENANT, ("create", "pods"), True),
    (TENANT, ("create", "secrets"), True),
    (TENANT, ("create", "pods", "", "team-b"), False),
    (TENANT, ("create", "pods", "", "team-a", "", "binding"), False),
    (TENANT, ("get", "pods", "", "team-a", "", "binding"), False),  # binding serves create only
    (TENANT, ("update", "resourcequotas"), False),
    (TENANT, ("list", "pods", "", ""), False),
    (TENANT, ("create", "widgets", "example.com"), False),
    (NODE, ("update", "nodes", "", "", "n0", "status"), True),
    (NODE, ("update", "nodes", "", "", "n1"), False),
    (Identity("admin", Role.CLUSTER_ADMIN), ("create", "widgets", "example.com"), True),
])
def test_the_answer_is_the_gates_answer(who: Identity, question: tuple, allowed: bool) -> None:
    status = _ask(who, *question)
    assert status["allowed"] is allowed and status["reason"]
    assert status.get("denied", False) is (not allowed)


def test_every_rule_listed_is_let_through_by_the_gates_and_nothing_else_is() -> None:
    listed = {(group, res, verb) for rule in rules(TENANT, "team-a")["resourceRules"]
              for group in rule["apiGroups"] for res in rule["resources"] for verb in rule["verbs"]}
    for rt in REGISTRY.types:
        for sub in ("", *rt.subresources):
            name = f"{rt.plural}/{sub}" if sub else rt.plural
            for verb in ("get", "create", "update", "delete"):
                let = decide(TENANT, Attributes(verb, rt, "team-a" if rt.namespaced else "", "", sub)).allowed
                if (rt.group, name, verb) in listed:
                    assert let, (name, verb)
    assert ("", "secrets", "create") in listed and ("", "pods/binding", "create") not in listed


def test_exactly_one_kind_of_attributes() -> None:
    from refplatform.api.errors import ApiError
    with pytest.raises(ApiError, match="exactly one of nonResourceAttributes or resourceAttributes"):
        access(TENANT, {})
    assert access(TENANT, {"nonResourceAttributes": {"path": "/version", "verb": "get"}})["allowed"] is True
    assert access(TENANT, {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}})["allowed"] is False
