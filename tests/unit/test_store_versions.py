"""The store's resourceVersion survives a restart whether or not the last commit trimmed the change log."""

from __future__ import annotations

from pathlib import Path

import pytest

from refplatform.store import ChangesCompacted, Store

NOW = "2026-12-01T00:00:00Z"


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": {}}


@pytest.mark.parametrize(("commits", "limit"), [(5, 10_000), (300, 10_000), (300, 100), (512, 0), (513, 0)])
def test_a_restarted_store_goes_on_from_its_newest_version(tmp_path: Path, commits: int, limit: int) -> None:
    store = Store(tmp_path, changelog_limit=limit)
    for i in range(commits - 1):
        store.create("pods", pod(f"p{i}"), now=NOW)
    store.delete("pods", "default", "p0")  # the last commit a delete: no object holds its version
    assert store.resource_version == commits
    store.close()
    again = Store(tmp_path, changelog_limit=limit)
    try:
        assert again.resource_version == commits
        created = again.create("pods", pod("next"), now=NOW)
        assert created["metadata"]["resourceVersion"] == str(commits + 1)  # never a version handed out before
        if limit == 0 and commits % 256:
            assert [c.rv for c in again.changes_since(commits)] == [commits + 1]
        elif limit >= commits:
            assert len(again.changes_since(0)) == commits + 1
        else:
            with pytest.raises(ChangesCompacted):
                again.changes_since(0)
    finally:
        again.close()
