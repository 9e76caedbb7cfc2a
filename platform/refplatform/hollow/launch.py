"""Start a hollow fleet beside a running :class:`refplatform.cluster.Cluster` (instead of its agents)."""

from __future__ import annotations

import sys

from refplatform.cluster import Cluster, ClusterError, ManagedProcess, wait_until
from refplatform.credentials import node_user
from refplatform.hollow.tokens import write_node_tokens

__all__ = ["NODE_TOKENS_FILE", "start_hollow", "wait_nodes_ready"]

NODE_TOKENS_FILE = "hollow-node-tokens.yaml"


def start_hollow(cluster: Cluster, *, workers: int = 8, heartbeat: float | None = None,
                 nice: int = 0) -> ManagedProcess:
    """Spawn ``python -m refplatform.hollow`` for the cluster's working nodes, each with its own node
    identity (made by ``cluster.start_server()``), on the cluster's profile heartbeat unless ``heartbeat``.
    ``nice``: run it at that niceness (a benchmark on a shared machine)."""
    nodes = cluster.spec.node_names()
    tokens = cluster.credentials.ensure_many([(node_user(n), "node", {"node": n}) for n in nodes])
    path = write_node_tokens(cluster.data_dir / NODE_TOKENS_FILE, {n: tokens[node_user(n)] for n in nodes})
    argv = [sys.executable, "-m", "refplatform.hollow", "--api", cluster.url, "--node-tokens-file", str(path),
            "--ca-file", str(cluster.ca_file), "--gpus", str(cluster.spec.gpus_per_node),
            "--gpu-model", cluster.spec.gpu_model, "--profile", cluster.spec.profile, "--workers", str(workers)]
    if heartbeat is not None or cluster.spec.heartbeat is not None:
        argv += ["--heartbeat", str(heartbeat if heartbeat is not None else cluster.spec.agent_heartbeat)]
    if nice:
        argv = ["nice", "-n", str(nice), *argv]
    return ManagedProcess.spawn("hollow", argv, cluster.data_dir / "logs" / "hollow.log")


def wait_nodes_ready(cluster: Cluster, hollow: ManagedProcess, timeout: float) -> None:
    """Wait until every working node of the cluster is Ready (the hollow fleet registered them all)."""
    want = len(cluster.spec.node_names())
    with cluster.http_client(timeout=30) as http:
        def ready() -> bool:
            if not hollow.alive():
                raise ClusterError(f"the hollow fleet exited with code {hollow.popen.returncode}; its log "
                                   f"({hollow.log_path}) ends with:\n{hollow.tail()}")
            return cluster.readiness(http)[0] >= want
        wait_until(ready, timeout, f"{want} hollow nodes Ready (log: {hollow.log_path})", interval=0.5)
