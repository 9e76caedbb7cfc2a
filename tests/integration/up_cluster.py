"""A cluster `firedrill up` runs in a process of its own, and what a test reads of it (tests of a run drilling it
from another process, and tests/bench/bench_sigkill.py)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from drills.kube.driver import NODE, POD, KubeDriver
from drills.kube.flavors import RUN_LABEL
from drills.target.journal import JournalError, read_journal
from drills.target.safety import is_ready
from drills.target.service import POOL_TAINTS

REPO = Path(__file__).resolve().parents[2]
FIREDRILL = [sys.executable, "-c", "from drills.cli import main; main()"]
"""The firedrill command line of this checkout (the console script may be another checkout's)."""
UP_PROFILE = REPO / "examples" / "embedded" / "up.yaml"


@dataclass
class UpCluster:
    """`firedrill up` on ``data_dir``, started by this process; ``state`` is the journals' folder its runs share."""

    root: Path
    process: subprocess.Popen[bytes]
    driver: KubeDriver | None = None
    """One client of its API server for every reading (:func:`cluster_state` polls it)."""

    @property
    def data_dir(self) -> Path:
        return self.root / "cluster"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    def env(self) -> dict[str, str]:
        return {**os.environ, "FIREDRILL_STATE_DIR": str(self.state), "CI": "true", "PYTEST_ADDOPTS": ""}

    def firedrill(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*FIREDRILL, *args], capture_output=True, text=True, timeout=timeout, env=self.env(),
                              cwd=self.root, check=False)

    @classmethod
    @contextmanager
    def start(cls, root: Path, nodes: int = 3) -> Iterator["UpCluster"]:
        """Start `firedrill up --spares 0` (no spare pool, so a node's role after a pull is the one it had) and wait
        until it says it is up; stop it (SIGTERM, then SIGKILL) at the end."""
        log = open(root / "up.log", "wb")
        process = subprocess.Popen([*FIREDRILL, "up", "--nodes", str(nodes), "--spares", "0", "--data-dir",
                                    str(root / "cluster")], stdout=log, stderr=subprocess.STDOUT, cwd=root,
                                   env={**os.environ, "CI": "true"}, start_new_session=True)
        cluster = cls(root, process)
        try:
            wait_for(lambda: b"Reference cluster up" in (root / "up.log").read_bytes(), 90, "`firedrill up` to start",
                     alive=lambda: process.poll() is None, log_path=root / "up.log")
            cluster.driver = KubeDriver.connect(cluster.kubeconfig)
            yield cluster
        finally:
            if cluster.driver is not None:
                cluster.driver.close()
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            log.close()


def up_profile(up: UpCluster, path: Path, expire_seconds: float) -> Path:
    """examples/embedded/up.yaml, its commands pointed at this cluster's data directory and this checkout, with
    ``expire_seconds``."""
    import yaml

    profile = yaml.safe_load(UP_PROFILE.read_text())
    prefix = shlex.join(FIREDRILL)
    for key in ("command_template", "restore_template"):
        profile["fault"][key] = (profile["fault"][key].replace("firedrill ", prefix + " ", 1)
                                 .replace(".firedrill/cluster", str(up.data_dir)))
    profile["fault"]["expire_seconds"] = expire_seconds
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


def start_run(up: UpCluster, profile: Path, features: Path, reports: Path, keyword: str | None = None
              ) -> subprocess.Popen[bytes]:
    """`firedrill run` against the cluster, in a session of its own (a SIGKILL of its group is the CI's)."""
    reports.mkdir(parents=True, exist_ok=True)
    only = ["-k", keyword] if keyword else []
    with open(reports / "run.log", "wb") as log:  # the child holds its own copy of the descriptor
        return subprocess.Popen([*FIREDRILL, "run", "--kubeconfig", str(up.kubeconfig), "--profile", str(profile),
                                 "--features", str(features), "--reports", str(reports), "--no-live", *only],
                                stdout=log, stderr=subprocess.STDOUT, cwd=up.root, env=up.env(),
                                start_new_session=True)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process's whole group (it was started in a session of its own), as a CI runner's timeout does."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended by itself: nothing to kill
        pass
    process.wait(timeout=10)


def journal_has_open_fault(state: Path) -> bool:
    """Whether some journal under ``state`` holds a fault written down and not yet undone."""
    for path in state.rglob("*.jsonl"):
        try:
            if read_journal(path).unfinished:
                return True
        except JournalError:  # a journal being created: read it on the next poll
            continue
    return False


@dataclass(frozen=True)
class NodeState:
    ready: bool
    schedulable: bool
    taints: tuple[str, ...]
    labels: tuple[str, ...]
    gpus: str


@dataclass(frozen=True)
class ClusterState:
    """What "the cluster as before the run" compares: each node's service, and what drill runs left.  The spare
    pool's taint and label are left out: they are the platform's role for a node, which its healer moves when a
    node is lost and returns (a node down longer than its grace comes back as a spare), not a run's mark
    (drills.target.service.POOL_TAINTS, docs/SAFETY.md "Back in service")."""

    nodes: dict[str, NodeState]
    drill_pods: tuple[str, ...]


def cluster_state(up: UpCluster) -> ClusterState:
    driver = up.driver
    assert driver is not None, "the cluster is not started"
    nodes = {}
    for node in driver.list(NODE):
        meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
        nodes[meta["name"]] = NodeState(
            is_ready(node), not spec.get("unschedulable"),
            tuple(sorted(f"{t.get('key')}:{t.get('effect')}" for t in spec.get("taints") or []
                         if t.get("key") not in POOL_TAINTS)),
            tuple(sorted(f"{k}={v}" for k, v in (meta.get("labels") or {}).items() if k not in POOL_TAINTS)),
            str((status.get("allocatable") or {}).get("nvidia.com/gpu", "0")))
    pods = tuple(sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                        for p in driver.list(POD, label_selector=RUN_LABEL)))
    return ClusterState(nodes, pods)


def wait_for(condition: Callable[[], bool], timeout: float, what: str, *, alive: Callable[[], bool] | None = None,
             log_path: Path | None = None, show: Callable[[], str] | None = None) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds (or at once when ``alive`` says the
    process it waits on died), with its log's tail and what ``show`` says."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except (OSError, ValueError):
            pass
        died = alive is not None and not alive()
        if died or time.monotonic() >= deadline:
            tail = log_path.read_text(errors="replace")[-3000:] if log_path is not None and log_path.exists() else ""
            extra = show() if show is not None else ""
            raise AssertionError(f"{'the process died before ' if died else 'timed out waiting for '}{what}\n"
                                 f"{extra}\n{tail}")
        time.sleep(0.2)
