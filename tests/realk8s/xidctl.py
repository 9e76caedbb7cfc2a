"""An Xid injector for a target profile's ``fault.xid`` on the real-cluster tests: a site's injector, here for the
refplatform agents that serve as kubelets (each applies its Node's ``firedrill.dev/inject-xid`` entries as its
GPU's driver would report them, docs/GPU_FAULT.md).

    python tests/realk8s/xidctl.py inject KUBECONFIG NODE UUID XID   fail the node's GPU with that UUID
    python tests/realk8s/xidctl.py inject-at KUBECONFIG NODE GPU INSTANCE XID
                                             fail GPU index GPU (MIG instance INSTANCE; '-' for the whole GPU)
    python tests/realk8s/xidctl.py clear KUBECONFIG NODE             every GPU of the node back in service

The GPU is aimed by its UUID (what the rank's canary logged), mapped to its index the way the simulated GPUs
derive their identities, or by its index and MIG instance (``inject-at``: the slice the agent assigned a
partition isolation tenant, ``{gpu} {instance}`` of the profile's template); only Nodes of the test's own cluster are ever touched, through its admin kubeconfig.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from refplatform.gpu.identity import gpu_uuid

ANNOTATION = "firedrill.dev/inject-xid"
MAX_GPUS = 64


def kubectl(kubeconfig: str, *args: str) -> None:
    subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], check=True, capture_output=True, text=True,
                   timeout=30)


def annotate(kubeconfig: str, node: str, gpu: int, instance: int | None, xid: int) -> None:
    """One injection; its id is new each time (the agent applies each id once, and remembers it across restarts)."""
    entry = {"id": f"xidctl-{gpu}-{'-' if instance is None else instance}-{xid}-{time.time_ns()}", "gpu": gpu,
             "instance": instance, "xid": xid}
    kubectl(kubeconfig, "annotate", "node", node, "--overwrite", f"{ANNOTATION}={json.dumps([entry])}")


def main(argv: list[str]) -> int:
    if len(argv) == 6 and argv[0] == "inject-at":
        _, kubeconfig, node, gpu, instance, xid = argv
        annotate(kubeconfig, node, int(gpu), None if instance == "-" else int(instance), int(xid))
        print(f"xidctl: Xid {xid} on GPU {gpu} instance {instance} of node {node}")
        return 0
    if len(argv) == 5 and argv[0] == "inject":
        _, kubeconfig, node, uuid, xid = argv
        index = next((i for i in range(MAX_GPUS) if gpu_uuid(node, i) == uuid), None)
        if index is None:
            print(f"xidctl: no GPU of node {node} has UUID {uuid}", file=sys.stderr)
            return 1
        annotate(kubeconfig, node, index, None, int(xid))
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
