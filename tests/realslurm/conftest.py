"""The real Slurm suite (issue 47): the distribution's munge, slurmctld and slurmd on this machine, on loopback
(``tests/realslurm/cluster.py``).  Run with ``python -m pytest tests/realslurm -m realslurm``; without the Debian
packages (slurmctld slurmd slurm-client munge) every test skips, saying which commands are missing."""

from __future__ import annotations

import pytest

from tests.realslurm.cluster import missing_binaries


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = missing_binaries()
    if not missing:
        return
    skip = pytest.mark.skip(reason=f"Slurm is not installed (missing {', '.join(missing)}): apt-get install "
                                   "slurmctld slurmd slurm-client munge")
    for item in items:
        if "realslurm" in item.keywords:
            item.add_marker(skip)
