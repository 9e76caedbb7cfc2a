"""An Xid injector for a target profile's ``fault.xid`` on the real-cluster tests: a site's injector, here for the
refplatform agents that serve as kubelets (each applies its Node's ``firedrill.dev/inject-xid`` entries as its
GPU's driver would report them, docs/GPU_FAULT.md).

    python tests/realk8s/xidctl.py inject KUBECONFIG NODE UUID XID   fail the node's GPU with that UUID
    python tests/realk8s/xidctl.py clear KUBECONFIG NODE             every GPU of the node back in service

The GPU is aimed by its UUID (what the rank's canary logged), mapped to its index the way the simulated GPUs
derive their identities; only Nodes of the test's own cluster are ever touched, through its admin kubeconfig.
"""

from __future__ import annotations

import json
import subprocess
import sys

from refplatform.gpu.identity import gpu_uuid

ANNOTATION = "firedrill.dev/inject-xid"
MAX_GPUS = 64


def kubectl(kubeconfig: str, *args: str) -> None:
    subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], check=True, capture_output=True, text=True,
                   timeout=30)


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "inject":
        _, kubeconfig, node, uuid, xid = argv
        index = next((i for i in range(MAX_GPUS) if gpu_uuid(node, i) == uuid), None)
        if index is None:
            print(f"xidctl: no GPU of node {node} has UUID {uuid}", file=sys.stderr)
            return 1
        entry = [{"id": f"xidctl-{uuid[-8:]}-{xid}", "gpu": index, "instance": None, "xid": int(xid)}]
        kubectl(kubeconfig, "annotate", "node", node, "--overwrite", f"{ANNOTATION}={json.dumps(entry)}")
        print(f"xidctl: Xid {xid} on GPU {index} ({uuid}) of node {node}")
        return 0
    if len(argv) == 3 and argv[0] == "clear":
        _, kubeconfig, node = argv
        kubectl(kubeconfig, "annotate", "node", node, f"{ANNOTATION}-")
        print(f"xidctl: every GPU of node {node} back in service")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
