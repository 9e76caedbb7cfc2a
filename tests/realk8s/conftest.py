"""The ``real_cluster`` fixture: an upstream control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) built from Go modules by ``build.sh`` and started on loopback once per session.

The builds (``build.sh``, ``build_kueue.sh`` when Kueue's tests are collected and ``build_kwok.sh`` when the
tests at size are) run when collection is
finished (pytest_collection_finish), before any test's timeout starts: a cold build takes minutes, a cached
one milliseconds. The fixtures then only reuse what was built.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.realk8s.agents import RefAgents
from tests.realk8s.cluster import RealCluster, RealClusterSpec
from tests.realk8s.standin import node_user

BUILD_SCRIPT = Path(__file__).with_name("build.sh")
KUEUE_BUILD_SCRIPT = Path(__file__).with_name("build_kueue.sh")
KUEUE_TESTS = ("test_kueue_gang.py", "test_topology.py")
KWOK_BUILD_SCRIPT = Path(__file__).with_name("build_kwok.sh")
KWOK_TESTS = "test_at_size.py"
BUILD_TIMEOUT_S = 3600
NO_GO_EXIT = 3

#: Tuned the way the node-pull drill wants it: a node is Unknown seconds after its Lease stops.
NODE_MONITOR_GRACE_PERIOD_S = 6.0
NODE_MONITOR_PERIOD_S = 1.0
DEFAULT_UNREACHABLE_TOLERATION_S = 3
DEFAULT_NOT_READY_TOLERATION_S = 3
#: Kubelet stand-ins the tests may register (each gets a system:node:<name> token).
STANDIN_NODES = ("gpu-node-0", "gpu-node-1", "gpu-node-2", "gpu-node-3")
#: refplatform agents the tests may start as kubelets (each gets a system:node:<name> token too).
AGENT_NODES = tuple(f"refagent-{i}" for i in range(6))


@dataclass(frozen=True)
class BuildOutcome:
    """What build.sh gave: the bin folder, or why the real-cluster tests skip or fail."""

    bin_dir: Path | None = None
    skip_reason: str = ""
    error: str = ""


_outcomes: dict[Path, BuildOutcome] = {}


def ensure_built(script: Path = BUILD_SCRIPT) -> BuildOutcome:
    """Run a build script once per session (each reuses what it cached), remembering the outcome."""
    if script in _outcomes:
        return _outcomes[script]
    try:
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        outcome = BuildOutcome(error=f"{script} ran past {BUILD_TIMEOUT_S}s")
    else:
        if proc.returncode == NO_GO_EXIT:
            outcome = BuildOutcome(skip_reason=f"no Go toolchain on PATH and nothing cached "
                                               f"({proc.stderr.strip()}); install Go or run {script.name} "
                                               "where Go exists")
        elif proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
            outcome = BuildOutcome(error=f"{script} failed with exit code {proc.returncode}:\n{tail}")
        else:
            outcome = BuildOutcome(bin_dir=Path(proc.stdout.strip().splitlines()[-1]))
    _outcomes[script] = outcome
    return outcome


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    if not any(item.get_closest_marker("realk8s") for item in session.items):
        return
    scripts = [BUILD_SCRIPT]
    if any(item.path.name in KUEUE_TESTS for item in session.items):
        scripts.append(KUEUE_BUILD_SCRIPT)
    if any(item.path.name == KWOK_TESTS for item in session.items):
        scripts.append(KWOK_BUILD_SCRIPT)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for script in scripts:
        if reporter is not None:
            reporter.write_line(f"realk8s: {script.name} (reuses cached binaries; a cold build takes minutes)")
        outcome = ensure_built(script)
        if reporter is not None:
            reporter.write_line(f"realk8s: {outcome.bin_dir or outcome.skip_reason or 'build failed'}")


def _built(script: Path) -> Path:
    outcome = ensure_built(script)
    if outcome.skip_reason:
        pytest.skip(outcome.skip_reason)
    if outcome.error or outcome.bin_dir is None:
        pytest.fail(outcome.error or f"{script.name} printed no folder")
    return outcome.bin_dir


@pytest.fixture(scope="session")
def realk8s_bin_dir() -> Path:
    return _built(BUILD_SCRIPT)


@pytest.fixture(scope="session")
def kueue_dir() -> Path:
    """Kueue's manager, CRDs and webhook configurations (``build_kueue.sh``)."""
    return _built(KUEUE_BUILD_SCRIPT)


@pytest.fixture(scope="session")
def kwok_dir() -> Path:
    """KWOK's controller and its stages (``build_kwok.sh``): the fake nodes of the tests at size."""
    return _built(KWOK_BUILD_SCRIPT)


@pytest.fixture(scope="session")
def real_cluster(realk8s_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """A started control plane with tuned node-lifecycle flags; its logs stay under the session's temp dir."""
    spec = RealClusterSpec(
        bin_dir=realk8s_bin_dir, work_dir=tmp_path_factory.mktemp("realk8s"),
        node_monitor_grace_period=NODE_MONITOR_GRACE_PERIOD_S, node_monitor_period=NODE_MONITOR_PERIOD_S,
        default_unreachable_toleration_seconds=DEFAULT_UNREACHABLE_TOLERATION_S,
        default_not_ready_toleration_seconds=DEFAULT_NOT_READY_TOLERATION_S,
        extra_users=tuple(node_user(name) for name in (*STANDIN_NODES, *AGENT_NODES)))
    cluster = RealCluster(spec)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def ref_agents(real_cluster: RealCluster, tmp_path: Path) -> Iterator[RefAgents]:
    """Start refplatform agents (names from AGENT_NODES) as kubelets of the session's cluster; stops them and
    removes their Nodes, Leases and pods afterwards.  They share one data directory (one nfs share)."""
    agents = RefAgents(real_cluster, tmp_path / "agents")
    try:
        yield agents
    finally:
        agents.close()
