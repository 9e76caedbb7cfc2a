"""The architecture's import rules hold (import-linter contracts in pyproject.toml), and the core reads no clock."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (it comes with the test extra)")
    out = subprocess.run([exe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "broken" not in out.stdout.split("Contracts:")[-1] or " 0 broken" in out.stdout


WALL_CLOCK = re.compile(r"\btime\.(time|monotonic|perf_counter|sleep)\(|\bdatetime\.(now|utcnow|today)\(|"
                        r"\bfrom time import\b")


def test_the_pure_core_never_reads_a_clock() -> None:
    offenders = [f"{p.relative_to(REPO)}:{n}" for p in (REPO / "platform/refplatform/core").rglob("*.py")
                 for n, line in enumerate(p.read_text().splitlines(), 1) if WALL_CLOCK.search(line)]
    assert offenders == [], "the core must take time from its snapshot: " + ", ".join(offenders)


def test_the_clusters_spare_pool_names_are_the_healers() -> None:
    """refplatform.cluster (which the harness imports) repeats the healer's names rather than import the core."""
    from refplatform import cluster
    from refplatform.core import healing

    assert (cluster.SPARE_LABEL, cluster.SPARE_TAINT, cluster.QUARANTINE_LABEL) == (
        healing.SPARE_LABEL, healing.SPARE_TAINT, healing.QUARANTINE_LABEL)
