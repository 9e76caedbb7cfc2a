"""The credentials a kubeconfig holds are known secrets: the governance drill's tenant and node kubeconfigs on a
real cluster must never reach an archive (drills.target.connect.kubeconfig_secrets)."""

from __future__ import annotations

from pathlib import Path

import yaml

from drills.target.connect import kubeconfig_secrets


def test_tokens_passwords_and_client_keys_are_found(tmp_path: Path) -> None:
    path = tmp_path / "tenant.kubeconfig"
    path.write_text(yaml.safe_dump({"users": [
        {"name": "t", "user": {"token": "tenant-token-0123456789"}},
        {"name": "b", "user": {"username": "bob", "password": "hunter2-hunter2"}},
        {"name": "c", "user": {"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5LWtleS1rZXk="}},
        {"name": "e", "user": {"exec": {"command": "aws"}}}]}))
    assert kubeconfig_secrets(path) == ["tenant-token-0123456789", "hunter2-hunter2", "a2V5LWtleS1rZXk="]


def test_an_unreadable_or_malformed_kubeconfig_gives_none(tmp_path: Path) -> None:
    assert kubeconfig_secrets(tmp_path / "missing") == []
    bad = tmp_path / "bad"
    bad.write_text("users: [unclosed")
    assert kubeconfig_secrets(bad) == []
    bad.write_text("- just a list")
    assert kubeconfig_secrets(bad) == []
