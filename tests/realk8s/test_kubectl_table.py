"""docs/KUBECTL.md's table stays true: kubectl prints the same against both servers except where written down."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.realk8s.kubectl_table import STEPS, collect, difference, table

pytestmark = [pytest.mark.realk8s, pytest.mark.kubectl]


def test_same_commands_same_output_except_the_known_differences(realk8s_bin_dir: Path, tmp_path: Path) -> None:
    rows, versions = collect(tmp_path, realk8s_bin_dir)
    assert len(rows) == len(STEPS)
    unexplained = [" ".join(s.args) for s, ref, real in rows if difference(s, ref, real) != "same" and not s.why]
    assert unexplained == [], table(rows, versions)
    by_cmd = {" ".join(s.args): (ref, real) for s, ref, real in rows}
    ref, real = by_cmd["logs printer"]
    assert ref.out == real.out == "line 1\nline 2\nline 3\n"
    ref, real = by_cmd["create -f {dir}/bad.yaml"]
    assert ref.code == real.code == 1 and 'unknown field "spec.containers[0].imagee"' in ref.out
