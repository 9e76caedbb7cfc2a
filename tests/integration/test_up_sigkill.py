"""A run SIGKILLed mid-drill against a cluster `firedrill up` runs in another process (issue 45, Done-when 1 and 2).

`firedrill up` runs the reference platform; `firedrill run --kubeconfig ... --profile examples/embedded/up.yaml`
drills it from another process, as a real cluster is drilled: it pulls a node through `firedrill node` (the
cluster's out-of-band control, which `firedrill up` serves) with an expiry. The run is SIGKILLed at an instant
drawn at random (seeded, printed) after its fault was written down, as a CI timeout would: no rollback runs.

- with `firedrill recover`: a run started before it refuses the cluster, naming the fault and the recover command;
  after it, the cluster is as before the run (every node Ready and schedulable, taints and labels as before, every
  GPU allocatable, nothing of the run left);
- without it: the fault undoes itself at its expiry, done by `firedrill up`, and the node serves again.

The benchmark of every shipped feature at 20 instants is tests/bench/bench_sigkill.py (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.up_cluster import (FIREDRILL, UpCluster, cluster_state, journal_has_open_fault, kill_group,
                                          start_run, up_profile, wait_for)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("FIREDRILL_SIGKILL_SEED", "45"))
KEYWORD = "survives"
"""The shipped node pull scenario 5.1 (features/node_pull.feature), unedited."""


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpCluster]:
    with UpCluster.start(tmp_path_factory.mktemp("up")) as cluster:
        yield cluster


@pytest.fixture
def features(tmp_path: Path) -> Path:
    folder = tmp_path / "features"
    folder.mkdir()
    shutil.copy(REPO / "features" / "node_pull.feature", folder)
    return folder


def _kill_mid_fault(up: UpCluster, tmp_path: Path, features: Path, profile: Path, rng: random.Random,
                    trigger: Callable[[], bool], what: str, most: float = 4.0) -> float:
    """Start a run, wait until ``trigger`` holds, SIGKILL the run (its whole group) a random instant up to ``most``
    seconds later."""
    run = start_run(up, profile, features, tmp_path / "reports", KEYWORD)
    try:
        wait_for(trigger, 120, what, alive=lambda: run.poll() is None, log_path=tmp_path / "reports" / "run.log")
        after = rng.uniform(0.0, most)
        time.sleep(after)  # the instant itself is what this test draws: no condition to wait on instead
    finally:
        kill_group(run)
    return after


def _a_node_down(up: UpCluster) -> bool:
    return any(not node.ready for node in cluster_state(up).nodes.values())


def test_recover_brings_back_the_cluster_a_killed_run_left_and_a_run_before_it_refuses(
        up: UpCluster, tmp_path: Path, features: Path) -> None:
    rng = random.Random(SEED)
    profile = up_profile(up, tmp_path / "up.yaml", expire_seconds=120)
    before = cluster_state(up)
    for attempt in range(2):
        after = _kill_mid_fault(up, tmp_path / f"kill{attempt}", features, profile, rng,
                                lambda: journal_has_open_fault(up.state), "the run to write down its fault")
        where = f"(seed {SEED}, attempt {attempt}: SIGKILL {after:.2f} s after the fault was written down)"
        refused = up.firedrill("run", "--kubeconfig", str(up.kubeconfig), "--profile", str(profile), "--features",
                               str(features), "-k", KEYWORD, "--reports", str(tmp_path / "refused"), "--no-live",
                               timeout=120)
        assert refused.returncode == 4, f"{where}\n{refused.stdout}\n{refused.stderr}"
        assert "firedrill recover --kubeconfig" in refused.stderr, f"{where}\n{refused.stderr}"
        assert " kill --expire-seconds 120" in refused.stderr, f"{where}\n{refused.stderr}"
        recovered = up.firedrill("recover", "--kubeconfig", str(up.kubeconfig), "--profile", str(profile))
        assert recovered.returncode == 0, f"{where}\n{recovered.stdout}\n{recovered.stderr}"
        wait_for(lambda: cluster_state(up) == before, 60, f"the cluster to be as before the run {where}",
                 show=lambda: f"before {before}\nnow    {cluster_state(up)}")


def test_without_recover_the_fault_undoes_itself_at_its_expiry(up: UpCluster, tmp_path: Path,
                                                                features: Path) -> None:
    """Killed while its node is down (the fault surely stands): `firedrill up` powers the node on at the fault's
    expiry, and the node serves again with nobody running recover."""
    rng = random.Random(SEED + 1)
    expire = 8.0
    profile = up_profile(up, tmp_path / "up.yaml", expire_seconds=expire)
    before = cluster_state(up)
    # The scenario undoes its fault about 1.5 s after the node is seen down (detect, evict, replace, resume).
    after = _kill_mid_fault(up, tmp_path, features, profile, rng, lambda: _a_node_down(up), "the pulled node down",
                            most=0.5)
    where = f"(seed {SEED + 1}: SIGKILL {after:.2f} s after the node was seen down)"
    assert journal_has_open_fault(up.state), f"the dead run's fault is still open in its journal {where}"
    wait_for(lambda: cluster_state(up).nodes == before.nodes, expire + 30,
             f"every node serving again by itself {where}",
             show=lambda: f"before {before.nodes}\nnow    {cluster_state(up).nodes}")
    # What the dead run made (its canary's pods) is recover's to remove; the fault it closes as expired.
    recovered = up.firedrill("recover", "--kubeconfig", str(up.kubeconfig), "--profile", str(profile))
    assert recovered.returncode == 0, f"{where}\n{recovered.stdout}\n{recovered.stderr}"
    wait_for(lambda: cluster_state(up) == before, 60, f"nothing of the run left {where}")


def test_firedrill_node_without_up_says_how_to_start_it(tmp_path: Path) -> None:
    result = subprocess.run([*FIREDRILL, "node", "gpu-node-0", "kill", "--data-dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == 4, result.stderr
    assert f"no `firedrill up` is running on {tmp_path}" in result.stderr
