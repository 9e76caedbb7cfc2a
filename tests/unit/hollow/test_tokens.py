"""The hollow fleet's node tokens file: written 0600, read back, bad files named with the fix."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from refplatform.hollow.errors import HollowError
from refplatform.hollow.fleet import FleetSpec
from refplatform.hollow.tokens import read_node_tokens, write_node_tokens


def test_round_trip_and_private_mode(tmp_path: Path) -> None:
    path = write_node_tokens(tmp_path / "t.yaml", {"n1": "tok1", "n0": "tok0"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_node_tokens(path) == {"n0": "tok0", "n1": "tok1"}


@pytest.mark.parametrize("text, says", [
    ("nodes: []\n", "expected 'nodes:'"),
    ("nodes: {n0: ''}\n", "non-empty"),
    ("tokens: [{user: a, token: b}]\n", "expected 'nodes:'"),
    ("nodes: {n0: [\n", "not YAML"),
])
def test_a_bad_file_is_named(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(HollowError, match=says) as err:
        read_node_tokens(path)
    assert str(path) in str(err.value)


def test_a_missing_file_says_where_it_comes_from(tmp_path: Path) -> None:
    with pytest.raises(HollowError, match="refplatform.hollow.launch"):
        read_node_tokens(tmp_path / "absent.yaml")


def test_fleet_spec_refuses_nonsense() -> None:
    with pytest.raises(HollowError, match="at least one node"):
        FleetSpec(api="https://127.0.0.1:1", tokens={})
    with pytest.raises(HollowError, match="--gpu-model"):
        FleetSpec(api="https://127.0.0.1:1", tokens={"n": "t"}, gpu_model="Z80")
    with pytest.raises(HollowError, match="--heartbeat"):
        FleetSpec(api="https://127.0.0.1:1", tokens={"n": "t"}, heartbeat=0)
