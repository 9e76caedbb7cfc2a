"""The hollow fleet's node identities: one token per node, in one file the fleet alone reads (mode 0600).

The file is YAML, ``nodes: {<node name>: <token>}``.  Each token must already be in the API server's
tokens file as ``system:node:<node name>`` (role ``node``); :func:`refplatform.hollow.launch.start_hollow`
writes it from the cluster's credentials.  No other identity is in it: the fleet can write nothing but its
own nodes' Nodes, Leases and pod statuses.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from refplatform.credentials import write_private
from refplatform.hollow.errors import HollowError

__all__ = ["read_node_tokens", "write_node_tokens"]


def write_node_tokens(path: Path, tokens: dict[str, str]) -> Path:
    """Write ``{node: token}`` to ``path`` (mode 0600, atomically)."""
    write_private(path, yaml.safe_dump({"nodes": dict(tokens)}, sort_keys=True))
    return path


def read_node_tokens(path: Path) -> dict[str, str]:
    """``{node: token}`` from a file :func:`write_node_tokens` wrote; a clear error otherwise."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise HollowError(f"cannot read the node tokens file {path}: {exc.strerror}; give --node-tokens-file "
                          "a file written by refplatform.hollow.launch") from None
    except yaml.YAMLError as exc:
        raise HollowError(f"{path}: not YAML ({exc}); expected 'nodes: {{<node>: <token>}}'") from None
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, dict) or not nodes or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in nodes.items()):
        raise HollowError(f"{path}: expected 'nodes:' mapping each node name to its token (non-empty strings)")
    return dict(nodes)
