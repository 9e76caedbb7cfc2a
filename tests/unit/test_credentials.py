"""The embedded cluster's identities (refplatform.credentials): one per component, kept across restarts, files
0600, the agents' allow-list holds digests only, and the API server accepts the tokens file as written."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from refplatform.agent.access import ClientList
from refplatform.api.auth import Role, TokenAuthenticator
from refplatform.credentials import (AGENT_CLIENTS_FILE, TOKENS_FILE, AgentEndpoint, Credentials, CredentialsError,
                                     token_digest)

USERS = {"firedrill-admin": "cluster-admin", "system:kube-controller-manager": "controller",
         "system:kube-scheduler": "scheduler", "tenant-a": "tenant", "tenant-b": "tenant",
         "system:node:n0": "node"}


def mode(path: Path) -> int:
    return os.stat(path).st_mode & 0o777


def test_bootstrap_makes_one_identity_per_component(tmp_path: Path) -> None:
    tokens = Credentials(tmp_path).bootstrap(["n0"])
    assert USERS == {e["user"]: e["role"] for e in
                                                  yaml.safe_load((tmp_path / TOKENS_FILE).read_text())["tokens"]}
    assert len(set(tokens.values())) == len(tokens) == len(USERS), "every identity has its own token"
    for name in (TOKENS_FILE, AGENT_CLIENTS_FILE, "admin-token", "controller-token", "scheduler-token",
                 "kubelet-client-token"):
        assert mode(tmp_path / name) == 0o600, name
    assert (tmp_path / "admin-token").read_text() == tokens["firedrill-admin"]
    # The API server reads the file as written: each identity with its role (and a node its node name).
    auth = TokenAuthenticator.from_file(tmp_path / TOKENS_FILE)
    assert auth.authenticate(f"Bearer {tokens['system:node:n0']}").role is Role.NODE
    assert auth.authenticate(f"Bearer {tokens['system:node:n0']}").node == "n0"
    assert auth.authenticate(f"Bearer {tokens['tenant-b']}").namespaces == frozenset({"firedrill-neighbour"})
    assert auth.authenticate(f"Bearer {tokens['system:kube-scheduler']}").role is Role.SCHEDULER


def test_tokens_are_kept_across_restarts_and_missing_entries_added(tmp_path: Path) -> None:
    # An older data directory: only the admin, as refplatform.cluster wrote it before issue 15.
    (tmp_path / TOKENS_FILE).write_text(yaml.safe_dump({"tokens": [
        {"token": "old-admin-token-0123456789", "user": "firedrill-admin", "role": "cluster-admin"}]}))
    first = Credentials(tmp_path).bootstrap()
    assert first["firedrill-admin"] == "old-admin-token-0123456789"
    again = Credentials(tmp_path).bootstrap()
    assert again == first
    kubelet = (tmp_path / "kubelet-client-token").read_text()
    Credentials(tmp_path).bootstrap()
    assert (tmp_path / "kubelet-client-token").read_text() == kubelet


def test_a_node_started_later_gets_its_identity_and_the_allow_list_follows(tmp_path: Path) -> None:
    creds = Credentials(tmp_path)
    creds.bootstrap()
    clients = ClientList(tmp_path / AGENT_CLIENTS_FILE)
    time.sleep(0.01)  # a distinct modification time for the rewrite
    token, path = creds.node("extra-node")
    assert path == tmp_path / "node-extra-node.token" and path.read_text() == token and mode(path) == 0o600
    assert creds.node("extra-node")[0] == token
    found = clients.lookup(token)
    assert found is not None and found.user == "system:node:extra-node"
    assert found.endpoints == frozenset({AgentEndpoint.HEALTHZ})


def test_the_allow_list_holds_digests_and_who_may_call_what(tmp_path: Path) -> None:
    creds = Credentials(tmp_path)
    tokens = creds.bootstrap(["n0"])
    text = (tmp_path / AGENT_CLIENTS_FILE).read_text()
    assert not any(t in text for t in creds.all_tokens()), "a token in the agents' allow-list"
    clients = ClientList(tmp_path / AGENT_CLIENTS_FILE)
    endpoints = {user: clients.lookup(t).endpoints for user, t in tokens.items()}  # type: ignore[union-attr]
    assert endpoints["firedrill-admin"] == frozenset(AgentEndpoint)
    assert endpoints["tenant-a"] == endpoints["system:kube-scheduler"] == frozenset()
    assert endpoints["system:kube-controller-manager"] == frozenset({AgentEndpoint.HEALTHZ})
    kubelet = clients.lookup((tmp_path / "kubelet-client-token").read_text())
    assert kubelet is not None and kubelet.endpoints == frozenset({AgentEndpoint.LOGS, AgentEndpoint.HEALTHZ})
    assert token_digest("x") == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"


def test_kubeconfigs_are_private_and_name_the_identity(tmp_path: Path) -> None:
    creds = Credentials(tmp_path)
    tokens = creds.bootstrap()
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    path = creds.kubeconfig("tenant-a.kubeconfig", "https://127.0.0.1:1", "tenant-a", tokens["tenant-a"], ca,
                            "firedrill-tenant")
    doc = yaml.safe_load(path.read_text())
    assert mode(path) == 0o600
    assert doc["users"] == [{"name": "tenant-a", "user": {"token": tokens["tenant-a"]}}]
    assert doc["contexts"][0]["context"] == {"cluster": "firedrill", "user": "tenant-a", "namespace": "firedrill-tenant"}


def test_a_broken_tokens_file_is_named(tmp_path: Path) -> None:
    (tmp_path / TOKENS_FILE).write_text("tokens: [{user: x}]\n")
    with pytest.raises(CredentialsError, match="tokens.yaml: expected 'tokens:' as a list"):
        Credentials(tmp_path).bootstrap()
    (tmp_path / TOKENS_FILE).write_text(yaml.safe_dump({"tokens": [
        {"token": "t0123456789", "user": "tenant-a", "role": "cluster-admin"}]}))
    with pytest.raises(CredentialsError, match="user 'tenant-a' has role 'cluster-admin', not 'tenant'"):
        Credentials(tmp_path).bootstrap()
