"""Authentication (refplatform.api.auth): the tokens file, its roles, re-reading it, and TokenReview."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from refplatform.api.app import ApiServer
from refplatform.api.auth import Role, TokenAuthenticator, TokensFileError
from refplatform.api.errors import ApiError
from refplatform.api.service import ApiService
from refplatform.store import Store

ENTRIES = [
    {"token": "admin-t", "user": "firedrill-admin", "role": "cluster-admin"},
    {"token": "ctrl-t", "user": "system:kube-controller-manager", "role": "controller"},
    {"token": "sched-t", "user": "system:kube-scheduler", "role": "scheduler"},
    {"token": "node-t", "user": "system:node:n1", "role": "node", "node": "n1"},
    {"token": "tenant-t", "user": "tenant-a", "role": "tenant", "namespaces": ["team-a"]},
]


def write(path: Path, entries: list[dict[str, Any]]) -> Path:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump({"tokens": entries}, fh)
    os.replace(tmp, path)
    return path


def test_every_role_is_read_from_the_file(tmp_path: Path) -> None:
    auth = TokenAuthenticator.from_file(write(tmp_path / "tokens.yaml", ENTRIES))
    roles = {t: (auth.authenticate(f"Bearer {t}").role, auth.authenticate(f"Bearer {t}").node) for t in
             ("admin-t", "ctrl-t", "sched-t", "node-t", "tenant-t")}
    assert roles == {"admin-t": (Role.CLUSTER_ADMIN, ""), "ctrl-t": (Role.CONTROLLER, ""),
                     "sched-t": (Role.SCHEDULER, ""), "node-t": (Role.NODE, "n1"), "tenant-t": (Role.TENANT, "")}
    assert auth.authenticate("Bearer node-t").groups == ("system:nodes", "system:authenticated")


@pytest.mark.parametrize(("entry", "message"), [
    ({"token": "x", "user": "system:node:n1", "role": "node"}, "a node identity needs 'node: <node name>'"),
    ({"token": "x", "user": "u", "role": "controller", "node": "n1"}, "'node' is only for role node"),
    ({"token": "x", "user": "u", "role": "tenant"}, "a tenant needs 'namespaces'"),
    ({"token": "x", "user": "u", "role": "scheduler", "namespaces": ["a"]}, "'namespaces' is only for role tenant"),
    ({"token": "x", "user": "u", "role": "kubelet"}, "role must be one of cluster-admin, tenant, node, controller"),
    ({"user": "u", "role": "node"}, "needs 'token' and 'user'"),
])
def test_a_bad_entry_is_named(tmp_path: Path, entry: dict[str, Any], message: str) -> None:
    with pytest.raises(TokensFileError, match="tokens\\[1\\]: " + message.replace("(", "\\(").replace(")", "\\)")):
        TokenAuthenticator.from_file(write(tmp_path / "tokens.yaml", [ENTRIES[0], entry]))


def test_a_token_added_to_the_file_later_is_accepted_and_a_broken_file_keeps_the_old(tmp_path: Path) -> None:
    path = write(tmp_path / "tokens.yaml", ENTRIES[:1])
    auth = TokenAuthenticator.from_file(path)
    with pytest.raises(ApiError, match="unknown token"):
        auth.authenticate("Bearer node-t")
    write(path, ENTRIES)  # an agent started: its node's token appended
    assert auth.authenticate("Bearer node-t").user == "system:node:n1"
    path.write_text("tokens: [")  # half written, or broken by hand
    assert auth.authenticate("Bearer admin-t").user == "firedrill-admin"
    with pytest.raises(ApiError, match="unknown token"):
        auth.authenticate("Bearer nobody")
    assert auth.authenticate("Bearer tenant-t").role is Role.TENANT  # the tokens read before still hold


def review(server: ApiServer, caller: str, token: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server.app),  # type: ignore[arg-type]
                                     base_url="https://testserver") as c:
            return await c.post("/apis/authentication.k8s.io/v1/tokenreviews",
                                headers={"Authorization": f"Bearer {caller}"},
                                json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                      "spec": {"token": token}})
    return asyncio.run(go())


def test_token_review_tells_an_agent_who_a_token_is(tmp_path: Path) -> None:
    store = Store(tmp_path)
    server = ApiServer(ApiService(store), TokenAuthenticator.from_file(write(tmp_path / "tokens.yaml", ENTRIES)))
    answer = review(server, "node-t", "admin-t")
    assert answer.status_code == 201
    assert answer.json()["status"] == {"authenticated": True, "user": {
        "username": "firedrill-admin", "groups": ["system:masters", "system:authenticated"],
        "extra": {"firedrill.dev/role": ["cluster-admin"]}}}
    assert "admin-t" not in answer.text  # the token is not echoed
    node = review(server, "admin-t", "node-t").json()["status"]["user"]
    assert node["extra"] == {"firedrill.dev/role": ["node"], "firedrill.dev/node": ["n1"]}
    assert review(server, "admin-t", "forged").json()["status"] == {"authenticated": False,
                                                                     "error": "Unauthorized: unknown token"}
    refused = review(server, "tenant-t", "admin-t")
    assert refused.status_code == 403 and "only cluster-admin, controller and node" in refused.json()["message"]
    assert review(server, "admin-t", "").status_code == 422
    store.close()
